// Tests of kernels/rmsnorm: a hand-computed row, the CPU forward against the direct double formula, finite-difference
// gradients for x and weight (f64), accumulate_dx, shape errors, and CUDA f32 / bf16 / f16 against the CPU f64
// reference (skipped without a GPU).
#include "kernels/rmsnorm.h"

#include <gtest/gtest.h>

#include <cmath>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "core/check.h"
#include "core/device_context.h"
#include "kernels/elementwise.h"
#include "kernels/half.h"
#include "tests/testing/grad_check.h"
#include "tests/testing/half_round.h"

namespace dtrain::ops {
namespace {

using testing::Fetch;
using testing::MakeTensor;
using testing::RandomVector;

std::unique_ptr<DeviceContext> Cpu() {
  std::unique_ptr<DeviceContext> ctx;
  EXPECT_TRUE(DeviceContext::CreateCpu(&ctx).ok());
  return ctx;
}

// A tensor of `dt` on ctx (16-bit: through an f32 tensor and Cast, rounding to nearest even), and back to double.
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

struct Fwd {
  std::vector<double> y, rstd;
};

// Forward on rows x[n,c] of dtype `dt` (weight and rstd: f32 when dt is 16-bit); outputs poisoned with NaN first.
void RunForward(DeviceContext& ctx, DType dt, int64_t n, int64_t c, const std::vector<double>& x,
                const std::vector<double>& weight, float eps, Fwd* out) {
  const DType st = IsHalfFloat(dt) ? DType::kF32 : dt;
  Tensor tx, tw, ty, tr;
  DT_ASSERT_OK(Make(ctx, dt, {n, c}, x, &tx));
  DT_ASSERT_OK(MakeTensor(ctx, st, {c}, weight, &tw));
  DT_ASSERT_OK(Make(ctx, dt, {n, c}, std::vector<double>(n * c, NAN), &ty));
  DT_ASSERT_OK(MakeTensor(ctx, st, {n}, std::vector<double>(n, NAN), &tr));
  DT_ASSERT_OK(RmsNormForward(ctx, tx, tw, eps, &ty, &tr));
  DT_ASSERT_OK(Get(ctx, ty, &out->y));
  DT_ASSERT_OK(Fetch(ctx, tr, &out->rstd));
}

struct Bwd {
  std::vector<double> dx, dweight;
};

// Backward with saved rstd; dweight starts at `base` (it accumulates); dx poisoned, or starting at *dx_base and
// accumulated onto it.
void RunBackward(DeviceContext& ctx, DType dt, int64_t n, int64_t c, const std::vector<double>& x,
                 const std::vector<double>& weight, const std::vector<double>& rstd, const std::vector<double>& dy,
                 const std::vector<double>& base, Bwd* out, const std::vector<double>* dx_base = nullptr,
                 bool bf16_dweight = false) {
  const DType st = IsHalfFloat(dt) ? DType::kF32 : dt;
  Tensor tx, tw, tr, tdy, tdx, tdw;
  DT_ASSERT_OK(Make(ctx, dt, {n, c}, x, &tx));
  DT_ASSERT_OK(MakeTensor(ctx, st, {c}, weight, &tw));
  DT_ASSERT_OK(MakeTensor(ctx, st, {n}, rstd, &tr));
  DT_ASSERT_OK(Make(ctx, dt, {n, c}, dy, &tdy));
  DT_ASSERT_OK(Make(ctx, dt, {n, c}, dx_base ? *dx_base : std::vector<double>(n * c, NAN), &tdx));
  DT_ASSERT_OK(Make(ctx, bf16_dweight ? DType::kBF16 : st, {c}, base, &tdw));
  DT_ASSERT_OK(RmsNormBackward(ctx, tx, tw, tr, tdy, &tdx, &tdw, /*accumulate_dx=*/dx_base != nullptr));
  DT_ASSERT_OK(Get(ctx, tdx, &out->dx));
  DT_ASSERT_OK(Get(ctx, tdw, &out->dweight));
}

TEST(RmsNormCpu, HandComputedRow) {
  auto cpu = Cpu();
  // x = {1,2,3,4}: mean of squares 30/4 = 7.5, y = x / sqrt(7.5) * weight (no mean subtracted, no bias).
  Fwd f;
  ASSERT_NO_FATAL_FAILURE(RunForward(*cpu, DType::kF64, 1, 4, {1, 2, 3, 4}, {1, 1, 2, -2}, 0.f, &f));
  const double s = 1 / std::sqrt(7.5);
  EXPECT_DOUBLE_EQ(f.rstd[0], s);
  const std::vector<double> want = {1 * s, 2 * s, 2 * 3 * s, -2 * 4 * s};
  for (int j = 0; j < 4; ++j) EXPECT_NEAR(f.y[j], want[j], 1e-15) << j;
}

// The direct formula in double, eps included; f32 within its rounding.
TEST(RmsNormCpu, MatchesDirectFormula) {
  auto cpu = Cpu();
  const int64_t n = 6, c = 37;
  const float eps = 1e-5f;
  auto x = RandomVector(n * c, 1, -2, 2);
  for (int64_t j = 0; j < c; ++j) x[j] *= 1e-3;  // a small row: eps matters
  const auto w = RandomVector(c, 2, 0.5, 1.5);
  for (DType dt : {DType::kF64, DType::kF32}) {
    const double tol = dt == DType::kF64 ? 1e-14 : 1e-6;
    Fwd f;
    ASSERT_NO_FATAL_FAILURE(RunForward(*cpu, dt, n, c, x, w, eps, &f));
    for (int64_t i = 0; i < n; ++i) {
      double sq = 0;
      for (int64_t j = 0; j < c; ++j) sq += x[i * c + j] * x[i * c + j];
      const double rs = 1 / std::sqrt(sq / c + static_cast<double>(eps));
      EXPECT_NEAR(f.rstd[i], rs, tol * rs) << "row " << i << " " << DTypeName(dt);
      for (int64_t j = 0; j < c; ++j) {
        const double want = x[i * c + j] * rs * w[j];
        EXPECT_NEAR(f.y[i * c + j], want, tol * 4) << i << "," << j << " " << DTypeName(dt);
      }
    }
  }
}

// loss = sum(W .* y(x, weight)); checks dx (through the saved rstd) and dweight.
TEST(RmsNormGrad, FiniteDifferences) {
  auto cpu = Cpu();
  const int64_t n = 3, c = 7;
  const float eps = 1e-5f;
  const auto x = RandomVector(n * c, 1, -2, 2), w = RandomVector(c, 2, 0.5, 1.5);
  const auto loss_w = RandomVector(n * c, 4), base = RandomVector(c, 5);
  Fwd f;
  Bwd g;
  ASSERT_NO_FATAL_FAILURE(RunForward(*cpu, DType::kF64, n, c, x, w, eps, &f));
  ASSERT_NO_FATAL_FAILURE(RunBackward(*cpu, DType::kF64, n, c, x, w, f.rstd, loss_w, base, &g));
  std::vector<double> dweight(c);  // the accumulated part only
  for (int64_t j = 0; j < c; ++j) dweight[j] = g.dweight[j] - base[j];
  auto loss = [&](const std::vector<double>& xv, const std::vector<double>& wv) {
    Fwd out;
    RunForward(*cpu, DType::kF64, n, c, xv, wv, eps, &out);
    return testing::Dot(loss_w, out.y);
  };
  const auto rx = testing::CheckGradient([&](const std::vector<double>& v) { return loss(v, w); }, x, g.dx);
  const auto rw = testing::CheckGradient([&](const std::vector<double>& v) { return loss(x, v); }, w, dweight);
  EXPECT_LT(rx.max_rel_error, 1e-6) << "dx: " << rx.ToString();
  EXPECT_LT(rw.max_rel_error, 1e-6) << "dweight: " << rw.ToString();
}

// accumulate_dx adds exactly the gradient the plain call writes (f64: one rounding of the sum); dweight is the same.
TEST(RmsNormCpu, AccumulateDxAddsTheGradientToDx) {
  auto cpu = Cpu();
  const int64_t n = 5, c = 12;
  const auto x = RandomVector(n * c, 11, -2, 2), w = RandomVector(c, 12, 0.5, 1.5);
  const auto dy = RandomVector(n * c, 14), base = RandomVector(c, 15), dx_base = RandomVector(n * c, 16);
  Fwd f;
  ASSERT_NO_FATAL_FAILURE(RunForward(*cpu, DType::kF64, n, c, x, w, 1e-5f, &f));
  Bwd plain, acc;
  ASSERT_NO_FATAL_FAILURE(RunBackward(*cpu, DType::kF64, n, c, x, w, f.rstd, dy, base, &plain));
  ASSERT_NO_FATAL_FAILURE(RunBackward(*cpu, DType::kF64, n, c, x, w, f.rstd, dy, base, &acc, &dx_base));
  for (int64_t i = 0; i < n * c; ++i) EXPECT_DOUBLE_EQ(acc.dx[i], plain.dx[i] + dx_base[i]) << i;
  EXPECT_EQ(acc.dweight, plain.dweight);
}

TEST(RmsNorm, AcceptsLeadingDimsAndRejectsMismatchedShapes) {
  auto cpu = Cpu();
  Tensor x, w, y, r, w5, r_bad, w64;
  DT_ASSERT_OK(MakeTensor(*cpu, DType::kF32, {2, 3, 4}, RandomVector(24, 1), &x));
  DT_ASSERT_OK(MakeTensor(*cpu, DType::kF32, {4}, std::vector<double>(4, 1.0), &w));
  DT_ASSERT_OK(MakeTensor(*cpu, DType::kF32, {2, 3, 4}, std::vector<double>(24, 0.0), &y));
  DT_ASSERT_OK(MakeTensor(*cpu, DType::kF32, {2, 3}, std::vector<double>(6, 0.0), &r));
  DT_ASSERT_OK(MakeTensor(*cpu, DType::kF32, {5}, std::vector<double>(5, 1.0), &w5));
  DT_ASSERT_OK(MakeTensor(*cpu, DType::kF32, {6}, std::vector<double>(6, 0.0), &r_bad));
  DT_ASSERT_OK(MakeTensor(*cpu, DType::kF64, {4}, std::vector<double>(4, 1.0), &w64));
  DT_ASSERT_OK(RmsNormForward(*cpu, x, w, 1e-5f, &y, &r));  // x[2,3,C] -> rstd [2,3]
  const Status st = RmsNormForward(*cpu, x, w5, 1e-5f, &y, &r);
  EXPECT_EQ(st.code(), Status::Code::kInvalidArgument);
  EXPECT_NE(st.message().find("f32[2,3,4]"), std::string::npos) << st.ToString();
  EXPECT_NE(st.message().find("f32[5]"), std::string::npos) << st.ToString();
  EXPECT_EQ(RmsNormForward(*cpu, x, w, 1e-5f, &y, &r_bad).code(), Status::Code::kInvalidArgument);
  EXPECT_EQ(RmsNormForward(*cpu, x, w64, 1e-5f, &y, &r).code(), Status::Code::kInvalidArgument);
  Tensor dx = y, dw = w;
  EXPECT_EQ(RmsNormBackward(*cpu, x, w, r, y, &dx, &w5).code(), Status::Code::kInvalidArgument);
  EXPECT_EQ(RmsNormBackward(*cpu, x, w, r, r, &dx, &dw).code(), Status::Code::kInvalidArgument);
  EXPECT_EQ(RmsNormBackward(*cpu, x, w, r_bad, y, &dx, &dw).code(), Status::Code::kInvalidArgument);
}

// GPU vs the CPU f64 reference on inputs rounded to the GPU's dtype. Tolerances (max abs err <= tol * scale):
// f32 1e-5 everywhere; 16-bit y and dx (one final rounding of an fp32 result: 2^-9 relative for bf16, 2^-11 for
// fp16, plus fp32 sums) 8e-3 / 2e-3; rstd and dweight (fp32 sums of 16-bit inputs) 1e-4 relative to their scale.
// Shapes take every path: rows held in registers (C <= 2048) with 128-bit accesses (960 = SmolLM2's hidden, 2048 =
// Llama-3.2-1B's, 256, 1024; 1000 rows = 16 blocks of dweight partial sums) and scalar ones (33, 1), and the two-pass
// fallback of wider rows (4096: 128-bit; 2051: scalar).
TEST(RmsNormCuda, MatchesCpuReference) {
  DT_SKIP_WITHOUT_CUDA();
  auto cpu = Cpu();
  std::unique_ptr<DeviceContext> gpu;
  DT_ASSERT_OK(DeviceContext::CreateCuda(0, &gpu));
  struct Case {
    DType dt;
    double tol;
    double (*round)(double);
  };
  const Case cases[] = {{DType::kF32, 1e-5, [](double v) { return static_cast<double>(static_cast<float>(v)); }},
                        {DType::kBF16, 8e-3, testing::RoundToBf16},
                        {DType::kF16, 2e-3, testing::RoundToF16}};
  for (const Case& k : cases) {
    auto round = [&](std::vector<double> v) {
      for (double& e : v) e = k.round(e);
      return v;
    };
    auto round_f32 = [](std::vector<double> v) {
      for (double& e : v) e = static_cast<float>(e);
      return v;
    };
    for (const auto& [n, c] : {std::pair<int64_t, int64_t>{257, 960},
                               {64, 33},
                               {3, 1},
                               {9, 2048},
                               {1000, 256},
                               {130, 4096},
                               {16, 1024},
                               {5, 2051}}) {
      const auto x = round(RandomVector(n * c, n + c, -2, 2)), dy = round(RandomVector(n * c, 3));
      const auto w = round_f32(RandomVector(c, 1, 0.5, 1.5)), base = round_f32(RandomVector(c, 4));
      const auto dx_base = round(RandomVector(n * c, 5));
      Fwd want_f, got_f;
      ASSERT_NO_FATAL_FAILURE(RunForward(*cpu, DType::kF64, n, c, x, w, 1e-5f, &want_f));
      ASSERT_NO_FATAL_FAILURE(RunForward(*gpu, k.dt, n, c, x, w, 1e-5f, &got_f));
      const std::string where = std::string(DTypeName(k.dt)) + " " + std::to_string(n) + "x" + std::to_string(c);
      EXPECT_LE(testing::MaxAbsDiff(got_f.y, want_f.y), k.tol * testing::Scale(want_f.y)) << where;
      const double stat_tol = k.dt == DType::kF32 ? 1e-5 : 1e-4;
      EXPECT_LE(testing::MaxAbsDiff(got_f.rstd, want_f.rstd), stat_tol * testing::Scale(want_f.rstd)) << where;
      // Both backward passes use the reference's saved rstd, so only the backward arithmetic is compared.
      const auto rstd = round_f32(want_f.rstd);
      Bwd want_b, got_b;
      ASSERT_NO_FATAL_FAILURE(RunBackward(*cpu, DType::kF64, n, c, x, w, rstd, dy, base, &want_b));
      ASSERT_NO_FATAL_FAILURE(RunBackward(*gpu, k.dt, n, c, x, w, rstd, dy, base, &got_b));
      EXPECT_LE(testing::MaxAbsDiff(got_b.dx, want_b.dx), k.tol * testing::Scale(want_b.dx)) << where;
      EXPECT_LE(testing::MaxAbsDiff(got_b.dweight, want_b.dweight), stat_tol * testing::Scale(want_b.dweight)) << where;
      // accumulate_dx: dx lands on a residual gradient already there; dweight is bitwise the same (reproducible).
      std::vector<double> want_acc = want_b.dx;
      for (size_t i = 0; i < want_acc.size(); ++i) want_acc[i] += dx_base[i];
      Bwd got_acc;
      ASSERT_NO_FATAL_FAILURE(RunBackward(*gpu, k.dt, n, c, x, w, rstd, dy, base, &got_acc, &dx_base));
      EXPECT_LE(testing::MaxAbsDiff(got_acc.dx, want_acc), k.tol * testing::Scale(want_acc)) << where;
      EXPECT_EQ(got_acc.dweight, got_b.dweight) << where;
    }
  }
}

// A bf16 dweight beside bf16 x (bf16 gradients): the f32 launch's dweight rounded to nearest, bit for bit, from a
// bf16-representable base (both add the same f32 sum to it; the bf16 one then rounds once), on the fused and the
// chunked paths; dx is the same either way. A bf16 dweight beside f32 x is refused.
TEST(RmsNormCuda, Bf16DweightIsTheF32DweightRounded) {
  DT_SKIP_WITHOUT_CUDA();
  std::unique_ptr<DeviceContext> gpu;
  DT_ASSERT_OK(DeviceContext::CreateCuda(0, &gpu));
  for (const auto& [n, c] : {std::pair<int64_t, int64_t>{257, 960}, {64, 33}, {130, 4096}, {5, 2051}}) {
    const std::string where = std::to_string(n) + "x" + std::to_string(c);
    auto bf16 = [](std::vector<double> v) {
      for (double& e : v) e = testing::RoundToBf16(e);
      return v;
    };
    const auto x = bf16(RandomVector(n * c, n + c, -2, 2)), dy = bf16(RandomVector(n * c, 3));
    const auto w = RandomVector(c, 1, 0.5, 1.5), base = bf16(RandomVector(c, 4));
    std::vector<double> rstd(n);
    for (int64_t r = 0; r < n; ++r) rstd[r] = static_cast<float>(0.5 + 0.001 * r);
    Bwd f32, b16;
    ASSERT_NO_FATAL_FAILURE(RunBackward(*gpu, DType::kBF16, n, c, x, w, rstd, dy, base, &f32));
    ASSERT_NO_FATAL_FAILURE(RunBackward(*gpu, DType::kBF16, n, c, x, w, rstd, dy, base, &b16, nullptr, true));
    EXPECT_EQ(b16.dx, f32.dx) << where;
    EXPECT_EQ(b16.dweight, bf16(f32.dweight)) << where;
  }
  Tensor x, w, r, dy, dx, dw16;
  DT_ASSERT_OK(MakeTensor(*gpu, DType::kF32, {2, 8}, std::vector<double>(16, 1.0), &x));
  DT_ASSERT_OK(MakeTensor(*gpu, DType::kF32, {8}, std::vector<double>(8, 1.0), &w));
  DT_ASSERT_OK(MakeTensor(*gpu, DType::kF32, {2}, std::vector<double>(2, 1.0), &r));
  DT_ASSERT_OK(MakeTensor(*gpu, DType::kF32, {2, 8}, std::vector<double>(16, 1.0), &dy));
  DT_ASSERT_OK(MakeTensor(*gpu, DType::kF32, {2, 8}, std::vector<double>(16, 1.0), &dx));
  DT_ASSERT_OK(Make(*gpu, DType::kBF16, {8}, std::vector<double>(8, 0.0), &dw16));
  EXPECT_EQ(RmsNormBackward(*gpu, x, w, r, dy, &dx, &dw16).code(), Status::Code::kInvalidArgument);
}

}  // namespace
}  // namespace dtrain::ops
