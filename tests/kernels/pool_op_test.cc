// Tests of kernels/pool (global average pooling), NCHW f32 and channels-last (NHWC, bf16 on CUDA): closed
// forms, f64 gradient checks, agreement of the NHWC reference with the NCHW one, shape and dtype errors, and
// CPU-vs-CUDA agreement with documented tolerances (NHWC: odd channel counts, misaligned pointers, reproducibility).
#include <gtest/gtest.h>

#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "core/check.h"
#include "core/device_context.h"
#include "kernels/pool.h"
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

// ---- channels-last ----------------------------------------------------------------------------------------------

using Shape = std::vector<int64_t>;
using Vec = std::vector<double>;

// A tensor of `dt` on ctx holding v (bf16: rounded to nearest even). `misalign`: the tensor starts one element into
// its allocation (not 16-byte aligned: the CUDA scalar path).
Status MakeAny(DeviceContext& ctx, DType dt, const Shape& shape, const Vec& v, Tensor* out, bool misalign = false) {
  return misalign ? testing::MakeTensorAt(ctx, dt, shape, v, 1, out) : MakeTensor(ctx, dt, shape, v, out);
}

// x [N,H,W,C] of `map_dt` -> y [N,C] of `vec_dt`.
void ForwardNhwc(DeviceContext& ctx, DType map_dt, DType vec_dt, const Shape& shape, const Vec& x, Vec* y,
                 bool misalign = false) {
  Tensor tx, ty;
  DT_ASSERT_OK(MakeAny(ctx, map_dt, shape, x, &tx, misalign));
  DT_ASSERT_OK(MakeAny(ctx, vec_dt, {shape[0], shape[3]}, Vec(shape[0] * shape[3], NAN), &ty));
  DT_ASSERT_OK(GlobalAvgPoolNhwcForward(ctx, tx, &ty));
  DT_ASSERT_OK(Fetch(ctx, ty, y));
}

void BackwardNhwc(DeviceContext& ctx, DType map_dt, DType vec_dt, const Shape& shape, const Vec& dy, Vec* dx,
                  bool misalign = false) {
  Tensor tdy, tdx;
  DT_ASSERT_OK(MakeAny(ctx, vec_dt, {shape[0], shape[3]}, dy, &tdy));
  DT_ASSERT_OK(MakeAny(ctx, map_dt, shape, Vec(Tensor::NumelOf(shape), NAN), &tdx, misalign));
  DT_ASSERT_OK(GlobalAvgPoolNhwcBackward(ctx, tdy, &tdx));
  DT_ASSERT_OK(Fetch(ctx, tdx, dx));
}

TEST(GlobalAvgPoolNhwcCpu, ClosedForm) {
  auto cpu = Cpu();
  for (DType dt : {DType::kF32, DType::kF64}) {
    // [1, 2, 2, 2] channels-last: channel 0 = {1, 2, 3, 4}, channel 1 = {-4, 0, 0, 8}.
    Vec y, dx;
    ASSERT_NO_FATAL_FAILURE(ForwardNhwc(*cpu, dt, dt, {1, 2, 2, 2}, {1, -4, 2, 0, 3, 0, 4, 8}, &y));
    EXPECT_EQ(y, (Vec{2.5, 1.0}));
    ASSERT_NO_FATAL_FAILURE(BackwardNhwc(*cpu, dt, dt, {1, 2, 2, 2}, {4, -8}, &dx));
    EXPECT_EQ(dx, (Vec{1, -2, 1, -2, 1, -2, 1, -2}));
  }
}

// The NHWC reference is the NCHW one on the transposed map (same summation order: exactly).
TEST(GlobalAvgPoolNhwcCpu, MatchesNchw) {
  auto cpu = Cpu();
  const int64_t n = 3, h = 4, w = 5, c = 6, hw = h * w;
  const auto x = RandomVector(n * hw * c, 5), dy = RandomVector(n * c, 6);
  Vec x_nchw(x.size());
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t p = 0; p < hw; ++p) {
      for (int64_t ch = 0; ch < c; ++ch) x_nchw[(i * c + ch) * hw + p] = x[(i * hw + p) * c + ch];
    }
  }
  Vec y, y_ref, dx, dx_ref;
  ASSERT_NO_FATAL_FAILURE(ForwardNhwc(*cpu, DType::kF64, DType::kF64, {n, h, w, c}, x, &y));
  ASSERT_NO_FATAL_FAILURE(Forward(*cpu, DType::kF64, {n, c, h, w}, x_nchw, &y_ref));
  EXPECT_EQ(y, y_ref);
  ASSERT_NO_FATAL_FAILURE(BackwardNhwc(*cpu, DType::kF64, DType::kF64, {n, h, w, c}, dy, &dx));
  ASSERT_NO_FATAL_FAILURE(Backward(*cpu, DType::kF64, {n, c, h, w}, dy, &dx_ref));
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t p = 0; p < hw; ++p) {
      for (int64_t ch = 0; ch < c; ++ch) EXPECT_EQ(dx[(i * hw + p) * c + ch], dx_ref[(i * c + ch) * hw + p]);
    }
  }
}

