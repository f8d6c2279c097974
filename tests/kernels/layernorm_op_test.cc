// Tests of kernels/layernorm: closed forms (a hand-computed row; normalized rows have mean 0 and variance 1),
// finite-difference gradients for x, gamma and beta (f64), shape errors, and CPU-vs-CUDA agreement.
#include <gtest/gtest.h>

#include <cmath>
#include <memory>
#include <vector>

#include "core/device_context.h"
#include "kernels/layernorm.h"
#include "tests/testing/grad_check.h"

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

struct Fwd {
  std::vector<double> y, mean, rstd;
};

// Forward on rows x[n,c] (outputs poisoned with NaN first).
void RunForward(DeviceContext& ctx, DType dt, int64_t n, int64_t c, const std::vector<double>& x,
                const std::vector<double>& gamma, const std::vector<double>& beta, float eps, Fwd* out) {
  Tensor tx, tg, tb, ty, tm, tr;
  DT_ASSERT_OK(MakeTensor(ctx, dt, {n, c}, x, &tx));
  DT_ASSERT_OK(MakeTensor(ctx, dt, {c}, gamma, &tg));
  DT_ASSERT_OK(MakeTensor(ctx, dt, {c}, beta, &tb));
  DT_ASSERT_OK(MakeTensor(ctx, dt, {n, c}, std::vector<double>(n * c, NAN), &ty));
  DT_ASSERT_OK(MakeTensor(ctx, dt, {n}, std::vector<double>(n, NAN), &tm));
  DT_ASSERT_OK(MakeTensor(ctx, dt, {n}, std::vector<double>(n, NAN), &tr));
  DT_ASSERT_OK(LayerNormForward(ctx, tx, tg, tb, eps, &ty, &tm, &tr));
  DT_ASSERT_OK(Fetch(ctx, ty, &out->y));
  DT_ASSERT_OK(Fetch(ctx, tm, &out->mean));
  DT_ASSERT_OK(Fetch(ctx, tr, &out->rstd));
}

struct Bwd {
  std::vector<double> dx, dgamma, dbeta;
};

// Backward with saved mean/rstd; dgamma/dbeta start at `param_base` (they accumulate); dx poisoned, or starting at
// *dx_base and accumulated onto it.
void RunBackward(DeviceContext& ctx, DType dt, int64_t n, int64_t c, const std::vector<double>& x,
                 const std::vector<double>& gamma, const Fwd& fwd, const std::vector<double>& dy,
                 const std::vector<double>& param_base, Bwd* out, const std::vector<double>* dx_base = nullptr) {
  Tensor tx, tg, tm, tr, tdy, tdx, tdg, tdb;
  DT_ASSERT_OK(MakeTensor(ctx, dt, {n, c}, x, &tx));
  DT_ASSERT_OK(MakeTensor(ctx, dt, {c}, gamma, &tg));
  DT_ASSERT_OK(MakeTensor(ctx, dt, {n}, fwd.mean, &tm));
  DT_ASSERT_OK(MakeTensor(ctx, dt, {n}, fwd.rstd, &tr));
  DT_ASSERT_OK(MakeTensor(ctx, dt, {n, c}, dy, &tdy));
  DT_ASSERT_OK(MakeTensor(ctx, dt, {n, c}, dx_base ? *dx_base : std::vector<double>(n * c, NAN), &tdx));
  DT_ASSERT_OK(MakeTensor(ctx, dt, {c}, param_base, &tdg));
  DT_ASSERT_OK(MakeTensor(ctx, dt, {c}, param_base, &tdb));
  DT_ASSERT_OK(LayerNormBackward(ctx, tx, tg, tm, tr, tdy, &tdx, &tdg, &tdb, /*accumulate_dx=*/dx_base != nullptr));
  DT_ASSERT_OK(Fetch(ctx, tdx, &out->dx));
  DT_ASSERT_OK(Fetch(ctx, tdg, &out->dgamma));
  DT_ASSERT_OK(Fetch(ctx, tdb, &out->dbeta));
}

