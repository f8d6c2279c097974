// Tests of kernels/rope: the table against the exact angles (within HF's fp32 angle error), the default table bit for
// bit as before frequency scaling, Llama 3's scaling against its formula in each band, the forward against the
// direct rotate_half formula on a grouped-query layout (v untouched), the backward as the exact transpose
// (<R x, y> = <x, R^T y>) and inverse of the forward, argument errors, and CUDA f32 / bf16 / f16 against the CPU
// reference (skipped without a GPU).
#include "kernels/rope.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
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

// The table before frequency scaling existed, verbatim: the default (RopeScaling kNone) must stay this bit for bit.
void OldRopeTable(float* cos, float* sin, int64_t max_seq_len, int64_t head_size, double theta) {
  const int64_t half = head_size / 2;
  const float base = static_cast<float>(theta);
  for (int64_t i = 0; i < half; ++i) {
    const float expo = static_cast<float>(2 * i) / static_cast<float>(head_size);
    const float inv_freq = 1.0f / static_cast<float>(std::pow(static_cast<double>(base), static_cast<double>(expo)));
    for (int64_t t = 0; t < max_seq_len; ++t) {
      const float angle = static_cast<float>(t) * inv_freq;
      cos[t * half + i] = static_cast<float>(std::cos(static_cast<double>(angle)));
      sin[t * half + i] = static_cast<float>(std::sin(static_cast<double>(angle)));
    }
  }
}

TEST(RopeCpu, DefaultTableIsUnchangedBitForBit) {
  auto cpu = Cpu();
  RopeScaling ignored;  // kNone: the numbers are not read
  ignored.factor = 32;
  for (double theta : {10000.0, 500000.0}) {
    for (int64_t hs : {64, 128, 6}) {
      const int64_t rows = 300, n = rows * hs / 2;
      std::vector<float> want_cos(n), want_sin(n), cos(n), sin(n);
      OldRopeTable(want_cos.data(), want_sin.data(), rows, hs, theta);
      RopeTableCpu(cos.data(), sin.data(), rows, hs, theta);
      EXPECT_EQ(std::memcmp(cos.data(), want_cos.data(), n * sizeof(float)), 0) << theta << " " << hs;
      EXPECT_EQ(std::memcmp(sin.data(), want_sin.data(), n * sizeof(float)), 0) << theta << " " << hs;
      Tensor tc, ts;
      DT_ASSERT_OK(RopeTable(*cpu, rows, hs, theta, &tc, &ts, ignored));
      EXPECT_EQ(std::memcmp(tc.data<float>(), want_cos.data(), n * sizeof(float)), 0) << theta << " " << hs;
      EXPECT_EQ(std::memcmp(ts.data<float>(), want_sin.data(), n * sizeof(float)), 0) << theta << " " << hs;
    }
  }
}

