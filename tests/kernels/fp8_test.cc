// Tests of kernels/fp8: the CPU conversions (every code round-trips, ties to even, saturation, subnormals, NaN),
// cuda_fp8.h's own host conversion against them (CUDA builds), the power-of-two scale from amax, and on a GPU the
// amax, scale and cast kernels bit for bit against the CPU references (skipped without a GPU).
#include "kernels/fp8.h"

#include <gtest/gtest.h>

#include <cfloat>
#include <cmath>
#include <cstring>
#include <memory>
#include <random>
#include <vector>

#include "core/bf16.h"
#include "core/check.h"
#include "core/device_context.h"
#include "tests/testing/grad_check.h"

#if DT_HAVE_CUDA
#include <cuda_fp8.h>
#endif

namespace dtrain::ops {
namespace {

constexpr Fp8Format kE4M3 = Fp8Format::kE4M3;
constexpr Fp8Format kE5M2 = Fp8Format::kE5M2;

uint32_t Bits(float x) {
  uint32_t u;
  std::memcpy(&u, &x, sizeof(u));
  return u;
}
float FromBits(uint32_t u) {
  float x;
  std::memcpy(&x, &u, sizeof(x));
  return x;
}

// ---- conversions ----------------------------------------------------------------------------------------------------

// Every code decodes and encodes back to itself, except the NaNs (2 in e4m3, 6 in e5m2) and e5m2's infinities,
// which saturate to +-max under SATFINITE.
TEST(Fp8Cpu, EveryCodeRoundTrips) {
  for (Fp8Format f : {kE4M3, kE5M2}) {
    int nans = 0;
    for (int code = 0; code < 256; ++code) {
      const auto b = static_cast<uint8_t>(code);
      const float v = Fp8ToFloat(b, f);
      if (std::isnan(v)) {
        ++nans;
        EXPECT_EQ(FloatToFp8(v, f), 0x7F) << Fp8FormatName(f) << " NaN code " << code;
        continue;
      }
      if (std::isinf(v)) {
        EXPECT_EQ(f, kE5M2) << "e4m3 has no infinities: code " << code;
        EXPECT_EQ(FloatToFp8(v, f), (code & 0x80) | 0x7B) << "inf saturates to max, code " << code;
        continue;
      }
      EXPECT_EQ(FloatToFp8(v, f), b) << Fp8FormatName(f) << " code " << code << " = " << v;
    }
    EXPECT_EQ(nans, f == kE4M3 ? 2 : 6) << Fp8FormatName(f);
  }
}

TEST(Fp8Cpu, DecodesKnownCodes) {
  EXPECT_EQ(Fp8ToFloat(0x38, kE4M3), 1.f);
  EXPECT_EQ(Fp8ToFloat(0x7E, kE4M3), 448.f);
  EXPECT_EQ(Fp8ToFloat(0xFE, kE4M3), -448.f);
  EXPECT_EQ(Fp8ToFloat(0x08, kE4M3), std::ldexp(1.f, -6));      // smallest normal
  EXPECT_EQ(Fp8ToFloat(0x07, kE4M3), 7 * std::ldexp(1.f, -9));  // largest subnormal
  EXPECT_EQ(Fp8ToFloat(0x01, kE4M3), std::ldexp(1.f, -9));      // smallest subnormal
  EXPECT_EQ(Fp8ToFloat(0x78, kE4M3), 256.f);                    // exponent field 15 is finite in E4M3FN
  EXPECT_TRUE(std::isnan(Fp8ToFloat(0x7F, kE4M3)));
  EXPECT_TRUE(std::isnan(Fp8ToFloat(0xFF, kE4M3)));
  EXPECT_EQ(Fp8ToFloat(0x3C, kE5M2), 1.f);
  EXPECT_EQ(Fp8ToFloat(0x7B, kE5M2), 57344.f);
  EXPECT_EQ(Fp8ToFloat(0x04, kE5M2), std::ldexp(1.f, -14));
  EXPECT_EQ(Fp8ToFloat(0x01, kE5M2), std::ldexp(1.f, -16));
  EXPECT_EQ(Fp8ToFloat(0x7C, kE5M2), INFINITY);
  EXPECT_EQ(Fp8ToFloat(0xFC, kE5M2), -INFINITY);
  EXPECT_TRUE(std::isnan(Fp8ToFloat(0x7D, kE5M2)));
  EXPECT_EQ(Fp8ToFloat(0x80, kE4M3), 0.f);
  EXPECT_TRUE(std::signbit(Fp8ToFloat(0x80, kE4M3)));
}

// Exact midpoints go to the even code; a hair above goes up.
TEST(Fp8Cpu, RoundsTiesToEven) {
  // e4m3 in [1, 2): quantum 1/8. 1.0625 lies between 1 (even) and 1.125; 1.1875 between 1.125 and 1.25 (even).
  EXPECT_EQ(FloatToFp8(1.0625f, kE4M3), 0x38);
  EXPECT_EQ(FloatToFp8(std::nextafter(1.0625f, 2.f), kE4M3), 0x39);
  EXPECT_EQ(FloatToFp8(std::nextafter(1.0625f, 0.f), kE4M3), 0x38);
  EXPECT_EQ(FloatToFp8(1.1875f, kE4M3), 0x3A);
  EXPECT_EQ(FloatToFp8(-1.1875f, kE4M3), 0xBA);
  // e5m2 in [1, 2): quantum 1/4.
  EXPECT_EQ(FloatToFp8(1.125f, kE5M2), 0x3C);
  EXPECT_EQ(FloatToFp8(1.375f, kE5M2), 0x3E);
  EXPECT_EQ(FloatToFp8(std::nextafter(1.125f, 2.f), kE5M2), 0x3D);
  // A carry into the next binade: 1.9375 (between 1.875 and 2, odd code 0x3F) rounds to 2.
  EXPECT_EQ(FloatToFp8(1.9375f, kE4M3), 0x40);
}

TEST(Fp8Cpu, Subnormals) {
  const float q4 = std::ldexp(1.f, -9), q5 = std::ldexp(1.f, -16);  // the subnormal quanta
  EXPECT_EQ(FloatToFp8(q4, kE4M3), 0x01);
  EXPECT_EQ(FloatToFp8(3 * q4, kE4M3), 0x03);
  EXPECT_EQ(FloatToFp8(0.5f * q4, kE4M3), 0x00);  // tie between 0 (even) and q
  EXPECT_EQ(FloatToFp8(std::nextafter(0.5f * q4, 1.f), kE4M3), 0x01);
  EXPECT_EQ(FloatToFp8(1.5f * q4, kE4M3), 0x02);  // tie between 1 and 2 (even)
  EXPECT_EQ(FloatToFp8(2.5f * q4, kE4M3), 0x02);
  EXPECT_EQ(FloatToFp8(7.5f * q4, kE4M3), 0x08);    // rounds up into the smallest normal
  EXPECT_EQ(FloatToFp8(-0.25f * q4, kE4M3), 0x80);  // underflow keeps the sign
  EXPECT_EQ(FloatToFp8(-0.f, kE4M3), 0x80);
  EXPECT_EQ(FloatToFp8(1e-40f, kE4M3), 0x00);  // an f32 subnormal
  EXPECT_EQ(FloatToFp8(q5, kE5M2), 0x01);
  EXPECT_EQ(FloatToFp8(2.5f * q5, kE5M2), 0x02);
  EXPECT_EQ(FloatToFp8(3.5f * q5, kE5M2), 0x04);  // tie between 3 and 4 (even): the smallest normal
  EXPECT_EQ(FloatToFp8(-0.5f * q5, kE5M2), 0x80);
}

TEST(Fp8Cpu, SaturatesFiniteAndInfiniteValues) {
  for (float x : {449.f, 464.f, 465.f, 480.f, 1e6f, 1e30f, FLT_MAX, INFINITY}) {
    EXPECT_EQ(FloatToFp8(x, kE4M3), 0x7E) << x;  // +448
    EXPECT_EQ(FloatToFp8(-x, kE4M3), 0xFE) << -x;
  }
  for (float x : {57345.f, 61440.f, 65536.f, 1e6f, 1e30f, FLT_MAX, INFINITY}) {
    EXPECT_EQ(FloatToFp8(x, kE5M2), 0x7B) << x;  // +57344
    EXPECT_EQ(FloatToFp8(-x, kE5M2), 0xFB) << -x;
  }
  EXPECT_EQ(Fp8ToFloat(FloatToFp8(-1e30f, kE4M3), kE4M3), -448.f);
  EXPECT_EQ(Fp8ToFloat(FloatToFp8(-1e30f, kE5M2), kE5M2), -57344.f);
  EXPECT_EQ(FloatToFp8(NAN, kE4M3), 0x7F);
  EXPECT_EQ(FloatToFp8(-NAN, kE5M2), 0x7F);
}

#if DT_HAVE_CUDA
// cuda_fp8.h's host conversion (the same __nv_cvt_float_to_fp8 the kernels call; on the host it is NVIDIA's software
// emulation of the sm_89+ instruction) against FloatToFp8: every sign/exponent/top-7-mantissa-bit prefix with low
// halves that make exact ties, just-above and just-below ties, and arbitrary sticky bits. NaN excepted (both give a
// NaN code). The whole 2^32 range was also swept once offline (see the commit message).
TEST(Fp8Cpu, MatchesCudaFp8HostConversion) {
  const uint32_t lows[] = {0x0000, 0x0001, 0x7FFF, 0x8000, 0x8001, 0xFFFF, 0x1234, 0xC0DE};
  int64_t checked = 0;
  for (uint32_t hi = 0; hi < 0x10000; ++hi) {
    for (uint32_t lo : lows) {
      const float x = FromBits(hi << 16 | lo);
      if (std::isnan(x)) continue;
      for (Fp8Format f : {kE4M3, kE5M2}) {
        const uint8_t want = __nv_cvt_float_to_fp8(x, __NV_SATFINITE, f == kE4M3 ? __NV_E4M3 : __NV_E5M2);
        ASSERT_EQ(FloatToFp8(x, f), want) << Fp8FormatName(f) << " x=" << x << " bits=0x" << std::hex << Bits(x);
        ++checked;
      }
    }
  }
  EXPECT_GT(checked, 1000000);
}
#endif

// ---- scale and amax -------------------------------------------------------------------------------------------------

TEST(Fp8Cpu, ScaleFromAmaxIsAPowerOfTwo) {
  struct Case {
    float amax;
    Fp8Format f;
    float scale;
  };
  const Case cases[] = {
      {448.f, kE4M3, 1.f},
      {1.f, kE4M3, 256.f},
      {3.5f, kE4M3, 128.f},  // 448/3.5 = 128 exactly
      {3.6f, kE4M3, 64.f},
      {500.f, kE4M3, 0.5f},
      {1.f, kE5M2, 32768.f},
      {57344.f, kE5M2, 1.f},
      {1e-40f, kE4M3, std::ldexp(1.f, 127)},    // 448 / amax overflows f32
      {FLT_MAX, kE4M3, std::ldexp(1.f, -120)},  // 448 / FLT_MAX = 1.75 * 2^-120
  };
  for (const Case& c : cases) {
    const Fp8ScalePair p = Fp8ScaleFromAmax(c.amax, c.f);
    EXPECT_EQ(p.scale, c.scale) << "amax " << c.amax << " " << Fp8FormatName(c.f);
    EXPECT_EQ(p.scale_inv, 1.f / c.scale) << "amax " << c.amax;
  }
  // amax lands in (max/2, max]; scale * scale_inv == 1 exactly.
  std::mt19937 rng(3);
  std::uniform_real_distribution<float> expo(-30.f, 30.f);
  for (int i = 0; i < 10000; ++i) {
    const float amax = std::exp2(expo(rng));
    for (Fp8Format f : {kE4M3, kE5M2}) {
      const Fp8ScalePair p = Fp8ScaleFromAmax(amax, f);
      EXPECT_LE(amax * p.scale, Fp8Max(f)) << amax;
      EXPECT_GT(amax * p.scale, Fp8Max(f) / 2) << amax;
      EXPECT_EQ(Bits(p.scale) & 0x007FFFFFu, 0u) << amax;
      EXPECT_EQ(p.scale * p.scale_inv, 1.f) << amax;
    }
  }
}

TEST(Fp8Cpu, ScaleIsOneForZeroOrNonFiniteAmax) {
  for (float amax : {0.f, -0.f, INFINITY, NAN}) {
    const Fp8ScalePair p = Fp8ScaleFromAmax(amax, kE4M3);
    EXPECT_EQ(p.scale, 1.f) << amax;
    EXPECT_EQ(p.scale_inv, 1.f) << amax;
  }
}

TEST(Fp8Cpu, AmaxOrdersNanOverInfOverFinite) {
  std::vector<float> x = {1.f, -3.f, 2.5f, -0.f};
  EXPECT_EQ(AmaxCpu(x.data(), 4), 3.f);
  x.push_back(-INFINITY);
  EXPECT_EQ(AmaxCpu(x.data(), 5), INFINITY);
  x.push_back(NAN);
  EXPECT_TRUE(std::isnan(AmaxCpu(x.data(), 6)));
  EXPECT_EQ(AmaxCpu(x.data(), 0), 0.f);
}

// ---- cast (CPU) and the Tensor entry points -------------------------------------------------------------------------

std::unique_ptr<DeviceContext> Cpu() {
  std::unique_ptr<DeviceContext> ctx;
  EXPECT_TRUE(DeviceContext::CreateCpu(&ctx).ok());
  return ctx;
}

TEST(Fp8Cpu, CastWritesTheTransposedCopy) {
  auto cpu = Cpu();
  const int64_t rows = 3, cols = 5;
  std::vector<float> x = {0.5f, -1.f, 2.f, 100.f, -1e6f, 0.f, 3.f, 7.f, -7.f, 1.0625f, 9.f, 10.f, -11.f, 12.f, 13.f};
  Tensor tx = Tensor::Wrap(x.data(), {rows, cols}, DType::kF32, DeviceType::kCPU);
  float scale_value = 4.f;
  Tensor scale = Tensor::Wrap(&scale_value, {1}, DType::kF32, DeviceType::kCPU);
  std::vector<uint8_t> out(rows * cols), out_t(rows * cols);
  Tensor to = Tensor::Wrap(out.data(), {rows, cols}, DType::kU8, DeviceType::kCPU);
  Tensor tt = Tensor::Wrap(out_t.data(), {cols, rows}, DType::kU8, DeviceType::kCPU);
  DT_ASSERT_OK(CastToFp8(*cpu, tx, scale, kE4M3, &to, &tt));
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < cols; ++c) {
      EXPECT_EQ(out[r * cols + c], FloatToFp8(x[r * cols + c] * 4.f, kE4M3)) << r << "," << c;
      EXPECT_EQ(out_t[c * rows + r], out[r * cols + c]) << r << "," << c;
    }
  }
  EXPECT_EQ(Fp8ToFloat(out[3], kE4M3), 384.f);   // 100 * 4 = 400: the tie between 384 (even) and 416
  EXPECT_EQ(Fp8ToFloat(out[4], kE4M3), -448.f);  // -1e6 * 4 saturates
}