TEST(LayerNormCpu, HandComputedRow) {
  auto cpu = Cpu();
  // x = {1,2,3,4}: mean 2.5, biased variance 1.25, y = (x - 2.5) / sqrt(1.25) * gamma + beta.
  Fwd f;
  ASSERT_NO_FATAL_FAILURE(RunForward(*cpu, DType::kF64, 1, 4, {1, 2, 3, 4}, {1, 1, 2, 2}, {0, 0, 0, 10}, 0.f, &f));
  const double s = 1 / std::sqrt(1.25);
  EXPECT_DOUBLE_EQ(f.mean[0], 2.5);
  EXPECT_DOUBLE_EQ(f.rstd[0], s);
  const std::vector<double> want = {-1.5 * s, -0.5 * s, 2 * 0.5 * s, 2 * 1.5 * s + 10};
  for (int j = 0; j < 4; ++j) EXPECT_NEAR(f.y[j], want[j], 1e-15) << j;
}

TEST(LayerNormCpu, NormalizedRowsHaveMeanZeroAndUnitVariance) {
  auto cpu = Cpu();
  const int64_t n = 5, c = 64;
  auto x = RandomVector(n * c, 1, -2, 2);
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t j = 0; j < c; ++j) x[i * c + j] += 100.0 * i;  // large row means: two-pass variance needed
  }
  for (DType dt : {DType::kF64, DType::kF32}) {
    const double tol = dt == DType::kF64 ? 1e-12 : 1e-5;
    Fwd f;
    ASSERT_NO_FATAL_FAILURE(
        RunForward(*cpu, dt, n, c, x, std::vector<double>(c, 1), std::vector<double>(c, 0), 0.f, &f));
    for (int64_t i = 0; i < n; ++i) {
      double mean = 0, var = 0;
      for (int64_t j = 0; j < c; ++j) mean += f.y[i * c + j] / c;
      for (int64_t j = 0; j < c; ++j) var += (f.y[i * c + j] - mean) * (f.y[i * c + j] - mean) / c;
      EXPECT_NEAR(mean, 0.0, tol) << "row " << i << " " << DTypeName(dt);
      EXPECT_NEAR(var, 1.0, tol) << "row " << i << " " << DTypeName(dt);
    }
  }
}

// loss = sum(W .* y(x, gamma, beta)); checks dx (through the saved mean/rstd), dgamma and dbeta.
TEST(LayerNormGrad, FiniteDifferences) {
  auto cpu = Cpu();
  const int64_t n = 3, c = 7;
  const float eps = 1e-5f;
  const auto x = RandomVector(n * c, 1, -2, 2), gamma = RandomVector(c, 2, 0.5, 1.5), beta = RandomVector(c, 3);
  const auto w = RandomVector(n * c, 4), base = RandomVector(c, 5);
  Fwd f;
  Bwd g;
  ASSERT_NO_FATAL_FAILURE(RunForward(*cpu, DType::kF64, n, c, x, gamma, beta, eps, &f));
  ASSERT_NO_FATAL_FAILURE(RunBackward(*cpu, DType::kF64, n, c, x, gamma, f, w, base, &g));
  std::vector<double> dgamma(c), dbeta(c);  // the accumulated part only
  for (int64_t j = 0; j < c; ++j) {
    dgamma[j] = g.dgamma[j] - base[j];
    dbeta[j] = g.dbeta[j] - base[j];
  }
  auto loss = [&](const std::vector<double>& xv, const std::vector<double>& gv, const std::vector<double>& bv) {
    Fwd out;
    RunForward(*cpu, DType::kF64, n, c, xv, gv, bv, eps, &out);
    return testing::Dot(w, out.y);
  };
  const auto rx = testing::CheckGradient([&](const std::vector<double>& v) { return loss(v, gamma, beta); }, x, g.dx);
  const auto rg = testing::CheckGradient([&](const std::vector<double>& v) { return loss(x, v, beta); }, gamma, dgamma);
  const auto rb = testing::CheckGradient([&](const std::vector<double>& v) { return loss(x, gamma, v); }, beta, dbeta);
  EXPECT_LT(rx.max_rel_error, 1e-6) << "dx: " << rx.ToString();
  EXPECT_LT(rg.max_rel_error, 1e-6) << "dgamma: " << rg.ToString();
  EXPECT_LT(rb.max_rel_error, 1e-6) << "dbeta: " << rb.ToString();
}

