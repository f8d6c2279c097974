// Tests of models/ops/pool (global average pooling): closed form, f64 gradient check, shape errors, and
// CPU-vs-CUDA agreement with a documented tolerance.
#include <gtest/gtest.h>

#include <cmath>
#include <memory>
#include <vector>

#include "core/device_context.h"
#include "models/ops/pool.h"
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

void Forward(DeviceContext& ctx, DType dt, const std::vector<int64_t>& shape, const std::vector<double>& x,
             std::vector<double>* y) {
  Tensor tx, ty;
  DT_ASSERT_OK(MakeTensor(ctx, dt, shape, x, &tx));
  DT_ASSERT_OK(MakeTensor(ctx, dt, {shape[0], shape[1]}, std::vector<double>(shape[0] * shape[1], NAN), &ty));
  DT_ASSERT_OK(GlobalAvgPoolForward(ctx, tx, &ty));
  DT_ASSERT_OK(Fetch(ctx, ty, y));
}

void Backward(DeviceContext& ctx, DType dt, const std::vector<int64_t>& shape, const std::vector<double>& dy,
              std::vector<double>* dx) {
  Tensor tdy, tdx;
  DT_ASSERT_OK(MakeTensor(ctx, dt, {shape[0], shape[1]}, dy, &tdy));
  DT_ASSERT_OK(MakeTensor(ctx, dt, shape, std::vector<double>(Tensor::NumelOf(shape), NAN), &tdx));
  DT_ASSERT_OK(GlobalAvgPoolBackward(ctx, tdy, &tdx));
  DT_ASSERT_OK(Fetch(ctx, tdx, dx));
}

TEST(GlobalAvgPoolCpu, ClosedForm) {
  auto cpu = Cpu();
  for (DType dt : {DType::kF32, DType::kF64}) {
    // [1, 2, 2, 2]: channel 0 = {1, 2, 3, 4}, channel 1 = {-4, 0, 0, 8}.
    std::vector<double> y, dx;
    ASSERT_NO_FATAL_FAILURE(Forward(*cpu, dt, {1, 2, 2, 2}, {1, 2, 3, 4, -4, 0, 0, 8}, &y));
    EXPECT_EQ(y, (std::vector<double>{2.5, 1.0}));
    ASSERT_NO_FATAL_FAILURE(Backward(*cpu, dt, {1, 2, 2, 2}, {4, -8}, &dx));
    EXPECT_EQ(dx, (std::vector<double>{1, 1, 1, 1, -2, -2, -2, -2}));
  }
}

TEST(GlobalAvgPoolGrad, FiniteDifferences) {
  auto cpu = Cpu();
  const std::vector<int64_t> shape = {3, 4, 3, 5};
  const auto x = RandomVector(180, 1), v = RandomVector(12, 2);
  std::vector<double> dx;
  ASSERT_NO_FATAL_FAILURE(Backward(*cpu, DType::kF64, shape, v, &dx));
  auto loss = [&](const std::vector<double>& xv) {
    std::vector<double> y;
    Forward(*cpu, DType::kF64, shape, xv, &y);
    return testing::Dot(v, y);
  };
  const auto r = testing::CheckGradient(loss, x, dx);
  EXPECT_LT(r.max_rel_error, 1e-8) << r.ToString();
}

TEST(GlobalAvgPool, RejectsBadShapesNamingThem) {
  auto cpu = Cpu();
  Tensor x, y_bad, y64, x3d;
  DT_ASSERT_OK(MakeTensor(*cpu, DType::kF32, {2, 3, 2, 2}, std::vector<double>(24, 0.0), &x));
  DT_ASSERT_OK(MakeTensor(*cpu, DType::kF32, {2, 4}, std::vector<double>(8, 0.0), &y_bad));
  DT_ASSERT_OK(MakeTensor(*cpu, DType::kF64, {2, 3}, std::vector<double>(6, 0.0), &y64));
  DT_ASSERT_OK(MakeTensor(*cpu, DType::kF32, {2, 3, 4}, std::vector<double>(24, 0.0), &x3d));
  Status st = GlobalAvgPoolForward(*cpu, x, &y_bad);
  EXPECT_EQ(st.code(), Status::Code::kInvalidArgument);
  EXPECT_NE(st.message().find("f32[2,3,2,2]"), std::string::npos) << st.ToString();
  EXPECT_NE(st.message().find("f32[2,4]"), std::string::npos) << st.ToString();
  EXPECT_EQ(GlobalAvgPoolForward(*cpu, x, &y64).code(), Status::Code::kInvalidArgument);
  EXPECT_EQ(GlobalAvgPoolBackward(*cpu, y_bad, &x3d).code(), Status::Code::kInvalidArgument);
  EXPECT_EQ(GlobalAvgPoolForward(*cpu, x, nullptr).code(), Status::Code::kInvalidArgument);
}

// The GPU sums a row in fp32 (32 lanes, then a shuffle tree), the CPU in double: for rows of 49..784 values in
// [-1, 1] the fp32 sum is off by at most ~len * 2^-24 relative to the row's magnitude, so we allow
// max |gpu - cpu| <= 1e-6 * max(1, max |cpu|) (means are O(0.1)). Backward is one division: exact.
TEST(GlobalAvgPoolCuda, MatchesCpu) {
  DT_SKIP_WITHOUT_CUDA();
  auto cpu = Cpu();
  std::unique_ptr<DeviceContext> gpu;
  DT_ASSERT_OK(DeviceContext::CreateCuda(0, &gpu));
  for (const std::vector<int64_t>& shape :
       {std::vector<int64_t>{128, 128, 7, 7}, std::vector<int64_t>{5, 33, 28, 28}, std::vector<int64_t>{2, 3, 1, 1}}) {
    const int64_t rows = shape[0] * shape[1];
    const auto x = RandomVector(Tensor::NumelOf(shape), 3), dy = RandomVector(rows, 4);
    std::vector<double> yc, yg, dxc, dxg;
    ASSERT_NO_FATAL_FAILURE(Forward(*cpu, DType::kF32, shape, x, &yc));
    ASSERT_NO_FATAL_FAILURE(Forward(*gpu, DType::kF32, shape, x, &yg));
    EXPECT_LE(testing::MaxAbsDiff(yg, yc), 1e-6 * testing::Scale(yc));
    ASSERT_NO_FATAL_FAILURE(Backward(*cpu, DType::kF32, shape, dy, &dxc));
    ASSERT_NO_FATAL_FAILURE(Backward(*gpu, DType::kF32, shape, dy, &dxg));
    EXPECT_EQ(testing::MaxAbsDiff(dxg, dxc), 0.0);
  }
}

}  // namespace
}  // namespace dtrain::ops