TEST(Fp8Cpu, EntryPointsNameBadShapes) {
  auto cpu = Cpu();
  std::vector<float> x(12, 1.f);
  Tensor tx = Tensor::Wrap(x.data(), {3, 4}, DType::kF32, DeviceType::kCPU);
  float s = 1.f;
  Tensor scale = Tensor::Wrap(&s, {1}, DType::kF32, DeviceType::kCPU);
  std::vector<uint8_t> bytes(12);
  Tensor wrong_t = Tensor::Wrap(bytes.data(), {3, 4}, DType::kU8, DeviceType::kCPU);  // should be [4,3]
  const Status st = CastToFp8(*cpu, tx, scale, kE4M3, nullptr, &wrong_t);
  EXPECT_EQ(st.code(), Status::Code::kInvalidArgument) << st.ToString();
  EXPECT_NE(st.ToString().find("[4,3]"), std::string::npos) << st.ToString();
  Tensor vec = Tensor::Wrap(x.data(), {2}, DType::kF32, DeviceType::kCPU);
  const Status st2 = Fp8Amax(*cpu, tx, &vec);
  EXPECT_EQ(st2.code(), Status::Code::kInvalidArgument) << st2.ToString();
  EXPECT_NE(st2.ToString().find("one-element"), std::string::npos) << st2.ToString();
}