TEST(LayerNorm, AcceptsLeadingDimsAndRejectsMismatchedShapes) {
  auto cpu = Cpu();
  Tensor x, g, b, y, m, r, g5, m_bad;
  DT_ASSERT_OK(MakeTensor(*cpu, DType::kF32, {2, 3, 4}, RandomVector(24, 1), &x));
  DT_ASSERT_OK(MakeTensor(*cpu, DType::kF32, {4}, std::vector<double>(4, 1.0), &g));
  DT_ASSERT_OK(MakeTensor(*cpu, DType::kF32, {4}, std::vector<double>(4, 0.0), &b));
  DT_ASSERT_OK(MakeTensor(*cpu, DType::kF32, {2, 3, 4}, std::vector<double>(24, 0.0), &y));
  DT_ASSERT_OK(MakeTensor(*cpu, DType::kF32, {2, 3}, std::vector<double>(6, 0.0), &m));
  DT_ASSERT_OK(MakeTensor(*cpu, DType::kF32, {2, 3}, std::vector<double>(6, 0.0), &r));
  DT_ASSERT_OK(MakeTensor(*cpu, DType::kF32, {5}, std::vector<double>(5, 1.0), &g5));
  DT_ASSERT_OK(MakeTensor(*cpu, DType::kF32, {6}, std::vector<double>(6, 0.0), &m_bad));
  DT_ASSERT_OK(LayerNormForward(*cpu, x, g, b, 1e-5f, &y, &m, &r));  // x[2,3,C] -> mean/rstd [2,3]
  const Status st = LayerNormForward(*cpu, x, g5, b, 1e-5f, &y, &m, &r);
  EXPECT_EQ(st.code(), Status::Code::kInvalidArgument);
  EXPECT_NE(st.message().find("f32[2,3,4]"), std::string::npos) << st.ToString();
  EXPECT_NE(st.message().find("f32[5]"), std::string::npos) << st.ToString();
  EXPECT_EQ(LayerNormForward(*cpu, x, g, b, 1e-5f, &y, &m_bad, &r).code(), Status::Code::kInvalidArgument);
  Tensor dx = y, dg = g, db = b;
  EXPECT_EQ(LayerNormBackward(*cpu, x, g, m, r, y, &dx, &g5, &db).code(), Status::Code::kInvalidArgument);
  EXPECT_EQ(LayerNormBackward(*cpu, x, g, m, r, m, &dx, &dg, &db).code(), Status::Code::kInvalidArgument);
}

