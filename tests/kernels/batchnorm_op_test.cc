// Tests of kernels/batchnorm: closed forms (batch statistics, running statistics with momentum and the
// unbiased variance, eval mode), f64 gradient checks of x, gamma and beta, accumulate semantics, shape errors,
// and CPU-vs-CUDA agreement with a documented tolerance.
#include <gtest/gtest.h>

#include <cmath>
#include <memory>
#include <vector>

#include "core/device_context.h"
#include "kernels/batchnorm.h"
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

// Host copy of one BN layer's per-channel state.
struct HostBn {
  std::vector<double> gamma, beta, running_mean, running_var, save_mean, save_inv_std;
};

void ToDevice(DeviceContext& ctx, DType dt, const HostBn& h, BatchNormTensors* t) {
  const int64_t c = static_cast<int64_t>(h.gamma.size());
  const std::vector<double> nan(c, NAN);
  DT_ASSERT_OK(MakeTensor(ctx, dt, {c}, h.gamma, &t->gamma));
  DT_ASSERT_OK(MakeTensor(ctx, dt, {c}, h.beta, &t->beta));
  DT_ASSERT_OK(MakeTensor(ctx, dt, {c}, h.running_mean, &t->running_mean));
  DT_ASSERT_OK(MakeTensor(ctx, dt, {c}, h.running_var, &t->running_var));
  DT_ASSERT_OK(MakeTensor(ctx, dt, {c}, h.save_mean.empty() ? nan : h.save_mean, &t->save_mean));
  DT_ASSERT_OK(MakeTensor(ctx, dt, {c}, h.save_inv_std.empty() ? nan : h.save_inv_std, &t->save_inv_std));
}

void ToHost(DeviceContext& ctx, const BatchNormTensors& t, HostBn* h) {
  DT_ASSERT_OK(Fetch(ctx, t.gamma, &h->gamma));
  DT_ASSERT_OK(Fetch(ctx, t.beta, &h->beta));
  DT_ASSERT_OK(Fetch(ctx, t.running_mean, &h->running_mean));
  DT_ASSERT_OK(Fetch(ctx, t.running_var, &h->running_var));
  DT_ASSERT_OK(Fetch(ctx, t.save_mean, &h->save_mean));
  DT_ASSERT_OK(Fetch(ctx, t.save_inv_std, &h->save_inv_std));
}

// Training forward of x (shape) with state `bn` (updated in place); y starts as `y_init`.
void Train(DeviceContext& ctx, DType dt, const std::vector<int64_t>& shape, const std::vector<double>& x, HostBn* bn,
           const std::vector<double>& y_init, bool accumulate, std::vector<double>* y) {
  BatchNormTensors t;
  ASSERT_NO_FATAL_FAILURE(ToDevice(ctx, dt, *bn, &t));
  Tensor tx, ty;
  DT_ASSERT_OK(MakeTensor(ctx, dt, shape, x, &tx));
  DT_ASSERT_OK(MakeTensor(ctx, dt, shape, y_init, &ty));
  DT_ASSERT_OK(BatchNormForwardTraining(ctx, tx, &t, &ty, accumulate));
  DT_ASSERT_OK(Fetch(ctx, ty, y));
  ASSERT_NO_FATAL_FAILURE(ToHost(ctx, t, bn));
}

void Eval(DeviceContext& ctx, DType dt, const std::vector<int64_t>& shape, const std::vector<double>& x,
          const HostBn& bn, const std::vector<double>& y_init, bool accumulate, std::vector<double>* y) {
  BatchNormTensors t;
  ASSERT_NO_FATAL_FAILURE(ToDevice(ctx, dt, bn, &t));
  Tensor tx, ty;
  DT_ASSERT_OK(MakeTensor(ctx, dt, shape, x, &tx));
  DT_ASSERT_OK(MakeTensor(ctx, dt, shape, y_init, &ty));
  DT_ASSERT_OK(BatchNormForwardEval(ctx, tx, t, &ty, accumulate));
  DT_ASSERT_OK(Fetch(ctx, ty, y));
}