// A bound for the amax (Fp8SetAmax, then Fp8Quantize with amax_ready), as GPT-2's FP8 LM head uses for dlogits =
// (softmax - onehot) * g with g = 1/16384 (|dlogits| <= g): a true amax of 0.95 g is in the bound's power-of-two step
// (e5m2: 57344 / 2^30 = 0.875 g up to g), so the scale and bytes are current scaling's; 0.8 g is below it, and the
// bound's scale is half of current scaling's. Bad bounds are refused.
TEST(Fp8Cpu, AmaxBoundGivesCurrentScalingWithinItsStep) {
  auto cpu = Cpu();
  const float g = std::ldexp(1.f, -14);
  for (float frac : {0.95f, 0.8f}) {
    std::mt19937 rng(7);
    std::uniform_real_distribution<float> u(-1.f, 1.f);
    std::vector<float> x(8 * 32);
    for (float& v : x) v = u(rng) * frac * g * 0.5f;
    x[37] = -frac * g;  // the true amax
    Tensor tx = Tensor::Wrap(x.data(), {8, 32}, DType::kF32, DeviceType::kCPU);
    Tensor slots;
    std::vector<Fp8Scales> s;
    DT_ASSERT_OK(Fp8ScaleSlots(*cpu, 2, &slots, &s));
    std::vector<uint8_t> cur(x.size()), bound(x.size());
    Tensor tcur = Tensor::Wrap(cur.data(), {8, 32}, DType::kU8, DeviceType::kCPU);
    Tensor tbound = Tensor::Wrap(bound.data(), {8, 32}, DType::kU8, DeviceType::kCPU);
    DT_ASSERT_OK(Fp8Quantize(*cpu, tx, kE5M2, &s[0], &tcur, nullptr));
    DT_ASSERT_OK(Fp8SetAmax(*cpu, g, &s[1].amax));
    Fp8QuantizeOptions ready;
    ready.amax_ready = true;
    DT_ASSERT_OK(Fp8Quantize(*cpu, tx, kE5M2, &s[1], &tbound, nullptr, ready));
    EXPECT_EQ(s[1].amax.data<float>()[0], g);
    const float cur_scale = s[0].scale.data<float>()[0], bound_scale = s[1].scale.data<float>()[0];
    if (frac > 0.875f) {
      EXPECT_EQ(bound_scale, cur_scale);
      EXPECT_EQ(bound, cur);
    } else {
      EXPECT_EQ(bound_scale * 2, cur_scale);
    }
  }
  float a = 0.f;
  Tensor amax = Tensor::Wrap(&a, {1}, DType::kF32, DeviceType::kCPU);
  for (float bad : {-1.f, NAN, INFINITY}) {
    const Status st = Fp8SetAmax(*cpu, bad, &amax);
    EXPECT_EQ(st.code(), Status::Code::kInvalidArgument) << bad;
    EXPECT_NE(st.message().find("must be finite and >= 0"), std::string::npos) << st.ToString();
  }
}

