// The fp16 CUDA paths not shared with bf16 in ops_half_test: Cast, Matmul (16-bit C and f32 accumulation into C)
// and every MatmulEpilogue (fused and unfused), against the CPU f64 reference on fp16-rounded inputs. fp16 keeps 11
// significant bits: one rounding is 2^-11 (~4.9e-4) relative, 4x finer than bf16, so the tolerances are those of
// matmul_bf16_test divided by 4 unless stated. Every test needs a GPU.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include "models/ops/elementwise.h"
#include "models/ops/matmul.h"
#include "runtime/core/check.h"
#include "runtime/core/device_context.h"
#include "tests/testing/grad_check.h"
#include "tests/testing/half_round.h"

namespace dtrain::ops {
namespace {

using testing::Fetch;
using testing::MakeTensor;
using testing::RandomVector;

std::vector<double> RoundF16(std::vector<double> v) {
  for (double& x : v) x = testing::RoundToF16(x);
  return v;
}

Status Make(DeviceContext& ctx, DType dt, const std::vector<int64_t>& shape, const std::vector<double>& v,
            Tensor* out) {
  if (dt != DType::kF16) return MakeTensor(ctx, dt, shape, v, out);
  Tensor f;
  DT_RETURN_IF_ERROR(MakeTensor(ctx, DType::kF32, shape, v, &f));
  DT_RETURN_IF_ERROR(Tensor::Empty(shape, DType::kF16, ctx.allocator(), out));
  return Cast(ctx, f, out);
}

Status Get(DeviceContext& ctx, const Tensor& t, std::vector<double>* out) {
  if (t.dtype() != DType::kF16) return Fetch(ctx, t, out);
  Tensor f;
  DT_RETURN_IF_ERROR(Tensor::Empty(t.shape(), DType::kF32, ctx.allocator(), &f));
  DT_RETURN_IF_ERROR(Cast(ctx, t, &f));
  return Fetch(ctx, f, out);
}

class Fp16Ops : public ::testing::Test {
 protected:
  void SetUp() override {
    DT_SKIP_WITHOUT_CUDA();
    DT_ASSERT_OK(DeviceContext::CreateCpu(&cpu_));
    DT_ASSERT_OK(DeviceContext::CreateCuda(0, &gpu_));
  }
  std::unique_ptr<DeviceContext> cpu_, gpu_;
};

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
    const auto a = RoundF16(RandomVector(c.m * c.k, ++seed)), b = RoundF16(RandomVector(c.k * c.n, ++seed));
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
    const auto a = RoundF16(RandomVector(c.m * c.k, ++seed)), b = RoundF16(RandomVector(c.k * c.n, ++seed));
    const auto bias0 = RoundF16(RandomVector(c.n, ++seed)), pre = RoundF16(RandomVector(c.m * c.n, ++seed, -3, 3));
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
