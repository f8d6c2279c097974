// Tests of kernels/bias: BiasAdd / BiasGrad on hand-computed cases, a finite-difference gradient check (f64),
// shape errors, and CPU-vs-CUDA agreement.
#include <gtest/gtest.h>

#include <cmath>
#include <memory>
#include <vector>

#include "core/device_context.h"
#include "kernels/bias.h"
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

// y + bias (broadcast over rows), on ctx in dtype dt.
void RunAdd(DeviceContext& ctx, DType dt, int64_t m, int64_t n, const std::vector<double>& y,
            const std::vector<double>& bias, std::vector<double>* out) {
  Tensor ty, tb;
  DT_ASSERT_OK(MakeTensor(ctx, dt, {m, n}, y, &ty));
  DT_ASSERT_OK(MakeTensor(ctx, dt, {n}, bias, &tb));
  DT_ASSERT_OK(BiasAdd(ctx, tb, &ty));
  DT_ASSERT_OK(Fetch(ctx, ty, out));
}

// BiasGrad of dy into a dbias that starts as `dbias0`.
void RunGrad(DeviceContext& ctx, DType dt, int64_t m, int64_t n, const std::vector<double>& dy,
             const std::vector<double>& dbias0, bool accumulate, std::vector<double>* out) {
  Tensor tdy, tdb;
  DT_ASSERT_OK(MakeTensor(ctx, dt, {m, n}, dy, &tdy));
  DT_ASSERT_OK(MakeTensor(ctx, dt, {n}, dbias0, &tdb));
  DT_ASSERT_OK(BiasGrad(ctx, tdy, &tdb, accumulate));
  DT_ASSERT_OK(Fetch(ctx, tdb, out));
}

TEST(BiasCpu, HandComputed) {
  auto cpu = Cpu();
  for (DType dt : {DType::kF32, DType::kF64}) {
    std::vector<double> got;
    ASSERT_NO_FATAL_FAILURE(RunAdd(*cpu, dt, 2, 3, {1, 2, 3, 4, 5, 6}, {10, 20, 30}, &got));
    EXPECT_EQ(got, (std::vector<double>{11, 22, 33, 14, 25, 36}));
    // Overwrite ignores the old (NaN) value; accumulate adds to it.
    ASSERT_NO_FATAL_FAILURE(RunGrad(*cpu, dt, 2, 3, {1, 2, 3, 4, 5, 6}, {NAN, NAN, NAN}, false, &got));
    EXPECT_EQ(got, (std::vector<double>{5, 7, 9}));
    ASSERT_NO_FATAL_FAILURE(RunGrad(*cpu, dt, 2, 3, {1, 2, 3, 4, 5, 6}, {1, 1, 1}, true, &got));
    EXPECT_EQ(got, (std::vector<double>{6, 8, 10}));
  }
}

// loss = sum(W .* (X + bias)); d loss / d bias = BiasGrad(W).
TEST(BiasGrad, FiniteDifferences) {
  auto cpu = Cpu();
  const int64_t m = 4, n = 5;
  const auto x = RandomVector(m * n, 1), bias = RandomVector(n, 2), w = RandomVector(m * n, 3);
  std::vector<double> analytic;
  ASSERT_NO_FATAL_FAILURE(RunGrad(*cpu, DType::kF64, m, n, w, std::vector<double>(n, NAN), false, &analytic));
  auto loss = [&](const std::vector<double>& b) {
    std::vector<double> y;
    RunAdd(*cpu, DType::kF64, m, n, x, b, &y);
    return testing::Dot(w, y);
  };
  const auto r = testing::CheckGradient(loss, bias, analytic);
  EXPECT_LT(r.max_rel_error, 1e-6) << r.ToString();
}

TEST(Bias, RejectsMismatchedShapesNamingThem) {
  auto cpu = Cpu();
  Tensor y, b4, b3_64;
  DT_ASSERT_OK(MakeTensor(*cpu, DType::kF32, {2, 3}, std::vector<double>(6, 0.0), &y));
  DT_ASSERT_OK(MakeTensor(*cpu, DType::kF32, {4}, std::vector<double>(4, 0.0), &b4));
  DT_ASSERT_OK(MakeTensor(*cpu, DType::kF64, {3}, std::vector<double>(3, 0.0), &b3_64));
  const Status st = BiasAdd(*cpu, b4, &y);
  EXPECT_EQ(st.code(), Status::Code::kInvalidArgument);
  EXPECT_NE(st.message().find("f32[2,3]"), std::string::npos) << st.ToString();
  EXPECT_NE(st.message().find("f32[4]"), std::string::npos) << st.ToString();
  EXPECT_EQ(BiasGrad(*cpu, y, &b4, false).code(), Status::Code::kInvalidArgument);
  EXPECT_EQ(BiasAdd(*cpu, b3_64, &y).code(), Status::Code::kInvalidArgument);  // dtype mismatch
  EXPECT_EQ(BiasGrad(*cpu, y, nullptr, false).code(), Status::Code::kInvalidArgument);
}

// GPU vs the CPU f64 reference on the same f32 inputs. Tolerances: BiasAdd is one rounded add per element
// (max abs err <= 1e-6 * scale); BiasGrad sums M = 300 rows in fp32 (max abs err <= 1e-5 * scale).
TEST(BiasCuda, MatchesCpuReference) {
  DT_SKIP_WITHOUT_CUDA();
  auto cpu = Cpu();
  std::unique_ptr<DeviceContext> gpu;
  DT_ASSERT_OK(DeviceContext::CreateCuda(0, &gpu));
  for (const auto& [m, n] : {std::pair<int64_t, int64_t>{300, 77}, {64, 256}, {1, 10}, {1000, 33}, {300, 1000}}) {
    const auto y = RandomVector(m * n, m + n), bias = RandomVector(n, m * n), base = RandomVector(n, 5);
    std::vector<double> want, got;
    ASSERT_NO_FATAL_FAILURE(RunAdd(*cpu, DType::kF64, m, n, y, bias, &want));
    ASSERT_NO_FATAL_FAILURE(RunAdd(*gpu, DType::kF32, m, n, y, bias, &got));
    EXPECT_LE(testing::MaxAbsDiff(got, want), 1e-6 * testing::Scale(want)) << "BiasAdd " << m << "x" << n;
    for (const bool accumulate : {false, true}) {
      // Overwrite mode starts from NaN poison: any unwritten column shows up.
      const auto start = accumulate ? base : std::vector<double>(n, NAN);
      ASSERT_NO_FATAL_FAILURE(RunGrad(*cpu, DType::kF64, m, n, y, start, accumulate, &want));
      ASSERT_NO_FATAL_FAILURE(RunGrad(*gpu, DType::kF32, m, n, y, start, accumulate, &got));
      EXPECT_LE(testing::MaxAbsDiff(got, want), 1e-5 * testing::Scale(want))
          << "BiasGrad " << m << "x" << n << " accumulate=" << accumulate;
    }
  }
}

}  // namespace
}  // namespace dtrain::ops