// ---- CUDA against the CPU references --------------------------------------------------------------------------------

#if DT_HAVE_CUDA
class Fp8CudaTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (CudaDeviceCount() == 0) GTEST_SKIP() << "no CUDA device: the FP8 kernels need a GPU (sm_89+)";
    ASSERT_TRUE(DeviceContext::CreateCuda(0, &gpu_).ok());
  }
  // Raw host bytes of `dtype` to a new device tensor `offset` elements into its allocation (offset 1: unaligned).
  void Upload(DType dtype, const std::vector<int64_t>& shape, const void* host, int64_t offset, Tensor* out) {
    Tensor base;
    DT_ASSERT_OK(Tensor::Empty({Tensor::NumelOf(shape) + offset}, dtype, gpu_->allocator(), &base));
    DT_ASSERT_OK(base.View(offset, shape, out));
    DT_ASSERT_OK(out->CopyFrom(Tensor::Wrap(const_cast<void*>(host), shape, dtype, DeviceType::kCPU), gpu_->stream()));
    DT_ASSERT_OK(gpu_->Synchronize());
  }
  template <typename T>
  std::vector<T> Download(const Tensor& t) {
    std::vector<T> host(static_cast<size_t>(t.numel()));
    EXPECT_TRUE(Tensor::Wrap(host.data(), t.shape(), t.dtype(), DeviceType::kCPU).CopyFrom(t, gpu_->stream()).ok());
    EXPECT_TRUE(gpu_->Synchronize().ok());
    return host;
  }
  void Scalar(float v, Tensor* out) { Upload(DType::kF32, {1}, &v, 0, out); }
  std::unique_ptr<DeviceContext> gpu_;
};

