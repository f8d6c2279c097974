// Tests of kernels/relu: closed forms, a finite-difference gradient check (f64), shape errors, and
// CPU-vs-CUDA agreement (exact: ReLU does no arithmetic).
#include <gtest/gtest.h>

#include <cmath>
#include <memory>
#include <vector>

#include "core/device_context.h"
#include "kernels/relu.h"
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
  DT_ASSERT_OK(ReluForward(ctx, tx, &ty));
  DT_ASSERT_OK(Fetch(ctx, ty, y));
}

void RunBackward(DeviceContext& ctx, DType dt, const std::vector<double>& y, const std::vector<double>& dy,
                 std::vector<double>* dx) {
  const int64_t n = static_cast<int64_t>(y.size());
  Tensor ty, tdy, tdx;
  DT_ASSERT_OK(MakeTensor(ctx, dt, {n}, y, &ty));
  DT_ASSERT_OK(MakeTensor(ctx, dt, {n}, dy, &tdy));
  DT_ASSERT_OK(MakeTensor(ctx, dt, {n}, std::vector<double>(n, NAN), &tdx));
  DT_ASSERT_OK(ReluBackward(ctx, ty, tdy, &tdx));
  DT_ASSERT_OK(Fetch(ctx, tdx, dx));
}

TEST(ReluCpu, ClosedForm) {
  auto cpu = Cpu();
  for (DType dt : {DType::kF32, DType::kF64}) {
    std::vector<double> y, dx;
    ASSERT_NO_FATAL_FAILURE(RunForward(*cpu, dt, {-2, -0.5, 0, 0.5, 3}, &y));
    EXPECT_EQ(y, (std::vector<double>{0, 0, 0, 0.5, 3}));
    ASSERT_NO_FATAL_FAILURE(RunBackward(*cpu, dt, y, {1, 2, 3, 4, 5}, &dx));
    EXPECT_EQ(dx, (std::vector<double>{0, 0, 0, 4, 5}));  // gradient 0 at the kink x = 0
  }
}

// loss = sum(w .* relu(x)), with every x at least 0.05 from the kink.
TEST(ReluGrad, FiniteDifferences) {
  auto cpu = Cpu();
  auto x = RandomVector(40, 1);
  for (double& v : x) v += v >= 0 ? 0.05 : -0.05;
  const auto w = RandomVector(40, 2);
  std::vector<double> y, dx;
  ASSERT_NO_FATAL_FAILURE(RunForward(*cpu, DType::kF64, x, &y));
  ASSERT_NO_FATAL_FAILURE(RunBackward(*cpu, DType::kF64, y, w, &dx));
  auto loss = [&](const std::vector<double>& v) {
    std::vector<double> out;
    RunForward(*cpu, DType::kF64, v, &out);
    return testing::Dot(w, out);
  };
  const auto r = testing::CheckGradient(loss, x, dx);
  EXPECT_LT(r.max_rel_error, 1e-6) << r.ToString();
}

TEST(Relu, RejectsMismatchedShapesNamingThem) {
  auto cpu = Cpu();
  Tensor x, y, y64, i32;
  DT_ASSERT_OK(MakeTensor(*cpu, DType::kF32, {2, 3}, std::vector<double>(6, 0.0), &x));
  DT_ASSERT_OK(MakeTensor(*cpu, DType::kF32, {3, 2}, std::vector<double>(6, 0.0), &y));
  DT_ASSERT_OK(MakeTensor(*cpu, DType::kF64, {2, 3}, std::vector<double>(6, 0.0), &y64));
  DT_ASSERT_OK(MakeTensor(*cpu, DType::kI32, {2, 3}, std::vector<double>(6, 0.0), &i32));
  const Status st = ReluForward(*cpu, x, &y);
  EXPECT_EQ(st.code(), Status::Code::kInvalidArgument);
  EXPECT_NE(st.message().find("f32[2,3]"), std::string::npos) << st.ToString();
  EXPECT_NE(st.message().find("f32[3,2]"), std::string::npos) << st.ToString();
  EXPECT_EQ(ReluForward(*cpu, x, &y64).code(), Status::Code::kInvalidArgument);
  EXPECT_EQ(ReluBackward(*cpu, x, y, &x).code(), Status::Code::kInvalidArgument);
  Tensor i32_out = i32;
  EXPECT_EQ(ReluForward(*cpu, i32, &i32_out).code(), Status::Code::kInvalidArgument);  // unsupported dtype
  EXPECT_EQ(ReluForward(*cpu, x, nullptr).code(), Status::Code::kInvalidArgument);
}

// ReLU selects or zeroes values, so the GPU must match the CPU exactly (tolerance 0).
TEST(ReluCuda, MatchesCpuExactly) {
  DT_SKIP_WITHOUT_CUDA();
  auto cpu = Cpu();
  std::unique_ptr<DeviceContext> gpu;
  DT_ASSERT_OK(DeviceContext::CreateCuda(0, &gpu));
  auto x = RandomVector(100003, 4, -3, 3);
  x[0] = 0;
  const auto dy = RandomVector(x.size(), 5);
  std::vector<double> y_cpu, y_gpu, dx_cpu, dx_gpu;
  ASSERT_NO_FATAL_FAILURE(RunForward(*cpu, DType::kF32, x, &y_cpu));
  ASSERT_NO_FATAL_FAILURE(RunForward(*gpu, DType::kF32, x, &y_gpu));
  EXPECT_EQ(testing::MaxAbsDiff(y_gpu, y_cpu), 0.0);
  ASSERT_NO_FATAL_FAILURE(RunBackward(*cpu, DType::kF32, y_cpu, dy, &dx_cpu));
  ASSERT_NO_FATAL_FAILURE(RunBackward(*gpu, DType::kF32, y_cpu, dy, &dx_gpu));
  EXPECT_EQ(testing::MaxAbsDiff(dx_gpu, dx_cpu), 0.0);
}

}  // namespace
}  // namespace dtrain::ops