TEST(GlobalAvgPoolNhwcGrad, FiniteDifferences) {
  auto cpu = Cpu();
  const Shape shape = {3, 3, 5, 4};
  const auto x = RandomVector(180, 1), v = RandomVector(12, 2);
  Vec dx;
  ASSERT_NO_FATAL_FAILURE(BackwardNhwc(*cpu, DType::kF64, DType::kF64, shape, v, &dx));
  auto loss = [&](const Vec& xv) {
    Vec y;
    ForwardNhwc(*cpu, DType::kF64, DType::kF64, shape, xv, &y);
    return testing::Dot(v, y);
  };
  const auto r = testing::CheckGradient(loss, x, dx);
  EXPECT_LT(r.max_rel_error, 1e-8) << r.ToString();
}

TEST(GlobalAvgPoolNhwc, RejectsBadShapesNamingThem) {
  auto cpu = Cpu();
  Tensor x, y_bad, y64, x3d, y;
  DT_ASSERT_OK(MakeTensor(*cpu, DType::kF32, {2, 2, 2, 3}, Vec(24, 0.0), &x));
  DT_ASSERT_OK(MakeTensor(*cpu, DType::kF32, {2, 2}, Vec(4, 0.0), &y_bad));  // [N, H]: the NCHW reading
  DT_ASSERT_OK(MakeTensor(*cpu, DType::kF64, {2, 3}, Vec(6, 0.0), &y64));
  DT_ASSERT_OK(MakeTensor(*cpu, DType::kF32, {2, 3, 4}, Vec(24, 0.0), &x3d));
  DT_ASSERT_OK(MakeTensor(*cpu, DType::kF32, {2, 3}, Vec(6, 0.0), &y));
  Status st = GlobalAvgPoolNhwcForward(*cpu, x, &y_bad);
  EXPECT_EQ(st.code(), Status::Code::kInvalidArgument);
  EXPECT_NE(st.message().find("f32[2,2,2,3]"), std::string::npos) << st.ToString();
  EXPECT_NE(st.message().find("f32[2,2]"), std::string::npos) << st.ToString();
  EXPECT_EQ(GlobalAvgPoolNhwcForward(*cpu, x, &y64).code(), Status::Code::kInvalidArgument);
  EXPECT_EQ(GlobalAvgPoolNhwcBackward(*cpu, y, &x3d).code(), Status::Code::kInvalidArgument);
  EXPECT_EQ(GlobalAvgPoolNhwcForward(*cpu, x, nullptr).code(), Status::Code::kInvalidArgument);
  DT_ASSERT_OK(GlobalAvgPoolNhwcForward(*cpu, x, &y));
}