// N(0, 4) values with the awkward ones spliced in: ties, subnormals of both formats, out-of-range values, infinities,
// NaN, signed zeros, f32 subnormals; each divided by `scale` so that it is the product the kernel converts. For bf16
// every value is rounded to bf16 first (the CPU reference sees the exact widening).
std::vector<float> CastInputs(int64_t n, float scale, bool bf16, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> nd(0.f, 4.f);
  std::vector<float> x(static_cast<size_t>(n));
  for (float& v : x) v = nd(rng);
  const float specials[] = {1.0625f,
                            1.1875f,
                            -1.125f,
                            1.375f,
                            std::ldexp(1.5f, -9),
                            std::ldexp(0.5f, -9),
                            std::ldexp(3.5f, -16),
                            std::ldexp(-0.5f, -16),
                            449.f,
                            464.f,
                            465.f,
                            61440.f,
                            1e6f,
                            -1e30f,
                            INFINITY,
                            -INFINITY,
                            NAN,
                            0.f,
                            -0.f,
                            1e-40f,
                            -1e-40f,
                            FLT_MAX,
                            447.f,
                            57000.f};
  int j = 0;
  for (int64_t i = 0; i < n; i += 7) x[i] = specials[j++ % (sizeof(specials) / sizeof(float))] / scale;
  if (bf16) {
    for (float& v : x) v = Bf16BitsToF32(RoundBf16Rne(v));
  }
  return x;
}