// Backward with the saved statistics in `bn`; dgamma/dbeta start from `dparam_init` (accumulated when asked).
void Backward(DeviceContext& ctx, DType dt, const std::vector<int64_t>& shape, const std::vector<double>& x,
              const std::vector<double>& dy, const HostBn& bn, const std::vector<double>& dparam_init, bool accumulate,
              std::vector<double>* dx, std::vector<double>* dgamma, std::vector<double>* dbeta) {
  BatchNormTensors t;
  ASSERT_NO_FATAL_FAILURE(ToDevice(ctx, dt, bn, &t));
  const int64_t c = static_cast<int64_t>(bn.gamma.size());
  Tensor tx, tdy, tdx, tdg, tdb;
  DT_ASSERT_OK(MakeTensor(ctx, dt, shape, x, &tx));
  DT_ASSERT_OK(MakeTensor(ctx, dt, shape, dy, &tdy));
  DT_ASSERT_OK(MakeTensor(ctx, dt, shape, std::vector<double>(x.size(), NAN), &tdx));
  DT_ASSERT_OK(MakeTensor(ctx, dt, {c}, dparam_init, &tdg));
  DT_ASSERT_OK(MakeTensor(ctx, dt, {c}, dparam_init, &tdb));
  DT_ASSERT_OK(BatchNormBackward(ctx, tx, tdy, t, &tdx, &tdg, &tdb, accumulate));
  DT_ASSERT_OK(Fetch(ctx, tdx, dx));
  DT_ASSERT_OK(Fetch(ctx, tdg, dgamma));
  DT_ASSERT_OK(Fetch(ctx, tdb, dbeta));
}

HostBn Fresh(int64_t c, uint64_t seed) {
  HostBn h;
  h.gamma = RandomVector(c, seed, 0.5, 1.5);
  h.beta = RandomVector(c, seed + 1);
  h.running_mean.assign(c, 0.0);
  h.running_var.assign(c, 1.0);
  return h;
}

TEST(BatchNormCpu, ClosedForm) {
  auto cpu = Cpu();
  // x [2, 1, 2]: channel values {1, 2, 3, 4}: mean 2.5, biased var 1.25, unbiased 5/3.
  const std::vector<int64_t> shape = {2, 1, 2};
  const double eps = kBatchNormEps, mom = kBatchNormMomentum;  // the f32 constants, exactly
  for (DType dt : {DType::kF32, DType::kF64}) {
    const double tol = dt == DType::kF32 ? 1e-6 : 1e-14;
    HostBn bn{{2.0}, {0.5}, {1.0}, {3.0}, {}, {}};
    std::vector<double> y;
    ASSERT_NO_FATAL_FAILURE(Train(*cpu, dt, shape, {1, 2, 3, 4}, &bn, std::vector<double>(4, NAN), false, &y));
    const double inv_std = 1.0 / std::sqrt(1.25 + eps);
    for (int i = 0; i < 4; ++i) EXPECT_NEAR(y[i], 2.0 * (i + 1 - 2.5) * inv_std + 0.5, tol);
    EXPECT_NEAR(bn.save_mean[0], 2.5, tol);
    EXPECT_NEAR(bn.save_inv_std[0], inv_std, tol);
    EXPECT_NEAR(bn.running_mean[0], (1 - mom) * 1.0 + mom * 2.5, tol);
    EXPECT_NEAR(bn.running_var[0], (1 - mom) * 3.0 + mom * 5.0 / 3.0, tol);
    // Eval normalizes with the running statistics instead.
    ASSERT_NO_FATAL_FAILURE(Eval(*cpu, dt, shape, {1, 2, 3, 4}, bn, std::vector<double>(4, NAN), false, &y));
    const double rs = 1.0 / std::sqrt(bn.running_var[0] + eps);
    for (int i = 0; i < 4; ++i) EXPECT_NEAR(y[i], 2.0 * (i + 1 - bn.running_mean[0]) * rs + 0.5, tol);
  }
}

