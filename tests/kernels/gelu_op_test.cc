// Tests of kernels/gelu (tanh approximation): closed forms, a finite-difference gradient check (f64), shape
// errors, and CPU-vs-CUDA agreement.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <vector>

#include "core/device_context.h"
#include "kernels/gelu.h"
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

void RunForward(DeviceContext& ctx, DType dt, const std::vector<double>& x, std::vector<double>* y) {
  const int64_t n = static_cast<int64_t>(x.size());
  Tensor tx, ty;
  DT_ASSERT_OK(MakeTensor(ctx, dt, {n}, x, &tx));
  DT_ASSERT_OK(MakeTensor(ctx, dt, {n}, std::vector<double>(n, NAN), &ty));  // poisoned output
  DT_ASSERT_OK(GeluForward(ctx, tx, &ty));
  DT_ASSERT_OK(Fetch(ctx, ty, y));
}

void RunBackward(DeviceContext& ctx, DType dt, const std::vector<double>& x, const std::vector<double>& dy,
                 std::vector<double>* dx) {
  const int64_t n = static_cast<int64_t>(x.size());
  Tensor tx, tdy, tdx;
  DT_ASSERT_OK(MakeTensor(ctx, dt, {n}, x, &tx));
  DT_ASSERT_OK(MakeTensor(ctx, dt, {n}, dy, &tdy));
  DT_ASSERT_OK(MakeTensor(ctx, dt, {n}, std::vector<double>(n, NAN), &tdx));
  DT_ASSERT_OK(GeluBackward(ctx, tx, tdy, &tdx));
  DT_ASSERT_OK(Fetch(ctx, tdx, dx));
}

TEST(GeluCpu, ClosedForm) {
  auto cpu = Cpu();
  // 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))), evaluated independently in Python (math.tanh).
  const std::vector<double> x = {0, 1, -1, 2, 10, -10};
  const std::vector<double> want = {0, 0.8411919906082768, -0.15880800939172324, 1.954597694087775, 10.0, -0.0};
  std::vector<double> y, dx;
  ASSERT_NO_FATAL_FAILURE(RunForward(*cpu, DType::kF64, x, &y));
  for (size_t i = 0; i < x.size(); ++i) EXPECT_NEAR(y[i], want[i], 1e-15) << "x=" << x[i];
  ASSERT_NO_FATAL_FAILURE(RunForward(*cpu, DType::kF32, x, &y));
  for (size_t i = 0; i < x.size(); ++i) EXPECT_NEAR(y[i], want[i], 1e-6 * std::max(1.0, std::fabs(want[i])));
  // d gelu / dx: 0.5 at 0; -> 1 for large x, -> 0 for very negative x.
  ASSERT_NO_FATAL_FAILURE(RunBackward(*cpu, DType::kF64, {0, 10, -10}, {2, 1, 1}, &dx));
  EXPECT_DOUBLE_EQ(dx[0], 1.0);
  EXPECT_NEAR(dx[1], 1.0, 1e-12);
  EXPECT_NEAR(dx[2], 0.0, 1e-12);
}

TEST(GeluGrad, FiniteDifferences) {
  auto cpu = Cpu();
  const auto x = RandomVector(40, 1, -4, 4), w = RandomVector(40, 2);
  std::vector<double> dx;
  ASSERT_NO_FATAL_FAILURE(RunBackward(*cpu, DType::kF64, x, w, &dx));
  auto loss = [&](const std::vector<double>& v) {
    std::vector<double> out;
    RunForward(*cpu, DType::kF64, v, &out);
    return testing::Dot(w, out);
  };
  const auto r = testing::CheckGradient(loss, x, dx);
  EXPECT_LT(r.max_rel_error, 1e-6) << r.ToString();
}

TEST(Gelu, RejectsMismatchedShapesNamingThem) {
  auto cpu = Cpu();
  Tensor x, y, dy64;
  DT_ASSERT_OK(MakeTensor(*cpu, DType::kF32, {4, 5}, std::vector<double>(20, 0.0), &x));
  DT_ASSERT_OK(MakeTensor(*cpu, DType::kF32, {20}, std::vector<double>(20, 0.0), &y));
  DT_ASSERT_OK(MakeTensor(*cpu, DType::kF64, {4, 5}, std::vector<double>(20, 0.0), &dy64));
  const Status st = GeluForward(*cpu, x, &y);  // same element count, different shape
  EXPECT_EQ(st.code(), Status::Code::kInvalidArgument);
  EXPECT_NE(st.message().find("f32[4,5]"), std::string::npos) << st.ToString();
  EXPECT_NE(st.message().find("f32[20]"), std::string::npos) << st.ToString();
  Tensor dx = x;
  EXPECT_EQ(GeluBackward(*cpu, x, dy64, &dx).code(), Status::Code::kInvalidArgument);  // dtype mismatch
  EXPECT_EQ(GeluBackward(*cpu, x, x, nullptr).code(), Status::Code::kInvalidArgument);
}

// GPU (tanhf) vs the CPU f64 reference on f32 inputs in [-6, 6]. Tolerance: max abs err <= 1e-5 * scale
// (tanhf is accurate to a few ulp; y and dx are O(|x|)).
TEST(GeluCuda, MatchesCpuReference) {
  DT_SKIP_WITHOUT_CUDA();
  auto cpu = Cpu();
  std::unique_ptr<DeviceContext> gpu;
  DT_ASSERT_OK(DeviceContext::CreateCuda(0, &gpu));
  auto x = RandomVector(100003, 3, -6, 6);
  for (double& v : x) v = static_cast<float>(v);  // the reference sees exactly the GPU's inputs
  const auto dy = RandomVector(x.size(), 4);
  std::vector<double> want, got;
  ASSERT_NO_FATAL_FAILURE(RunForward(*cpu, DType::kF64, x, &want));
  ASSERT_NO_FATAL_FAILURE(RunForward(*gpu, DType::kF32, x, &got));
  EXPECT_LE(testing::MaxAbsDiff(got, want), 1e-5 * testing::Scale(want));
  ASSERT_NO_FATAL_FAILURE(RunBackward(*cpu, DType::kF64, x, dy, &want));
  ASSERT_NO_FATAL_FAILURE(RunBackward(*gpu, DType::kF32, x, dy, &got));
  EXPECT_LE(testing::MaxAbsDiff(got, want), 1e-5 * testing::Scale(want));
}

}  // namespace
}  // namespace dtrain::ops