// bf16 maps against the f64 reference on the same bf16 values. Forward: the GPU sums in double too (exact for
// these sums of bf16 values) and rounds the mean to f32 once, so max |gpu - ref| <= 1e-6 * max(1, max |ref|)
// (f32 rounding is 6e-8 relative). Backward: the f32 quotient dy / (H*W) rounded once to bf16, exactly as the host
// computes it. Shapes: the CNN's last map at batch 128 and 1000, a 28x28 map, odd channel counts (one channel a
// thread), more than 2048 channels (two column slabs), 1x1 maps.
TEST(GlobalAvgPoolNhwcCuda, MatchesCpu) {
  DT_SKIP_WITHOUT_CUDA();
  auto cpu = Cpu();
  std::unique_ptr<DeviceContext> gpu;
  DT_ASSERT_OK(DeviceContext::CreateCuda(0, &gpu));
  for (const Shape& shape : {Shape{128, 7, 7, 128}, Shape{1000, 7, 7, 128}, Shape{5, 28, 28, 32}, Shape{3, 4, 5, 20},
                             Shape{2, 1, 1, 3}, Shape{2, 3, 3, 2056}, Shape{3, 2, 2, 300}, Shape{4, 1, 1, 8}}) {
    for (const bool misalign : {false, true}) {
      SCOPED_TRACE(::testing::PrintToString(shape) + (misalign ? " misaligned" : ""));
      const int64_t n = shape[0], hw = shape[1] * shape[2], c = shape[3];
      Vec x = RandomVector(Tensor::NumelOf(shape), 3), dy = RandomVector(n * c, 4);
      for (double& v : x) v = testing::RoundToBf16(v);
      for (double& v : dy) v = static_cast<float>(v);
      Vec yc, yg, dxg;
      ASSERT_NO_FATAL_FAILURE(ForwardNhwc(*cpu, DType::kF64, DType::kF64, shape, x, &yc));
      ASSERT_NO_FATAL_FAILURE(ForwardNhwc(*gpu, DType::kBF16, DType::kF32, shape, x, &yg, misalign));
      EXPECT_LE(testing::MaxAbsDiff(yg, yc), 1e-6 * testing::Scale(yc));
      ASSERT_NO_FATAL_FAILURE(BackwardNhwc(*gpu, DType::kBF16, DType::kF32, shape, dy, &dxg, misalign));
      ASSERT_EQ(dxg.size(), static_cast<size_t>(n * hw * c));
      int64_t bad = 0;
      for (int64_t k = 0; k < n * hw * c; ++k) {
        const int64_t i = k / (hw * c), ch = k % c;
        const double want =
            testing::RoundToBf16(static_cast<float>(dy[i * c + ch]) / static_cast<float>(hw));  // f32 quotient
        if (dxg[k] != want && ++bad <= 5) ADD_FAILURE() << "dx[" << k << "] = " << dxg[k] << ", want " << want;
      }
      EXPECT_EQ(bad, 0);
    }
  }
}

// Fixed-order sums: two runs give the same bits.
TEST(GlobalAvgPoolNhwcCuda, BitwiseReproducible) {
  DT_SKIP_WITHOUT_CUDA();
  std::unique_ptr<DeviceContext> gpu;
  DT_ASSERT_OK(DeviceContext::CreateCuda(0, &gpu));
  for (const Shape& shape : {Shape{128, 7, 7, 128}, Shape{6, 9, 9, 20}}) {
    const auto x = RandomVector(Tensor::NumelOf(shape), 7, -5, 5);
    Vec y0, y1;
    ASSERT_NO_FATAL_FAILURE(ForwardNhwc(*gpu, DType::kBF16, DType::kF32, shape, x, &y0));
    ASSERT_NO_FATAL_FAILURE(ForwardNhwc(*gpu, DType::kBF16, DType::kF32, shape, x, &y1));
    EXPECT_EQ(y0, y1);
  }
}

TEST(GlobalAvgPoolNhwcCuda, RejectsBadDtypes) {
  DT_SKIP_WITHOUT_CUDA();
  std::unique_ptr<DeviceContext> gpu;
  DT_ASSERT_OK(DeviceContext::CreateCuda(0, &gpu));
  Tensor x16, x32, y32, y16;
  DT_ASSERT_OK(MakeAny(*gpu, DType::kBF16, {2, 2, 2, 8}, Vec(64, 0.0), &x16));
  DT_ASSERT_OK(MakeAny(*gpu, DType::kF32, {2, 2, 2, 8}, Vec(64, 0.0), &x32));
  DT_ASSERT_OK(MakeAny(*gpu, DType::kF32, {2, 8}, Vec(16, 0.0), &y32));
  DT_ASSERT_OK(MakeAny(*gpu, DType::kBF16, {2, 8}, Vec(16, 0.0), &y16));
  Status st = GlobalAvgPoolNhwcForward(*gpu, x32, &y32);  // CUDA maps are bf16
  EXPECT_EQ(st.code(), Status::Code::kInvalidArgument);
  EXPECT_NE(st.message().find("f32[2,2,2,8]"), std::string::npos) << st.ToString();
  EXPECT_EQ(GlobalAvgPoolNhwcForward(*gpu, x16, &y16).code(), Status::Code::kInvalidArgument);  // y is f32
  EXPECT_EQ(GlobalAvgPoolNhwcBackward(*gpu, y16, &x16).code(), Status::Code::kInvalidArgument);
  DT_ASSERT_OK(GlobalAvgPoolNhwcForward(*gpu, x16, &y32));
  DT_ASSERT_OK(GlobalAvgPoolNhwcBackward(*gpu, y32, &x16));
}

}  // namespace
}  // namespace dtrain::ops