TEST(BatchNormCpu, AccumulateAddsToTheOutputAndParamGrads) {
  auto cpu = Cpu();
  const std::vector<int64_t> shape = {3, 2, 2, 2};
  const auto x = RandomVector(24, 1), init = RandomVector(24, 2), dy = RandomVector(24, 3);
  HostBn a = Fresh(2, 4), b = Fresh(2, 4);
  std::vector<double> set, acc;
  ASSERT_NO_FATAL_FAILURE(Train(*cpu, DType::kF64, shape, x, &a, std::vector<double>(24, NAN), false, &set));
  ASSERT_NO_FATAL_FAILURE(Train(*cpu, DType::kF64, shape, x, &b, init, true, &acc));
  for (int i = 0; i < 24; ++i) EXPECT_NEAR(acc[i], init[i] + set[i], 1e-12);
  ASSERT_NO_FATAL_FAILURE(Eval(*cpu, DType::kF64, shape, x, a, std::vector<double>(24, NAN), false, &set));
  ASSERT_NO_FATAL_FAILURE(Eval(*cpu, DType::kF64, shape, x, a, init, true, &acc));
  for (int i = 0; i < 24; ++i) EXPECT_NEAR(acc[i], init[i] + set[i], 1e-12);
  std::vector<double> dx0, dg0, db0, dx1, dg1, db1;
  ASSERT_NO_FATAL_FAILURE(Backward(*cpu, DType::kF64, shape, x, dy, a, {NAN, NAN}, false, &dx0, &dg0, &db0));
  ASSERT_NO_FATAL_FAILURE(Backward(*cpu, DType::kF64, shape, x, dy, a, {10, 20}, true, &dx1, &dg1, &db1));
  EXPECT_EQ(dx0, dx1);  // dx is always overwritten
  for (int c = 0; c < 2; ++c) {
    EXPECT_NEAR(dg1[c], dg0[c] + (c == 0 ? 10 : 20), 1e-12);
    EXPECT_NEAR(db1[c], db0[c] + (c == 0 ? 10 : 20), 1e-12);
  }
}

// loss = sum(v .* BN(x; gamma, beta)) in training mode, against central differences in x, gamma and beta.
TEST(BatchNormGrad, FiniteDifferences) {
  auto cpu = Cpu();
  for (const std::vector<int64_t>& shape : {std::vector<int64_t>{4, 3, 3, 2}, std::vector<int64_t>{5, 4}}) {
    const int64_t n = Tensor::NumelOf(shape), c = shape[1];
    const auto x = RandomVector(n, 7, -2, 2), v = RandomVector(n, 8);
    const HostBn base = Fresh(c, 9);
    auto loss = [&](const std::vector<double>& xv, const std::vector<double>& g, const std::vector<double>& b) {
      HostBn bn = base;
      bn.gamma = g;
      bn.beta = b;
      std::vector<double> y;
      Train(*cpu, DType::kF64, shape, xv, &bn, std::vector<double>(n, NAN), false, &y);
      return testing::Dot(v, y);
    };
    HostBn saved = base;
    std::vector<double> y, dx, dgamma, dbeta;
    ASSERT_NO_FATAL_FAILURE(Train(*cpu, DType::kF64, shape, x, &saved, std::vector<double>(n, NAN), false, &y));
    ASSERT_NO_FATAL_FAILURE(
        Backward(*cpu, DType::kF64, shape, x, v, saved, std::vector<double>(c, 0.0), true, &dx, &dgamma, &dbeta));
    const auto rx = testing::CheckGradient([&](const auto& xv) { return loss(xv, base.gamma, base.beta); }, x, dx);
    const auto rg = testing::CheckGradient([&](const auto& g) { return loss(x, g, base.beta); }, base.gamma, dgamma);
    const auto rb = testing::CheckGradient([&](const auto& b) { return loss(x, base.gamma, b); }, base.beta, dbeta);
    EXPECT_LT(rx.max_rel_error, 1e-6) << "dx: " << rx.ToString();
    EXPECT_LT(rg.max_rel_error, 1e-6) << "dgamma: " << rg.ToString();
    EXPECT_LT(rb.max_rel_error, 1e-6) << "dbeta: " << rb.ToString();
  }
}

TEST(BatchNorm, RejectsBadShapesNamingThem) {
  auto cpu = Cpu();
  BatchNormTensors t;
  ASSERT_NO_FATAL_FAILURE(ToDevice(*cpu, DType::kF32, Fresh(3, 1), &t));
  Tensor x, y, y_bad, x1d;
  DT_ASSERT_OK(MakeTensor(*cpu, DType::kF32, {2, 4, 2, 2}, std::vector<double>(32, 0.0), &x));  // C = 4, not 3
  DT_ASSERT_OK(MakeTensor(*cpu, DType::kF32, {2, 4, 2, 2}, std::vector<double>(32, 0.0), &y));
  DT_ASSERT_OK(MakeTensor(*cpu, DType::kF32, {2, 4, 4}, std::vector<double>(32, 0.0), &y_bad));
  DT_ASSERT_OK(MakeTensor(*cpu, DType::kF32, {6}, std::vector<double>(6, 0.0), &x1d));
  Status st = BatchNormForwardTraining(*cpu, x, &t, &y, false);
  EXPECT_EQ(st.code(), Status::Code::kInvalidArgument);
  EXPECT_NE(st.message().find("f32[3]"), std::string::npos) << st.ToString();
  EXPECT_NE(st.message().find("f32[2,4,2,2]"), std::string::npos) << st.ToString();
  ASSERT_NO_FATAL_FAILURE(ToDevice(*cpu, DType::kF32, Fresh(4, 1), &t));
  DT_ASSERT_OK(BatchNormForwardTraining(*cpu, x, &t, &y, false));
  EXPECT_EQ(BatchNormForwardTraining(*cpu, x, &t, &y_bad, false).code(), Status::Code::kInvalidArgument);
  EXPECT_EQ(BatchNormForwardEval(*cpu, x1d, t, &y, false).code(), Status::Code::kInvalidArgument);
  EXPECT_EQ(BatchNormBackward(*cpu, x, y, t, &y, nullptr, nullptr, true).code(), Status::Code::kInvalidArgument);
}