TEST_F(Fp8CudaTest, CastMatchesCpuBitForBit) {
  struct Shape {
    int64_t rows, cols, offset;
  };
  // Aligned (128-bit loads, 16-byte transposed stores), ragged tiles, cols % 8 != 0 (bf16 scalar path), rows % 16
  // != 0 (byte-wise transposed stores), one row, and a view one element off alignment.
  const Shape shapes[] = {{256, 768, 0}, {37, 52, 0}, {130, 64, 0}, {1, 8, 0}, {64, 40, 1}, {100, 3, 0}};
  for (DType dt : {DType::kF32, DType::kBF16}) {
    for (Fp8Format f : {kE4M3, kE5M2}) {
      for (float scale : {32.f, 37.3f}) {  // a power of two, and one whose products round in f32
        for (const Shape& s : shapes) {
          const bool bf16 = dt == DType::kBF16;
          const auto x = CastInputs(s.rows * s.cols, scale, bf16, 11 + s.rows);
          std::vector<uint8_t> want(x.size()), want_t(x.size());
          CastToFp8Cpu(want.data(), want_t.data(), x.data(), s.rows, s.cols, scale, f);
          std::vector<uint16_t> x16(x.size());
          for (size_t i = 0; i < x.size(); ++i) x16[i] = RoundBf16Rne(x[i]);
          Tensor tx, tscale, out, out_t;
          Upload(dt, {s.rows, s.cols}, bf16 ? static_cast<const void*>(x16.data()) : x.data(), s.offset, &tx);
          Scalar(scale, &tscale);
          for (int which = 0; which < 3; ++which) {  // out only, out_t only, both
            const std::vector<uint8_t> poison(x.size(), 0xAA);
            Upload(DType::kU8, {s.rows, s.cols}, poison.data(), s.offset, &out);
            Upload(DType::kU8, {s.cols, s.rows}, poison.data(), 0, &out_t);
            DT_ASSERT_OK(CastToFp8(*gpu_, tx, tscale, f, which != 1 ? &out : nullptr, which != 0 ? &out_t : nullptr));
            const auto got = Download<uint8_t>(out);
            const auto got_t = Download<uint8_t>(out_t);
            const std::string where = std::string(DTypeName(dt)) + " -> " + Fp8FormatName(f) + " scale " +
                                      std::to_string(scale) + " [" + std::to_string(s.rows) + "," +
                                      std::to_string(s.cols) + "]+" + std::to_string(s.offset) + " outputs " +
                                      std::to_string(which);
            if (which != 1) {
              for (size_t i = 0; i < x.size(); ++i) {
                ASSERT_EQ(got[i], want[i]) << where << " at " << i << " x*scale=" << x[i] * scale;
              }
            } else {
              EXPECT_EQ(got, poison) << where << ": out written though not asked for";
            }
            if (which != 0) {
              EXPECT_EQ(got_t, want_t) << where;
            } else {
              EXPECT_EQ(got_t, poison) << where << ": out_t written though not asked for";
            }
          }
        }
      }
    }
  }
}

