// Tests of kernels/rope: the table against the exact angles (within HF's fp32 angle error), the forward against the
// direct rotate_half formula on a grouped-query layout (v untouched), the backward as the exact transpose
// (<R x, y> = <x, R^T y>) and inverse of the forward, argument errors, and CUDA f32 / bf16 / f16 against the CPU
// reference (skipped without a GPU).
#include "kernels/rope.h"

#include <gtest/gtest.h>

#include <cmath>
#include <memory>
#include <string>
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

struct Shape {
  int64_t b, t, nh, nkv, hs;
  int64_t row() const { return (nh + 2 * nkv) * hs; }
  int64_t numel() const { return b * t * row(); }
};

// Rotates qkv (dtype dt) on ctx with a table of `rows` positions; returns the result as doubles.
void RunRope(DeviceContext& ctx, DType dt, const Shape& s, int64_t rows, double theta, const std::vector<double>& qkv,
             bool backward, std::vector<double>* out) {
  Tensor cos, sin, t;
  DT_ASSERT_OK(RopeTable(ctx, rows, s.hs, theta, &cos, &sin));
  DT_ASSERT_OK(Make(ctx, dt, {s.b, s.t, s.row()}, qkv, &t));
  if (backward) {
    DT_ASSERT_OK(RopeBackward(ctx, cos, sin, s.nh, s.nkv, &t));
  } else {
    DT_ASSERT_OK(RopeForward(ctx, cos, sin, s.nh, s.nkv, &t));
  }
  DT_ASSERT_OK(Get(ctx, t, out));
}

// The table: cos/sin of t * theta^(-2i/hs) up to the fp32 angle of HF's order (|d angle| <= 3 * 2^-24 * angle: two
// fp32 roundings of the frequency and one of the product; 2i/hs is exact for hs = 64) plus the final f32 rounding.
TEST(RopeCpu, TableMatchesExactAnglesWithinFp32AngleError) {
  auto cpu = Cpu();
  const int64_t rows = 4096, hs = 64;
  for (double theta : {10000.0, 500000.0}) {
    Tensor cos, sin;
    DT_ASSERT_OK(RopeTable(*cpu, rows, hs, theta, &cos, &sin));
    ASSERT_EQ(cos.shape(), (std::vector<int64_t>{rows, hs / 2}));
    ASSERT_EQ(sin.dtype(), DType::kF32);
    for (int64_t t = 0; t < rows; ++t) {
      for (int64_t i = 0; i < hs / 2; ++i) {
        const double inv_freq = std::pow(theta, -2.0 * i / hs), angle = t * inv_freq;
        const double tol = angle * std::ldexp(1.0, -22) + 1.2e-7;
        ASSERT_NEAR(cos.data<float>()[t * hs / 2 + i], std::cos(angle), tol) << t << "," << i << " theta " << theta;
        ASSERT_NEAR(sin.data<float>()[t * hs / 2 + i], std::sin(angle), tol) << t << "," << i << " theta " << theta;
      }
    }
    EXPECT_EQ(cos.data<float>()[0], 1.f);  // t = 0: the identity
    EXPECT_EQ(sin.data<float>()[hs / 2 - 1], 0.f);
    EXPECT_EQ(sin.data<float>()[hs / 2], static_cast<float>(std::sin(1.0)));  // t = 1, i = 0: inv_freq 1
  }
}

// GQA layout (4 q heads, 2 kv heads): q and k heads rotated by the formula at their token's position, v untouched.
TEST(RopeCpu, ForwardMatchesRotateHalfFormulaAndLeavesVAlone) {
  auto cpu = Cpu();
  const Shape s{2, 5, 4, 2, 8};
  const int64_t rows = 7;
  Tensor cos, sin;
  DT_ASSERT_OK(RopeTable(*cpu, rows, s.hs, 10000.0, &cos, &sin));
  const auto x = RandomVector(s.numel(), 1);
  for (DType dt : {DType::kF64, DType::kF32}) {
    std::vector<double> got;
    ASSERT_NO_FATAL_FAILURE(RunRope(*cpu, dt, s, rows, 10000.0, x, false, &got));
    const double tol = dt == DType::kF64 ? 1e-15 : 1e-6;
    const int64_t half = s.hs / 2;
    for (int64_t b = 0; b < s.b; ++b) {
      for (int64_t t = 0; t < s.t; ++t) {
        const int64_t base = (b * s.t + t) * s.row();
        for (int64_t h = 0; h < s.nh + 2 * s.nkv; ++h) {
          for (int64_t i = 0; i < half; ++i) {
            const int64_t p0 = base + h * s.hs + i, p1 = p0 + half;
            if (h >= s.nh + s.nkv) {  // v
              EXPECT_EQ(got[p0], dt == DType::kF64 ? x[p0] : static_cast<float>(x[p0])) << "v moved at " << p0;
              EXPECT_EQ(got[p1], dt == DType::kF64 ? x[p1] : static_cast<float>(x[p1])) << "v moved at " << p1;
              continue;
            }
            const double c = cos.data<float>()[t * half + i], sn = sin.data<float>()[t * half + i];
            EXPECT_NEAR(got[p0], x[p0] * c - x[p1] * sn, tol) << b << "," << t << "," << h << "," << i;
            EXPECT_NEAR(got[p1], x[p1] * c + x[p0] * sn, tol) << b << "," << t << "," << h << "," << i;
          }
        }
      }
    }
  }
}