// Own kernels vs the CPU reference, both summing in double: they differ only in the final fp32 roundings of
// y = (x - mean) * scale + shift and of dx, so we allow max |gpu - cpu| <= 1e-5 * max(1, max |cpu|) on every
// output (y, dx, dgamma, dbeta, running and saved statistics), with 100k values per channel.
TEST(BatchNormCuda, MatchesCpu) {
  DT_SKIP_WITHOUT_CUDA();
  auto cpu = Cpu();
  std::unique_ptr<DeviceContext> gpu;
  DT_ASSERT_OK(DeviceContext::CreateCuda(0, &gpu));
  for (const std::vector<int64_t>& shape :
       {std::vector<int64_t>{128, 32, 28, 28}, std::vector<int64_t>{128, 128, 7, 7}, std::vector<int64_t>{3, 5}}) {
    const int64_t n = Tensor::NumelOf(shape), c = shape[1];
    const auto x = RandomVector(n, 21, -3, 5), dy = RandomVector(n, 22), init = RandomVector(n, 23);
    for (bool accumulate : {false, true}) {
      HostBn bc = Fresh(c, 24), bg = Fresh(c, 24);
      const auto y0 = accumulate ? init : std::vector<double>(n, NAN);
      std::vector<double> yc, yg;
      ASSERT_NO_FATAL_FAILURE(Train(*cpu, DType::kF32, shape, x, &bc, y0, accumulate, &yc));
      ASSERT_NO_FATAL_FAILURE(Train(*gpu, DType::kF32, shape, x, &bg, y0, accumulate, &yg));
      EXPECT_LE(testing::MaxAbsDiff(yg, yc), 1e-5 * testing::Scale(yc));
      for (auto [g, cref] :
           {std::make_pair(&bg.running_mean, &bc.running_mean), std::make_pair(&bg.running_var, &bc.running_var),
            std::make_pair(&bg.save_mean, &bc.save_mean), std::make_pair(&bg.save_inv_std, &bc.save_inv_std)}) {
        EXPECT_LE(testing::MaxAbsDiff(*g, *cref), 1e-5 * testing::Scale(*cref));
      }
      ASSERT_NO_FATAL_FAILURE(Eval(*cpu, DType::kF32, shape, x, bc, y0, accumulate, &yc));
      ASSERT_NO_FATAL_FAILURE(Eval(*gpu, DType::kF32, shape, x, bc, y0, accumulate, &yg));
      EXPECT_LE(testing::MaxAbsDiff(yg, yc), 1e-5 * testing::Scale(yc));
      std::vector<double> dxc, dgc, dbc, dxg, dgg, dbg;
      const std::vector<double> pinit(c, accumulate ? 1.0 : NAN);
      ASSERT_NO_FATAL_FAILURE(Backward(*cpu, DType::kF32, shape, x, dy, bc, pinit, accumulate, &dxc, &dgc, &dbc));
      ASSERT_NO_FATAL_FAILURE(Backward(*gpu, DType::kF32, shape, x, dy, bc, pinit, accumulate, &dxg, &dgg, &dbg));
      EXPECT_LE(testing::MaxAbsDiff(dxg, dxc), 1e-5 * testing::Scale(dxc));
      EXPECT_LE(testing::MaxAbsDiff(dgg, dgc), 1e-5 * testing::Scale(dgc));
      EXPECT_LE(testing::MaxAbsDiff(dbg, dbc), 1e-5 * testing::Scale(dbc));
    }
  }
}

}  // namespace
}  // namespace dtrain::ops