TEST_F(Fp8CudaTest, AmaxIsExact) {
  for (DType dt : {DType::kF32, DType::kBF16}) {
    for (int64_t n : {int64_t{1}, int64_t{1000}, int64_t{(1 << 20) + 3}}) {
      for (int special = 0; special < 3; ++special) {  // none, an inf, a NaN
        for (int64_t offset : {0, 1}) {
          const bool bf16 = dt == DType::kBF16;
          std::mt19937_64 rng(n + special);
          std::normal_distribution<float> nd(0.f, 3.f);
          std::vector<float> x(static_cast<size_t>(n));
          for (float& v : x) v = bf16 ? Bf16BitsToF32(RoundBf16Rne(nd(rng))) : nd(rng);
          if (special == 1) x[n / 2] = -INFINITY;
          if (special == 2) x[n - 1] = NAN;
          std::vector<uint16_t> x16(x.size());
          for (size_t i = 0; i < x.size(); ++i) x16[i] = RoundBf16Rne(x[i]);
          Tensor tx, amax;
          Upload(dt, {n}, bf16 ? static_cast<const void*>(x16.data()) : x.data(), offset, &tx);
          Scalar(-5.f, &amax);  // overwritten, not max-ed with
          DT_ASSERT_OK(Fp8Amax(*gpu_, tx, &amax));
          const float got = Download<float>(amax)[0], want = AmaxCpu(x.data(), n);
          if (special == 2) {
            EXPECT_TRUE(std::isnan(got)) << DTypeName(dt) << " n=" << n;
          } else {
            EXPECT_EQ(Bits(got), Bits(want))
                << DTypeName(dt) << " n=" << n << " offset " << offset << ": " << got << " vs " << want;
          }
        }
      }
    }
  }
}

TEST_F(Fp8CudaTest, SetAmaxWritesTheBound) {
  Tensor amax;
  Scalar(-5.f, &amax);
  DT_ASSERT_OK(Fp8SetAmax(*gpu_, 0.125f, &amax));
  EXPECT_EQ(Download<float>(amax)[0], 0.125f);
}

TEST_F(Fp8CudaTest, ScaleKernelMatchesCpuFormula) {
  std::vector<float> amaxes = {0.f, NAN, INFINITY, 1.f, 3.5f, 3.6f, 448.f, 500.f, 1e-40f, FLT_MAX, 57344.f};
  std::mt19937 rng(5);
  std::uniform_real_distribution<float> expo(-40.f, 40.f);
  for (int i = 0; i < 200; ++i) amaxes.push_back(std::exp2(expo(rng)) * 1.37f);
  for (Fp8Format f : {kE4M3, kE5M2}) {
    for (float amax : amaxes) {
      Tensor tamax, scale, scale_inv;
      Scalar(amax, &tamax);
      Scalar(NAN, &scale);
      Scalar(NAN, &scale_inv);
      DT_ASSERT_OK(Fp8Scale(*gpu_, tamax, f, &scale, &scale_inv));
      const Fp8ScalePair want = Fp8ScaleFromAmax(amax, f);
      EXPECT_EQ(Bits(Download<float>(scale)[0]), Bits(want.scale)) << Fp8FormatName(f) << " amax " << amax;
      EXPECT_EQ(Bits(Download<float>(scale_inv)[0]), Bits(want.scale_inv)) << Fp8FormatName(f) << " amax " << amax;
    }
  }
}
#endif  // DT_HAVE_CUDA

}  // namespace
}  // namespace dtrain::ops
