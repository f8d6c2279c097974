// The 16-bit (mixed-precision) CUDA paths of the row and elementwise ops GPT-2 uses outside attention and the GEMMs,
// once for bf16 and once for fp16 (typed tests): Add, LayerNorm, GELU, BiasAdd/BiasGrad, SoftmaxCrossEntropy/Argmax
// with padded columns, Embedding. Each is checked against the CPU f64 reference run on the same rounded inputs, with
// odd sizes (scalar paths) and aligned multiples of 8 (128-bit paths). Tolerances scale with the type's kTol: bf16
// keeps 8 significant bits (one rounding is 2^-9 relative), fp16 11 (2^-11), so fp16's kTol is bf16's / 4. Then
// per type: the casts against the host rounding, and fp16 Matmul / every MatmulEpilogue (fused and unfused; the
// bf16 GEMMs are in matmul_bf16_test). Every test but the CPU Cast's needs a GPU and skips without one.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include "core/bf16.h"
#include "core/check.h"
#include "core/device_context.h"
#include "kernels/bias.h"
#include "kernels/elementwise.h"
#include "kernels/embedding.h"
#include "kernels/gelu.h"
#include "kernels/half.h"
#include "kernels/layernorm.h"
#include "kernels/matmul.h"
#include "kernels/softmax_xent.h"
#include "tests/testing/grad_check.h"
#include "tests/testing/half_round.h"