// Llama 3's scaling (Llama-3.2-1B: theta 500000, hs 64, factor 32, low 1, high 4, original 8192) against the formula
// evaluated in double from the exact frequencies theta^(-2i/hs). Bands: wavelen 2 pi theta^(2i/64) < 2048 for i <= 14
// (kept: bit for bit the unscaled f32 frequency), > 8192 for i >= 18 (divided by 32: exact in f32, so bit for bit
// unscaled / 32), between for i = 15..17 (interpolated). Tolerance: the unscaled f32 frequency is within 2^-23
// (relative) of the exact one; in the medium band L / wavelen in [1, 4] carries a few ulp (< 2^-20 absolute), so s =
// (L / wavelen - 1) / 3 is within 2^-21, and (1 - s) f / 32 + s f within 2^-21 f plus a few ulp: 2^-19 f bounds it.
// The table's angles t * inv_freq then carry t times that, plus the product's and cos/sin's roundings.
TEST(RopeCpu, Llama3ScalingMatchesTheFormulaInEachBand) {
  auto cpu = Cpu();
  const int64_t hs = 64, half = hs / 2, rows = 2048;
  const double theta = 500000.0, pi = 3.14159265358979323846;
  RopeScaling llama3;
  llama3.kind = RopeScaling::Kind::kLlama3;
  llama3.factor = 32;
  llama3.low_freq_factor = 1;
  llama3.high_freq_factor = 4;
  llama3.original_max_position_embeddings = 8192;
  std::vector<float> plain(half), scaled(half);
  RopeInvFreqCpu(plain.data(), hs, theta);
  RopeInvFreqCpu(scaled.data(), hs, theta, llama3);
  std::vector<double> want(half);
  int high = 0, medium = 0, low = 0;
  for (int64_t i = 0; i < half; ++i) {
    const double f = std::pow(theta, -2.0 * i / hs), wavelen = 2 * pi / f;
    if (wavelen < 8192.0 / 4) {
      want[i] = f;
      ++high;
      EXPECT_EQ(scaled[i], plain[i]) << "high-frequency band, i " << i;
    } else if (wavelen > 8192.0 / 1) {
      want[i] = f / 32;
      ++low;
      EXPECT_EQ(scaled[i], plain[i] / 32) << "low-frequency band, i " << i;
    } else {
      const double s = (8192.0 / wavelen - 1) / (4 - 1);
      want[i] = (1 - s) * f / 32 + s * f;
      ++medium;
      EXPECT_GT(scaled[i], plain[i] / 32) << "medium band, i " << i;
      EXPECT_LT(scaled[i], plain[i]) << "medium band, i " << i;
    }
    EXPECT_NEAR(scaled[i], want[i], std::ldexp(f, -19)) << i;
  }
  EXPECT_EQ(high, 15);
  EXPECT_EQ(medium, 3);
  EXPECT_EQ(low, 14);

  Tensor cos, sin;
  DT_ASSERT_OK(RopeTable(*cpu, rows, hs, theta, &cos, &sin, llama3));
  for (int64_t t = 0; t < rows; ++t) {
    for (int64_t i = 0; i < half; ++i) {
      const double angle = t * want[i], tol = t * std::ldexp(std::pow(theta, -2.0 * i / hs), -19) + 2.4e-7;
      ASSERT_NEAR(cos.data<float>()[t * half + i], std::cos(angle), tol) << t << "," << i;
      ASSERT_NEAR(sin.data<float>()[t * half + i], std::sin(angle), tol) << t << "," << i;
    }
  }
  // Row t is cos/sin of fl(t * inv_freq) for the scaled frequencies, exactly as for the plain ones.
  for (int64_t t : {1, 777, 2047}) {
    for (int64_t i = 0; i < half; ++i) {
      const float angle = static_cast<float>(t) * scaled[i];
      EXPECT_EQ(cos.data<float>()[t * half + i], static_cast<float>(std::cos(static_cast<double>(angle))));
      EXPECT_EQ(sin.data<float>()[t * half + i], static_cast<float>(std::sin(static_cast<double>(angle))));
    }
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
  RopeScaling llama3;
  llama3.kind = RopeScaling::Kind::kLlama3;
  DT_ASSERT_OK(RopeTable(*cpu, 4, 8, 10000.0, &cos, &sin, llama3));
  llama3.high_freq_factor = llama3.low_freq_factor;  // the medium band's division by high - low
  const Status flat = RopeTable(*cpu, 4, 8, 10000.0, &cos, &sin, llama3);
  EXPECT_EQ(flat.code(), Status::Code::kInvalidArgument);
  EXPECT_NE(flat.message().find("high_freq_factor 1"), std::string::npos) << flat.ToString();
  llama3.high_freq_factor = 4;
  llama3.factor = 0.5;
  EXPECT_EQ(RopeTable(*cpu, 4, 8, 10000.0, &cos, &sin, llama3).code(), Status::Code::kInvalidArgument);
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