// GPU vs the CPU f64 reference on f32 inputs; rows have means up to ~6 (two-pass variance). Tolerances, all
// max abs err <= tol * scale: y and dx 1e-5; dgamma/dbeta (fp32 sums over N rows, accumulated onto a random
// base) 1e-5; mean and rstd 1e-5. Shapes take both backward paths: fused (128-bit rows of C <= 4 * 32 * 4: 256 and
// 512; 1000 rows = 16 blocks of partial sums) and two-pass (33 and 1 scalar, 768 and 1000 wider).
TEST(LayerNormCuda, MatchesCpuReference) {
  DT_SKIP_WITHOUT_CUDA();
  auto cpu = Cpu();
  std::unique_ptr<DeviceContext> gpu;
  DT_ASSERT_OK(DeviceContext::CreateCuda(0, &gpu));
  auto round = [](std::vector<double> v) {
    for (double& e : v) e = static_cast<float>(e);
    return v;
  };
  for (const auto& [n, c] :
       {std::pair<int64_t, int64_t>{257, 768}, {64, 33}, {3, 1}, {9, 1000}, {130, 512}, {1000, 256}}) {
    auto x = RandomVector(n * c, n + c, -2, 2);
    for (int64_t i = 0; i < n; ++i) {
      for (int64_t j = 0; j < c; ++j) x[i * c + j] += static_cast<double>(i % 7);
    }
    x = round(x);
    const auto gamma = round(RandomVector(c, 1, 0.5, 1.5)), beta = round(RandomVector(c, 2));
    const auto dy = round(RandomVector(n * c, 3)), base = round(RandomVector(c, 4));
    Fwd want_f, got_f;
    ASSERT_NO_FATAL_FAILURE(RunForward(*cpu, DType::kF64, n, c, x, gamma, beta, 1e-5f, &want_f));
    ASSERT_NO_FATAL_FAILURE(RunForward(*gpu, DType::kF32, n, c, x, gamma, beta, 1e-5f, &got_f));
    EXPECT_LE(testing::MaxAbsDiff(got_f.y, want_f.y), 1e-5 * testing::Scale(want_f.y)) << n << "x" << c;
    EXPECT_LE(testing::MaxAbsDiff(got_f.mean, want_f.mean), 1e-5 * testing::Scale(want_f.mean)) << n << "x" << c;
    EXPECT_LE(testing::MaxAbsDiff(got_f.rstd, want_f.rstd), 1e-5 * testing::Scale(want_f.rstd)) << n << "x" << c;
    // Both backward passes use the reference's saved statistics, so only the backward arithmetic is compared.
    const Fwd stats = {{}, round(want_f.mean), round(want_f.rstd)};
    Bwd want_b, got_b;
    ASSERT_NO_FATAL_FAILURE(RunBackward(*cpu, DType::kF64, n, c, x, gamma, stats, dy, base, &want_b));
    ASSERT_NO_FATAL_FAILURE(RunBackward(*gpu, DType::kF32, n, c, x, gamma, stats, dy, base, &got_b));
    EXPECT_LE(testing::MaxAbsDiff(got_b.dx, want_b.dx), 1e-5 * testing::Scale(want_b.dx)) << n << "x" << c;
    EXPECT_LE(testing::MaxAbsDiff(got_b.dgamma, want_b.dgamma), 1e-5 * testing::Scale(want_b.dgamma)) << n << "x" << c;
    EXPECT_LE(testing::MaxAbsDiff(got_b.dbeta, want_b.dbeta), 1e-5 * testing::Scale(want_b.dbeta)) << n << "x" << c;
    // accumulate_dx: dx lands on a residual gradient already there.
    const auto dx_base = round(RandomVector(n * c, 5));
    std::vector<double> want_acc = want_b.dx;
    for (size_t i = 0; i < want_acc.size(); ++i) want_acc[i] += dx_base[i];
    ASSERT_NO_FATAL_FAILURE(RunBackward(*gpu, DType::kF32, n, c, x, gamma, stats, dy, base, &got_b, &dx_base));
    EXPECT_LE(testing::MaxAbsDiff(got_b.dx, want_acc), 1e-5 * testing::Scale(want_acc)) << n << "x" << c;
  }
}

// accumulate_dx adds exactly the gradient the plain call writes (f64 on the CPU: one rounding of the sum).
TEST(LayerNormCpu, AccumulateDxAddsTheGradientToDx) {
  auto cpu = Cpu();
  const int64_t n = 5, c = 12;
  const auto x = RandomVector(n * c, 11, -2, 2), gamma = RandomVector(c, 12, 0.5, 1.5), beta = RandomVector(c, 13);
  const auto dy = RandomVector(n * c, 14), base = RandomVector(c, 15), dx_base = RandomVector(n * c, 16);
  Fwd f;
  ASSERT_NO_FATAL_FAILURE(RunForward(*cpu, DType::kF64, n, c, x, gamma, beta, 1e-5f, &f));
  Bwd plain, acc;
  ASSERT_NO_FATAL_FAILURE(RunBackward(*cpu, DType::kF64, n, c, x, gamma, f, dy, base, &plain));
  ASSERT_NO_FATAL_FAILURE(RunBackward(*cpu, DType::kF64, n, c, x, gamma, f, dy, base, &acc, &dx_base));
  for (int64_t i = 0; i < n * c; ++i) EXPECT_DOUBLE_EQ(acc.dx[i], plain.dx[i] + dx_base[i]) << i;
  EXPECT_EQ(acc.dgamma, plain.dgamma);
  EXPECT_EQ(acc.dbeta, plain.dbeta);
}

}  // namespace
}  // namespace dtrain::ops