namespace dtrain::ops {
namespace {

using testing::Fetch;
using testing::MakeTensor;
using testing::RandomVector;

struct Bf16 {
  static constexpr DType kType = DType::kBF16;
  static constexpr double kTol = 8e-3;      // ~2 roundings of 2^-9 relative on O(1) values
  static constexpr float kLossScale = 1.f;  // bf16 trains unscaled
  static double Round(double x) { return testing::RoundToBf16(x); }
};
struct Fp16 {
  static constexpr DType kType = DType::kF16;
  static constexpr double kTol = 2e-3;         // bf16's / 4
  static constexpr float kLossScale = 1024.f;  // a loss-scaled fp16 backward
  static double Round(double x) { return testing::RoundToF16(x); }
};

template <typename H>
std::vector<double> Round(std::vector<double> v) {
  for (double& x : v) x = H::Round(x);
  return v;
}

// A tensor of `dt` on ctx; 16-bit types go through an f32 tensor and Cast.
Status Make(DeviceContext& ctx, DType dt, const std::vector<int64_t>& shape, const std::vector<double>& v,
            Tensor* out) {
  if (!IsHalfFloat(dt)) return MakeTensor(ctx, dt, shape, v, out);
  Tensor f;
  DT_RETURN_IF_ERROR(MakeTensor(ctx, DType::kF32, shape, v, &f));
  DT_RETURN_IF_ERROR(Tensor::Empty(shape, dt, ctx.allocator(), out));
  return Cast(ctx, f, out);
}

Status Get(DeviceContext& ctx, const Tensor& t, std::vector<double>* out) {
  if (!IsHalfFloat(t.dtype())) return Fetch(ctx, t, out);
  Tensor f;
  DT_RETURN_IF_ERROR(Tensor::Empty(t.shape(), DType::kF32, ctx.allocator(), &f));
  DT_RETURN_IF_ERROR(Cast(ctx, t, &f));
  return Fetch(ctx, f, out);
}

template <typename H>
class HalfOps : public ::testing::Test {
 protected:
  void SetUp() override {
    DT_SKIP_WITHOUT_CUDA();
    DT_ASSERT_OK(DeviceContext::CreateCpu(&cpu_));
    DT_ASSERT_OK(DeviceContext::CreateCuda(0, &gpu_));
  }
  std::unique_ptr<DeviceContext> cpu_, gpu_;
};
using HalfTypes = ::testing::Types<Bf16, Fp16>;
TYPED_TEST_SUITE(HalfOps, HalfTypes);

// Add: the 16-bit sum computed in fp32 and rounded once; in place (out == a) too.
TYPED_TEST(HalfOps, AddIsTheRoundedSumAlsoInPlace) {
  for (const int64_t n : {int64_t{33}, int64_t{8192}}) {
    const auto a = Round<TypeParam>(RandomVector(n, 1)), b = Round<TypeParam>(RandomVector(n, 2));
    std::vector<double> want(n);
    for (int64_t i = 0; i < n; ++i) want[i] = TypeParam::Round(a[i] + b[i]);
    Tensor ta, tb, tout;
    DT_ASSERT_OK(Make(*this->gpu_, TypeParam::kType, {n}, a, &ta));
    DT_ASSERT_OK(Make(*this->gpu_, TypeParam::kType, {n}, b, &tb));
    DT_ASSERT_OK(Tensor::Empty({n}, TypeParam::kType, this->gpu_->allocator(), &tout));
    DT_ASSERT_OK(Add(*this->gpu_, ta, tb, &tout));
    std::vector<double> got;
    DT_ASSERT_OK(Get(*this->gpu_, tout, &got));
    EXPECT_EQ(got, want) << n;  // a + b of two 16-bit values is exact in fp32: one rounding, bit-exact
    DT_ASSERT_OK(Add(*this->gpu_, ta, tb, &ta));
    DT_ASSERT_OK(Get(*this->gpu_, ta, &got));
    EXPECT_EQ(got, want) << n << " in place";
  }
}

// LayerNorm in 16 bits (f32 gamma/beta/stats/param grads) vs the f64 CPU reference on rounded x and dy.
// Tolerances: y and dx (16-bit outputs) max abs <= 2.5 kTol * scale (one rounding of O(1..4) values plus fp32
// row sums); mean, rstd <= 1e-5 relative; dgamma, dbeta (f32 column sums of exact 16-bit products) relative
// Frobenius <= 1e-4. The parameter gradients are bitwise reproducible. Shapes: the fused backward in 3 and 4 column
// slots a lane (768, 1024; 2048 rows are 32 blocks of partial sums, each warp's rows double-buffered), and the
// two-pass backward of scalar (C = 100, 7) and wider (1536) rows; dx lands on a residual gradient (accumulate_dx) in
// some, as in GPT-2.
TYPED_TEST(HalfOps, LayerNormMatchesCpuAndIsDeterministic) {
  for (const auto& [n, c, acc] : {std::tuple<int64_t, int64_t, bool>{37, 100, false},
                                  {300, 768, false},
                                  {5, 7, true},
                                  {16, 1536, true},
                                  {2048, 768, true},
                                  {100, 1024, false}}) {
    const auto x = Round<TypeParam>(RandomVector(n * c, n + c, -2, 3)),
               dy = Round<TypeParam>(RandomVector(n * c, n * c, -1, 1));
    const auto gamma = RandomVector(c, 1, 0.5, 1.5), beta = RandomVector(c, 2), g0 = RandomVector(c, 3);
    const auto b0 = RandomVector(c, 4);
    const auto dx0 = acc ? Round<TypeParam>(RandomVector(n * c, 5)) : std::vector<double>(n * c, 0);
    std::vector<double> want[7], got[7];  // y, mean, rstd, dx, dgamma, dbeta, dgamma again
    for (const bool on_gpu : {false, true}) {
      DeviceContext& ctx = on_gpu ? *this->gpu_ : *this->cpu_;
      const DType act = on_gpu ? TypeParam::kType : DType::kF64, par = on_gpu ? DType::kF32 : DType::kF64;
      Tensor tx, tdy, tg, tb, ty, tm, tr, tdx, tdg, tdb;
      DT_ASSERT_OK(Make(ctx, act, {n, c}, x, &tx));
      DT_ASSERT_OK(Make(ctx, act, {n, c}, dy, &tdy));
      DT_ASSERT_OK(Make(ctx, par, {c}, gamma, &tg));
      DT_ASSERT_OK(Make(ctx, par, {c}, beta, &tb));
      DT_ASSERT_OK(Make(ctx, act, {n, c}, std::vector<double>(n * c, 0), &ty));
      DT_ASSERT_OK(Make(ctx, act, {n, c}, dx0, &tdx));
      DT_ASSERT_OK(Make(ctx, par, {n}, std::vector<double>(n, 0), &tm));
      DT_ASSERT_OK(Make(ctx, par, {n}, std::vector<double>(n, 0), &tr));
      DT_ASSERT_OK(Make(ctx, par, {c}, g0, &tdg));
      DT_ASSERT_OK(Make(ctx, par, {c}, b0, &tdb));
      DT_ASSERT_OK(LayerNormForward(ctx, tx, tg, tb, 1e-5f, &ty, &tm, &tr));
      DT_ASSERT_OK(LayerNormBackward(ctx, tx, tg, tm, tr, tdy, &tdx, &tdg, &tdb, acc));
      auto* out = on_gpu ? got : want;
      int i = 0;
      for (const Tensor* t : {&ty, &tm, &tr, &tdx, &tdg, &tdb}) DT_ASSERT_OK(Get(ctx, *t, &out[i++]));
      if (on_gpu) {  // a second backward from the same start gives the same bits
        Tensor g0t;
        DT_ASSERT_OK(Make(ctx, par, {c}, g0, &g0t));
        DT_ASSERT_OK(tdg.CopyFrom(g0t, this->gpu_->stream()));
        DT_ASSERT_OK(LayerNormBackward(ctx, tx, tg, tm, tr, tdy, &tdx, &tdg, &tdb));
        DT_ASSERT_OK(Get(ctx, tdg, &out[6]));
      }
    }
    const std::string what = std::to_string(n) + "x" + std::to_string(c);
    EXPECT_LE(testing::MaxAbsDiff(got[0], want[0]), 2.5 * TypeParam::kTol * testing::Scale(want[0])) << what << " y";
    EXPECT_LE(testing::MaxAbsDiff(got[1], want[1]), 1e-5 * testing::Scale(want[1])) << what << " mean";
    EXPECT_LE(testing::MaxAbsDiff(got[2], want[2]), 1e-5 * testing::Scale(want[2])) << what << " rstd";
    EXPECT_LE(testing::MaxAbsDiff(got[3], want[3]), 2.5 * TypeParam::kTol * testing::Scale(want[3])) << what << " dx";
    EXPECT_LE(testing::RelFrobenius(got[4], want[4]), 1e-4) << what << " dgamma";
    EXPECT_LE(testing::RelFrobenius(got[5], want[5]), 1e-4) << what << " dbeta";
    EXPECT_EQ(got[6], got[4]) << what << " dgamma not reproducible";
  }
}

// GELU forward/backward vs f64 on rounded inputs: max abs <= kTol * scale (one 16-bit rounding of values up to ~4,
// plus tanhf).
TYPED_TEST(HalfOps, GeluMatchesCpu) {
  for (const int64_t n : {int64_t{1001}, int64_t{4096}}) {
    const auto x = Round<TypeParam>(RandomVector(n, 5, -4, 4)), dy = Round<TypeParam>(RandomVector(n, 6));
    std::vector<double> want_y, want_dx, got_y, got_dx;
    for (const bool on_gpu : {false, true}) {
      DeviceContext& ctx = on_gpu ? *this->gpu_ : *this->cpu_;
      const DType dt = on_gpu ? TypeParam::kType : DType::kF64;
      Tensor tx, tdy, ty, tdx;
      DT_ASSERT_OK(Make(ctx, dt, {n}, x, &tx));
      DT_ASSERT_OK(Make(ctx, dt, {n}, dy, &tdy));
      DT_ASSERT_OK(Make(ctx, dt, {n}, std::vector<double>(n, 0), &ty));
      DT_ASSERT_OK(Make(ctx, dt, {n}, std::vector<double>(n, 0), &tdx));
      DT_ASSERT_OK(GeluForward(ctx, tx, &ty));
      DT_ASSERT_OK(GeluBackward(ctx, tx, tdy, &tdx));
      DT_ASSERT_OK(Get(ctx, ty, on_gpu ? &got_y : &want_y));
      DT_ASSERT_OK(Get(ctx, tdx, on_gpu ? &got_dx : &want_dx));
    }
    EXPECT_LE(testing::MaxAbsDiff(got_y, want_y), TypeParam::kTol * testing::Scale(want_y)) << n;
    EXPECT_LE(testing::MaxAbsDiff(got_dx, want_dx), TypeParam::kTol * testing::Scale(want_dx)) << n;
  }
}

// BiasAdd: 16-bit y + f32 bias (rounded once: max abs <= kTol * scale). BiasGrad: 16-bit dy -> f32 dbias
// accumulated, fp32 sums of exact values over up to 16384 rows: relative Frobenius <= 1e-5; bitwise reproducible.
TYPED_TEST(HalfOps, BiasAddAndGradMatchCpu) {
  for (const auto& [m, n] : {std::pair<int64_t, int64_t>{1001, 77}, {16384, 64}, {3, 5}, {2048, 1000}}) {
    const auto y0 = Round<TypeParam>(RandomVector(m * n, 7)), bias = RandomVector(n, 8), db0 = RandomVector(n, 9);
    std::vector<double> want_y, want_db, got_y, got_db, got_db2;
    for (const bool on_gpu : {false, true}) {
      DeviceContext& ctx = on_gpu ? *this->gpu_ : *this->cpu_;
      const DType act = on_gpu ? TypeParam::kType : DType::kF64, par = on_gpu ? DType::kF32 : DType::kF64;
      Tensor ty, tb, tdb;
      DT_ASSERT_OK(Make(ctx, act, {m, n}, y0, &ty));
      DT_ASSERT_OK(Make(ctx, par, {n}, bias, &tb));
      DT_ASSERT_OK(Make(ctx, par, {n}, db0, &tdb));
      DT_ASSERT_OK(BiasGrad(ctx, ty, &tdb, /*accumulate=*/true));
      DT_ASSERT_OK(Get(ctx, tdb, on_gpu ? &got_db : &want_db));
      if (on_gpu) {
        DT_ASSERT_OK(BiasGrad(ctx, ty, &tdb, /*accumulate=*/false));
        DT_ASSERT_OK(BiasGrad(ctx, ty, &tdb, /*accumulate=*/false));
        DT_ASSERT_OK(Get(ctx, tdb, &got_db2));
      }
      DT_ASSERT_OK(BiasAdd(ctx, tb, &ty));
      DT_ASSERT_OK(Get(ctx, ty, on_gpu ? &got_y : &want_y));
    }
    const std::string what = std::to_string(m) + "x" + std::to_string(n);
    EXPECT_LE(testing::MaxAbsDiff(got_y, want_y), TypeParam::kTol * testing::Scale(want_y)) << what;
    EXPECT_LE(testing::RelFrobenius(got_db, want_db), 1e-5) << what;
    for (int64_t j = 0; j < n; ++j) {  // SET twice from the same dy: the same bits as accumulate minus db0
      EXPECT_NEAR(got_db2[j], want_db[j] - db0[j], 1e-4 * testing::Scale(want_db)) << what << " col " << j;
    }
  }
}

// Softmax cross-entropy on 16-bit logits with padded columns (valid_cols < V), also in place (dlogits == logits),
// with grad_scale = kLossScale / B (fp16 runs loss-scaled). Tolerances: losses (fp32 math on exact inputs) max abs
// <= 1e-4 * scale; dlogits (16-bit, |value| <= grad_scale) max abs <= kTol * grad_scale; padded columns exactly 0.
// Argmax agrees exactly and never picks a padded column.
TYPED_TEST(HalfOps, SoftmaxXentWithPaddingMatchesCpu) {
  for (const auto& [b, v, u] :
       {std::tuple<int64_t, int64_t, int64_t>{5, 50304, 50257}, {33, 1003, 1000}, {4, 64, 64}}) {
    auto logits = Round<TypeParam>(RandomVector(b * v, v, -8, 8));
    for (int64_t i = 0; i < b; ++i) logits[i * v + v - 1] = 100;  // a padded column larger than every valid one
    std::vector<double> targets(b);
    for (int64_t i = 0; i < b; ++i) targets[i] = (i * 7919) % u;
    const float grad_scale = TypeParam::kLossScale / b;
    std::vector<double> want_l, want_d, want_am, got_l, got_d, got_am, inplace_d;
    for (const bool on_gpu : {false, true}) {
      DeviceContext& ctx = on_gpu ? *this->gpu_ : *this->cpu_;
      const DType dt = on_gpu ? TypeParam::kType : DType::kF64, loss_dt = on_gpu ? DType::kF32 : DType::kF64;
      Tensor tl, tt, tloss, td, tam;
      DT_ASSERT_OK(Make(ctx, dt, {b, v}, logits, &tl));
      DT_ASSERT_OK(MakeTensor(ctx, DType::kI32, {b}, targets, &tt));
      DT_ASSERT_OK(MakeTensor(ctx, loss_dt, {b}, std::vector<double>(b, NAN), &tloss));
      DT_ASSERT_OK(Make(ctx, dt, {b, v}, std::vector<double>(b * v, NAN), &td));
      DT_ASSERT_OK(MakeTensor(ctx, DType::kI32, {b}, std::vector<double>(b, -1), &tam));
      DT_ASSERT_OK(SoftmaxCrossEntropy(ctx, tl, tt, &tloss, &td, grad_scale, u));
      DT_ASSERT_OK(Argmax(ctx, tl, &tam, u));
      DT_ASSERT_OK(Get(ctx, tloss, on_gpu ? &got_l : &want_l));
      DT_ASSERT_OK(Get(ctx, td, on_gpu ? &got_d : &want_d));
      DT_ASSERT_OK(Get(ctx, tam, on_gpu ? &got_am : &want_am));
      if (on_gpu) {
        DT_ASSERT_OK(SoftmaxCrossEntropy(ctx, tl, tt, &tloss, &tl, grad_scale, u));
        DT_ASSERT_OK(Get(ctx, tl, &inplace_d));
      }
    }
    const std::string what = std::to_string(b) + "x" + std::to_string(v) + " valid " + std::to_string(u);
    EXPECT_LE(testing::MaxAbsDiff(got_l, want_l), 1e-4 * testing::Scale(want_l)) << what;
    EXPECT_LE(testing::MaxAbsDiff(got_d, want_d), TypeParam::kTol * grad_scale) << what;
    EXPECT_EQ(inplace_d, got_d) << what << ": in place differs";
    for (int64_t i = 0; i < b; ++i) {
      for (int64_t j = u; j < v; ++j) ASSERT_EQ(got_d[i * v + j], 0.0) << what << " row " << i << " col " << j;
    }
    EXPECT_EQ(got_am, want_am) << what;
    for (double a : got_am) EXPECT_LT(a, u) << what;
  }
}

// Embedding: f32 table -> 16-bit rows (exactly the rounded table rows); 16-bit dout -> f32 dtable accumulated with
// repeated ids, relative Frobenius <= 1e-6 vs f64 on the rounded dout (fp32 sums of exact values), and bitwise
// reproducible (a sorted, fixed-order reduction: no atomics). The f32 backward is reproducible too.
TYPED_TEST(HalfOps, EmbeddingMatchesCpuAndBackwardIsDeterministic) {
  for (const auto& [n, v, c] : {std::tuple<int64_t, int64_t, int64_t>{1000, 50, 768}, {333, 1001, 37}}) {
    std::vector<double> ids(n);
    for (int64_t i = 0; i < n; ++i) ids[i] = (i * i * 31 + 7) % (i % 3 == 0 ? 5 : v);  // ids 0..4 repeat a lot
    const auto table = RandomVector(v * c, 10), dout = Round<TypeParam>(RandomVector(n * c, 11)),
               dt0 = RandomVector(v * c, 12);
    std::vector<double> want_out, want_dt, got_out, got_dt, again_dt, f32_dt, f32_again;
    for (const bool on_gpu : {false, true}) {
      DeviceContext& ctx = on_gpu ? *this->gpu_ : *this->cpu_;
      const DType rows = on_gpu ? TypeParam::kType : DType::kF64, par = on_gpu ? DType::kF32 : DType::kF64;
      Tensor tids, ttable, tout, tdout, tdt;
      DT_ASSERT_OK(MakeTensor(ctx, DType::kI32, {n}, ids, &tids));
      DT_ASSERT_OK(Make(ctx, par, {v, c}, table, &ttable));
      DT_ASSERT_OK(Make(ctx, rows, {n, c}, std::vector<double>(n * c, NAN), &tout));
      DT_ASSERT_OK(Make(ctx, rows, {n, c}, dout, &tdout));
      DT_ASSERT_OK(EmbeddingForward(ctx, tids, ttable, &tout));
      DT_ASSERT_OK(Get(ctx, tout, on_gpu ? &got_out : &want_out));
      for (int run = 0; run < (on_gpu ? 2 : 1); ++run) {
        DT_ASSERT_OK(Make(ctx, par, {v, c}, dt0, &tdt));
        DT_ASSERT_OK(EmbeddingBackward(ctx, tids, tdout, &tdt));
        DT_ASSERT_OK(Get(ctx, tdt, !on_gpu ? &want_dt : (run == 0 ? &got_dt : &again_dt)));
      }
      if (on_gpu) {
        Tensor tdout32;
        DT_ASSERT_OK(Make(ctx, DType::kF32, {n, c}, dout, &tdout32));
        for (auto* out : {&f32_dt, &f32_again}) {
          DT_ASSERT_OK(Make(ctx, par, {v, c}, dt0, &tdt));
          DT_ASSERT_OK(EmbeddingBackward(ctx, tids, tdout32, &tdt));
          DT_ASSERT_OK(Get(ctx, tdt, out));
        }
      }
    }
    const std::string what = std::to_string(n) + " ids, " + std::to_string(v) + "x" + std::to_string(c);
    EXPECT_EQ(got_out, Round<TypeParam>(want_out)) << what;
    EXPECT_LE(testing::RelFrobenius(got_dt, want_dt), 1e-6) << what;
    EXPECT_EQ(got_dt, again_dt) << what << ": 16-bit backward not reproducible";
    EXPECT_EQ(f32_dt, f32_again) << what << ": f32 backward not reproducible";
    EXPECT_LE(testing::RelFrobenius(f32_dt, want_dt), 1e-6) << what;
  }
}

// The tests of one type: the casts (the rounding itself differs between the types) and the fp16 GEMMs (the bf16
// ones are in matmul_bf16_test).
using Bf16Ops = HalfOps<Bf16>;
using Fp16Ops = HalfOps<Fp16>;

// Cast rounds like the host conversion (round-to-nearest-even, NaN stays NaN) on odd sizes and misaligned views,
// and bf16 -> f32 is exact.
// The CPU reference of Cast (f32 <-> bf16) is the host rounding bit for bit, NaN, inf, -0 and a tie included; the CPU
// takes no f16.
TEST(CastCpu, F32Bf16IsTheHostRounding) {
  std::unique_ptr<DeviceContext> cpu;
  DT_ASSERT_OK(DeviceContext::CreateCpu(&cpu));
  std::vector<double> v = RandomVector(37, 5, -1e3, 1e3);
  v[0] = NAN;
  v[1] = INFINITY;
  v[2] = -0.0;
  v[3] = 1.0 + 1.0 / 256;  // halfway: to even (1.0)
  Tensor f32, bf16, back, f16;
  DT_ASSERT_OK(MakeTensor(*cpu, DType::kF32, {37}, v, &f32));
  DT_ASSERT_OK(Tensor::Empty({37}, DType::kBF16, cpu->allocator(), &bf16));
  DT_ASSERT_OK(Cast(*cpu, f32, &bf16));
  DT_ASSERT_OK(Tensor::Empty({37}, DType::kF32, cpu->allocator(), &back));
  DT_ASSERT_OK(Cast(*cpu, bf16, &back));
  for (int64_t i = 0; i < 37; ++i) {
    const uint16_t want = RoundBf16Rne(static_cast<float>(v[static_cast<size_t>(i)]));
    ASSERT_EQ(bf16.data<uint16_t>()[i], want) << i;
    const float wide = Bf16BitsToF32(want);
    ASSERT_EQ(std::memcmp(&back.data<float>()[i], &wide, sizeof(float)), 0) << i;
  }
  EXPECT_EQ(bf16.data<uint16_t>()[3], 0x3f80);
  DT_ASSERT_OK(Tensor::Empty({37}, DType::kF16, cpu->allocator(), &f16));
  EXPECT_EQ(Cast(*cpu, f32, &f16).code(), Status::Code::kInvalidArgument);
}

TEST_F(Bf16Ops, CastMatchesHostRoundingBitForBit) {
  for (const int64_t n : {int64_t{1}, int64_t{37}, int64_t{4096}}) {
    std::vector<double> v = RandomVector(n + 1, n, -1e3, 1e3);
    v[0] = NAN;
    if (n > 2) v[2] = 1.0 + 1.0 / 256;  // exactly halfway between two bf16 values: rounds to even (1.0)
    Tensor f32, view, bf16, back;
    DT_ASSERT_OK(MakeTensor(*gpu_, DType::kF32, {n + 1}, v, &f32));
    DT_ASSERT_OK(f32.View(1, {n}, &view));  // 4-byte offset: the scalar path
    for (const Tensor* in : {&f32, &view}) {
      DT_ASSERT_OK(Tensor::Empty(in->shape(), DType::kBF16, gpu_->allocator(), &bf16));
      DT_ASSERT_OK(Cast(*gpu_, *in, &bf16));
      std::vector<uint16_t> bits(in->numel());
      Tensor host = Tensor::Wrap(bits.data(), in->shape(), DType::kBF16, DeviceType::kCPU);
      DT_ASSERT_OK(host.CopyFrom(bf16, gpu_->stream()));
      DT_ASSERT_OK(gpu_->Synchronize());
      const int64_t off = in == &view ? 1 : 0;
      for (int64_t i = 0; i < in->numel(); ++i) {
        const float x = static_cast<float>(v[i + off]);
        if (std::isnan(x)) {  // any NaN encoding (the device's is 0x7FFF, the host's 0x7FC0)
          ASSERT_TRUE((bits[i] & 0x7F80) == 0x7F80 && (bits[i] & 0x7F) != 0) << "n=" << n << " i=" << i;
          continue;
        }
        ASSERT_EQ(bits[i], RoundBf16Rne(x)) << "n=" << n << " i=" << i;
      }
      DT_ASSERT_OK(Tensor::Empty(in->shape(), DType::kF32, gpu_->allocator(), &back));
      DT_ASSERT_OK(Cast(*gpu_, bf16, &back));
      std::vector<double> got;
      DT_ASSERT_OK(Fetch(*gpu_, back, &got));
      for (int64_t i = 0; i < in->numel(); ++i) {
        const double want = Bf16BitsToF32(bits[i]);
        ASSERT_TRUE(got[i] == want || (std::isnan(got[i]) && std::isnan(want))) << i;
      }
    }
  }
}

// Cast f32 -> f16 rounds to nearest even (a halfway value, overflow to inf past 65504, subnormals, NaN) on aligned
// and misaligned views, and f16 -> f32 is exact: the round trip equals the host rounding exactly.
TEST_F(Fp16Ops, CastMatchesHostRounding) {
  for (const int64_t n : {int64_t{1}, int64_t{37}, int64_t{4096}}) {
    std::vector<double> v = RandomVector(n + 1, n, -7e4, 7e4);
    v[0] = NAN;
    if (n > 4) {
      v[2] = 1.0 + 1.0 / 2048;  // halfway between 1 and the next fp16: rounds to even (1.0)
      v[3] = 3e-6;              // subnormal in fp16
      v[4] = 65519.0;           // rounds down to 65504 (the largest finite fp16)
    }
    Tensor f32, view, h, back;
    DT_ASSERT_OK(MakeTensor(*gpu_, DType::kF32, {n + 1}, v, &f32));
    DT_ASSERT_OK(f32.View(1, {n}, &view));  // 4-byte offset: the scalar path
    for (const Tensor* in : {&f32, &view}) {
      DT_ASSERT_OK(Tensor::Empty(in->shape(), DType::kF16, gpu_->allocator(), &h));
      DT_ASSERT_OK(Cast(*gpu_, *in, &h));
      DT_ASSERT_OK(Tensor::Empty(in->shape(), DType::kF32, gpu_->allocator(), &back));
      DT_ASSERT_OK(Cast(*gpu_, h, &back));
      std::vector<double> got;
      DT_ASSERT_OK(Fetch(*gpu_, back, &got));
      const int64_t off = in == &view ? 1 : 0;
      for (int64_t i = 0; i < in->numel(); ++i) {
        const double want = testing::RoundToF16(v[i + off]);
        ASSERT_TRUE(got[i] == want || (std::isnan(got[i]) && std::isnan(want)))
            << "n=" << n << " i=" << i << " x=" << v[i + off] << " got " << got[i] << " want " << want;
      }
    }
  }
}

struct Case {
  int64_t m, n, k;
  bool ta, tb;
};

// Matmul with fp16 A, B (views of one flat buffer, like GPT-2's weight copy) vs f64 on the rounded inputs: C in
// fp16 relative Frobenius <= 2.5e-3 (one output rounding plus fp32 accumulation); C in f32 with beta = 1 (weight
// gradients) <= 1e-5 (products of fp16 values are exact in fp32).
TEST_F(Fp16Ops, MatmulMatchesCpuOnRoundedInputs) {
  const Case cases[] = {{64, 96, 128, false, true}, {37, 45, 29, false, false}, {32, 64, 48, true, false}};
  uint64_t seed = 700;
  for (const Case& c : cases) {
    const auto a = Round<Fp16>(RandomVector(c.m * c.k, ++seed)), b = Round<Fp16>(RandomVector(c.k * c.n, ++seed));
    const auto c0 = RandomVector(c.m * c.n, ++seed);
    const std::vector<int64_t> sa = c.ta ? std::vector<int64_t>{c.k, c.m} : std::vector<int64_t>{c.m, c.k};
    const std::vector<int64_t> sb = c.tb ? std::vector<int64_t>{c.n, c.k} : std::vector<int64_t>{c.k, c.n};
    std::vector<double> want16, want32, got16, got32;
    for (const bool on_gpu : {false, true}) {
      DeviceContext& ctx = on_gpu ? *gpu_ : *cpu_;
      const DType ab = on_gpu ? DType::kF16 : DType::kF64, acc = on_gpu ? DType::kF32 : DType::kF64;
      Tensor ta, tb, tc, tacc;
      DT_ASSERT_OK(Make(ctx, ab, sa, a, &ta));
      DT_ASSERT_OK(Make(ctx, ab, sb, b, &tb));
      DT_ASSERT_OK(Make(ctx, ab, {c.m, c.n}, std::vector<double>(c.m * c.n, NAN), &tc));  // beta 0: never read
      DT_ASSERT_OK(Make(ctx, acc, {c.m, c.n}, c0, &tacc));
      DT_ASSERT_OK(Matmul(ctx, ta, c.ta, tb, c.tb, &tc));
      DT_ASSERT_OK(Matmul(ctx, ta, c.ta, tb, c.tb, &tacc, 0.5f, 1.f));
      DT_ASSERT_OK(Get(ctx, tc, on_gpu ? &got16 : &want16));
      DT_ASSERT_OK(Get(ctx, tacc, on_gpu ? &got32 : &want32));
    }
    const std::string what = "m=" + std::to_string(c.m) + " n=" + std::to_string(c.n) + " k=" + std::to_string(c.k);
    EXPECT_LE(testing::RelFrobenius(got16, want16), 2.5e-3) << what;
    EXPECT_LE(testing::RelFrobenius(got32, want32), 1e-5) << what;
  }
}

// Every epilogue with fp16 A, B, C, aux and an f32 bias, or (not for a bias gradient) an fp16 one as GPT-2 passes
// it, vs the f64 composition of the separate ops, N a multiple of 8 (cuBLASLt fuses) and N odd (the unfused
// fallback): relative Frobenius <= 2.5e-3 on c, aux and the bias (gradient).
TEST_F(Fp16Ops, MatmulEpiloguesMatchSeparateOps) {
  const Case cases[] = {{64, 96, 128, false, true}, {37, 45, 29, false, true}};
  const Epilogue all[] = {Epilogue::kBias, Epilogue::kBiasGelu, Epilogue::kDGelu, Epilogue::kDGeluBGrad,
                          Epilogue::kBiasResidual};
  uint64_t seed = 800;
  for (const Case& c : cases) {
    const auto a = Round<Fp16>(RandomVector(c.m * c.k, ++seed)), b = Round<Fp16>(RandomVector(c.k * c.n, ++seed));
    const auto bias0 = Round<Fp16>(RandomVector(c.n, ++seed)),
               pre = Round<Fp16>(RandomVector(c.m * c.n, ++seed, -3, 3));
    for (const auto& [e, bias_dt] : {std::pair{all[0], DType::kF32},
                                     {all[0], DType::kF16},
                                     {all[1], DType::kF32},
                                     {all[1], DType::kF16},
                                     {all[2], DType::kF32},
                                     {all[3], DType::kF32},
                                     {all[4], DType::kF32},
                                     {all[4], DType::kF16}}) {
      std::vector<double> want, want_aux, want_bias, got, got_aux, got_bias;
      for (const bool on_gpu : {false, true}) {
        DeviceContext& ctx = on_gpu ? *gpu_ : *cpu_;
        const DType dt = on_gpu ? DType::kF16 : DType::kF64, par = on_gpu ? bias_dt : DType::kF64;
        Tensor ta, tb, tc, tbias, taux;
        DT_ASSERT_OK(Make(ctx, dt, {c.m, c.k}, a, &ta));
        DT_ASSERT_OK(Make(ctx, dt, {c.n, c.k}, b, &tb));
        DT_ASSERT_OK(Make(ctx, dt, {c.m, c.n}, std::vector<double>(c.m * c.n, 0), &tc));
        DT_ASSERT_OK(Make(ctx, par, {c.n}, bias0, &tbias));
        DT_ASSERT_OK(Make(ctx, dt, {c.m, c.n}, pre, &taux));
        DT_ASSERT_OK(MatmulEpilogue(ctx, ta, false, tb, true, tbias, e, &tc, &taux));
        DT_ASSERT_OK(Get(ctx, tc, on_gpu ? &got : &want));
        DT_ASSERT_OK(Get(ctx, taux, on_gpu ? &got_aux : &want_aux));
        DT_ASSERT_OK(Get(ctx, tbias, on_gpu ? &got_bias : &want_bias));
      }
      const std::string what = "m=" + std::to_string(c.m) + " n=" + std::to_string(c.n) + " " + EpilogueName(e) +
                               " bias " + DTypeName(bias_dt);
      EXPECT_LE(testing::RelFrobenius(got, want), 2.5e-3) << what;
      EXPECT_LE(testing::RelFrobenius(got_aux, want_aux), 2.5e-3) << what;
      EXPECT_LE(testing::RelFrobenius(got_bias, want_bias), 2.5e-3) << what;
    }
  }
}

}  // namespace
}  // namespace dtrain::ops