// The backward is the transpose: <R x, y> = <x, R^T y> (f64, to rounding); and the inverse: R^T R x = x to the
// f32 table's cos^2 + sin^2 = 1 +- 2^-23.
TEST(RopeCpu, BackwardIsTransposeAndInverseOfForward) {
  auto cpu = Cpu();
  const Shape s{3, 6, 6, 2, 16};
  const auto x = RandomVector(s.numel(), 2), y = RandomVector(s.numel(), 3);
  std::vector<double> rx, rty, back;
  ASSERT_NO_FATAL_FAILURE(RunRope(*cpu, DType::kF64, s, 8, 500000.0, x, false, &rx));
  ASSERT_NO_FATAL_FAILURE(RunRope(*cpu, DType::kF64, s, 8, 500000.0, y, true, &rty));
  EXPECT_NEAR(testing::Dot(rx, y), testing::Dot(x, rty), 1e-12 * s.numel());
  ASSERT_NO_FATAL_FAILURE(RunRope(*cpu, DType::kF64, s, 8, 500000.0, rx, true, &back));
  EXPECT_LE(testing::MaxAbsDiff(back, x), 3e-7);
  // And it is not the identity: positions t >= 1 move q and k.
  EXPECT_GT(testing::MaxAbsDiff(rx, x), 0.1);
}

TEST(Rope, RejectsBadArguments) {
  auto cpu = Cpu();
  Tensor cos, sin, qkv, qkv64, long_seq, odd;
  DT_ASSERT_OK(RopeTable(*cpu, 4, 8, 10000.0, &cos, &sin));
  DT_ASSERT_OK(MakeTensor(*cpu, DType::kF32, {2, 4, 6 * 8}, RandomVector(2 * 4 * 48, 1), &qkv));  // nh 4, nkv 1
  DT_ASSERT_OK(MakeTensor(*cpu, DType::kF32, {1, 5, 48}, RandomVector(5 * 48, 1), &long_seq));
  DT_ASSERT_OK(RopeForward(*cpu, cos, sin, 4, 1, &qkv));
  DT_ASSERT_OK(RopeForward(*cpu, cos, sin, 2, 2, &qkv));  // 2 + 2 * 2 heads of 8 fit as well
  EXPECT_EQ(RopeForward(*cpu, cos, sin, 3, 1, &qkv).code(), Status::Code::kInvalidArgument);  // 5 heads != 48 / 8
  EXPECT_EQ(RopeForward(*cpu, cos, sin, 1, 2, &qkv).code(), Status::Code::kInvalidArgument);  // nkv > nh
  const Status st = RopeForward(*cpu, cos, sin, 4, 1, &long_seq);                             // T 5 > 4 rows
  EXPECT_EQ(st.code(), Status::Code::kInvalidArgument);
  EXPECT_NE(st.message().find("f32[1,5,48]"), std::string::npos) << st.ToString();
  EXPECT_EQ(RopeBackward(*cpu, cos, qkv, 4, 1, &qkv).code(), Status::Code::kInvalidArgument);    // sin not a table
  EXPECT_EQ(RopeTable(*cpu, 4, 7, 10000.0, &cos, &sin).code(), Status::Code::kInvalidArgument);  // odd head size
  EXPECT_EQ(RopeTable(*cpu, 0, 8, 10000.0, &cos, &sin).code(), Status::Code::kInvalidArgument);
}

// GPU vs the CPU f64 rotation of the same (rounded) inputs with the same f32 table; 16-bit: one final rounding
// (bf16 2^-9, fp16 2^-11 relative). Shapes: SmolLM2's (15 q, 5 kv heads of 64: 128-bit path), Llama-3.2-1B's head
// of 64 with 32 q / 8 kv heads, and hs = 6 (hs/2 = 3: the scalar path).
TEST(RopeCuda, MatchesCpuReference) {
  DT_SKIP_WITHOUT_CUDA();
  auto cpu = Cpu();
  std::unique_ptr<DeviceContext> gpu;
  DT_ASSERT_OK(DeviceContext::CreateCuda(0, &gpu));
  struct Case {
    DType dt;
    double tol;
    double (*round)(double);
  };
  const Case cases[] = {{DType::kF32, 1e-6, [](double v) { return static_cast<double>(static_cast<float>(v)); }},
                        {DType::kBF16, 8e-3, testing::RoundToBf16},
                        {DType::kF16, 2e-3, testing::RoundToF16}};
  for (const Case& k : cases) {
    for (const Shape& s : {Shape{2, 33, 15, 5, 64}, Shape{1, 130, 32, 8, 64}, Shape{3, 7, 2, 1, 6}}) {
      auto x = RandomVector(s.numel(), s.t + s.hs, -2, 2);
      for (double& e : x) e = k.round(e);
      for (bool backward : {false, true}) {
        std::vector<double> want, got;
        ASSERT_NO_FATAL_FAILURE(RunRope(*cpu, DType::kF64, s, 256, 500000.0, x, backward, &want));
        ASSERT_NO_FATAL_FAILURE(RunRope(*gpu, k.dt, s, 256, 500000.0, x, backward, &got));
        EXPECT_LE(testing::MaxAbsDiff(got, want), k.tol * testing::Scale(want))
            << DTypeName(k.dt) << " " << s.b << "x" << s.t << " heads " << s.nh << "/" << s.nkv << " hs " << s.hs
            << (backward ? " backward" : " forward");
      }
    }
  }
}

}  // namespace
}  // namespace dtrain::ops
