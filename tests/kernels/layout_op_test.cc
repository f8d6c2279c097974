// Tests of kernels/layout: the NCHW <-> NHWC permutations. CPU: the closed form of the index map on iota inputs
// (exact), round trips, accumulate. CUDA against the CPU reference, bit for bit: NchwToNhwc's f32 -> bf16 rounds to
// nearest even exactly like core/bf16.h (ties, NaN, infinities, subnormals included), NhwcToNchw's bf16 -> f32 is
// exact and its accumulate is one fp32 add. Sizes: odd ones, the CNN's images [128,1,28,28] and its conv weights
// ([32,1,3,3] ... [128,128,3,3], [64,32,1,1]). Shape and dtype errors name the tensors. CUDA tests skip without a GPU.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <memory>
#include <vector>

#include "core/bf16.h"
#include "core/check.h"
#include "core/device_context.h"
#include "kernels/layout.h"
#include "tests/testing/grad_check.h"

namespace dtrain::ops {
namespace {

using testing::Fetch;
using testing::FetchBf16Bits;
using testing::MakeBf16FromBits;
using testing::MakeTensor;
using testing::RandomVector;

struct Nchw {
  int64_t n, c, h, w;
  std::vector<int64_t> nchw() const { return {n, c, h, w}; }
  std::vector<int64_t> nhwc() const { return {n, h, w, c}; }
  int64_t numel() const { return n * c * h * w; }
};

// Odd sizes, a 1-channel image batch (the CNN's input) and conv weights KCRS (N = K, H = R, W = S).
std::vector<Nchw> Sizes() {
  return {{2, 3, 5, 7},  {1, 1, 1, 1},   {3, 5, 1, 2},   {128, 1, 28, 28},
          {32, 1, 3, 3}, {64, 32, 3, 3}, {64, 32, 1, 1}, {128, 128, 3, 3}};
}

// The index maps, written out: NCHW flat index of (n,c,h,w) and NHWC flat index of the same element.
int64_t At(const Nchw& s, int64_t n, int64_t c, int64_t h, int64_t w) { return ((n * s.c + c) * s.h + h) * s.w + w; }
int64_t AtNhwc(const Nchw& s, int64_t n, int64_t c, int64_t h, int64_t w) {
  return ((n * s.h + h) * s.w + w) * s.c + c;
}

std::vector<double> ToNhwc(const Nchw& s, const std::vector<double>& v) {
  std::vector<double> out(v.size());
  for (int64_t n = 0; n < s.n; ++n)
    for (int64_t c = 0; c < s.c; ++c)
      for (int64_t h = 0; h < s.h; ++h)
        for (int64_t w = 0; w < s.w; ++w) out[AtNhwc(s, n, c, h, w)] = v[At(s, n, c, h, w)];
  return out;
}

std::vector<double> Iota(int64_t n) {
  std::vector<double> v(n);
  for (int64_t i = 0; i < n; ++i) v[i] = static_cast<double>(i);
  return v;
}

std::unique_ptr<DeviceContext> Cpu() {
  std::unique_ptr<DeviceContext> ctx;
  EXPECT_TRUE(DeviceContext::CreateCpu(&ctx).ok());
  return ctx;
}

float FromBits(uint32_t u) {
  float f;
  std::memcpy(&f, &u, sizeof(f));
  return f;
}

// ---- CPU ------------------------------------------------------------------------------------------------------

// in[i] = i: out[NHWC index of (n,c,h,w)] must be the NCHW index of (n,c,h,w), and back again.
TEST(LayoutCpu, IotaFollowsTheIndexMapBothWays) {
  auto cpu = Cpu();
  for (DType dt : {DType::kF32, DType::kF64}) {
    for (const Nchw& s : {Nchw{2, 3, 5, 7}, Nchw{3, 5, 1, 2}, Nchw{4, 2, 3, 3}}) {
      Tensor in, nhwc, back;
      DT_ASSERT_OK(MakeTensor(*cpu, dt, s.nchw(), Iota(s.numel()), &in));
      DT_ASSERT_OK(MakeTensor(*cpu, dt, s.nhwc(), std::vector<double>(s.numel(), NAN), &nhwc));
      DT_ASSERT_OK(MakeTensor(*cpu, dt, s.nchw(), std::vector<double>(s.numel(), NAN), &back));
      DT_ASSERT_OK(NchwToNhwc(*cpu, in, &nhwc));
      std::vector<double> got;
      DT_ASSERT_OK(Fetch(*cpu, nhwc, &got));
      for (int64_t n = 0; n < s.n; ++n)
        for (int64_t c = 0; c < s.c; ++c)
          for (int64_t h = 0; h < s.h; ++h)
            for (int64_t w = 0; w < s.w; ++w)
              ASSERT_EQ(got[AtNhwc(s, n, c, h, w)], At(s, n, c, h, w)) << n << "," << c << "," << h << "," << w;
      DT_ASSERT_OK(NhwcToNchw(*cpu, nhwc, &back, /*accumulate=*/false));  // NaN poison overwritten
      DT_ASSERT_OK(Fetch(*cpu, back, &got));
      EXPECT_EQ(got, Iota(s.numel()));
    }
  }
}

TEST(LayoutCpu, NhwcToNchwAccumulateAdds) {
  auto cpu = Cpu();
  const Nchw s{2, 3, 4, 5};
  const auto x = RandomVector(s.numel(), 1), init = RandomVector(s.numel(), 2);
  const auto x_nhwc = ToNhwc(s, x);
  for (DType dt : {DType::kF32, DType::kF64}) {
    Tensor in, out;
    DT_ASSERT_OK(MakeTensor(*cpu, dt, s.nhwc(), x_nhwc, &in));
    DT_ASSERT_OK(MakeTensor(*cpu, dt, s.nchw(), init, &out));
    DT_ASSERT_OK(NhwcToNchw(*cpu, in, &out, /*accumulate=*/true));
    DT_ASSERT_OK(NhwcToNchw(*cpu, in, &out, /*accumulate=*/true));
    std::vector<double> got;
    DT_ASSERT_OK(Fetch(*cpu, out, &got));
    for (int64_t i = 0; i < s.numel(); ++i) {
      if (dt == DType::kF64) {
        EXPECT_EQ(got[i], init[i] + x[i] + x[i]) << i;
      } else {
        const float want = (static_cast<float>(init[i]) + static_cast<float>(x[i])) + static_cast<float>(x[i]);
        EXPECT_EQ(got[i], want) << i;
      }
    }
  }
}

TEST(Layout, RejectsBadShapesAndDtypesNamingThem) {
  auto cpu = Cpu();
  Tensor in, out, wrong, out64, flat;
  DT_ASSERT_OK(MakeTensor(*cpu, DType::kF32, {2, 3, 4, 5}, Iota(120), &in));
  DT_ASSERT_OK(MakeTensor(*cpu, DType::kF32, {2, 4, 5, 3}, Iota(120), &out));
  DT_ASSERT_OK(MakeTensor(*cpu, DType::kF32, {2, 3, 4, 5}, Iota(120), &wrong));  // same numel, not permuted
  DT_ASSERT_OK(MakeTensor(*cpu, DType::kF64, {2, 4, 5, 3}, Iota(120), &out64));
  DT_ASSERT_OK(MakeTensor(*cpu, DType::kF32, {120}, Iota(120), &flat));
  DT_ASSERT_OK(NchwToNhwc(*cpu, in, &out));
  Status st = NchwToNhwc(*cpu, in, &wrong);
  EXPECT_EQ(st.code(), Status::Code::kInvalidArgument);
  EXPECT_NE(st.message().find("f32[2,3,4,5]"), std::string::npos) << st.ToString();
  EXPECT_NE(st.message().find("[2,4,5,3]"), std::string::npos) << st.ToString();  // the shape it should be
  // NhwcToNchw reads `in` as [N,H,W,C]: in [2,4,5,3] wants out [2,3,4,5], so `out` [2,4,5,3] is wrong there.
  st = NhwcToNchw(*cpu, out, &out, false);
  EXPECT_EQ(st.code(), Status::Code::kInvalidArgument);
  EXPECT_NE(st.message().find("[2,3,4,5]"), std::string::npos) << st.ToString();
  DT_ASSERT_OK(NhwcToNchw(*cpu, out, &wrong, true));
  st = NchwToNhwc(*cpu, in, &out64);
  EXPECT_EQ(st.code(), Status::Code::kInvalidArgument);
  EXPECT_NE(st.message().find("f64[2,4,5,3]"), std::string::npos) << st.ToString();
  EXPECT_EQ(NchwToNhwc(*cpu, flat, &out).code(), Status::Code::kInvalidArgument);
  EXPECT_EQ(NchwToNhwc(*cpu, in, nullptr).code(), Status::Code::kInvalidArgument);
  EXPECT_EQ(NhwcToNchw(*cpu, out, nullptr, false).code(), Status::Code::kInvalidArgument);
}

// ---- CUDA -----------------------------------------------------------------------------------------------------

class LayoutCuda : public ::testing::Test {
 protected:
  void SetUp() override {
    if (CudaDeviceCount() == 0) GTEST_SKIP() << "no CUDA device: the bf16 layout kernels need a GPU";
    cpu_ = Cpu();
    DT_ASSERT_OK(DeviceContext::CreateCuda(0, &gpu_));
  }
  std::unique_ptr<DeviceContext> cpu_, gpu_;
};

// Random f32 values plus the rounding corner cases: ties to even both ways, values just off a tie, NaN, +-inf,
// overflow to inf, +-0, subnormals, the largest finite f32.
std::vector<float> RoundingCases(int64_t n, uint64_t seed) {
  const auto r = RandomVector(n, seed, -3.0, 3.0);
  std::vector<float> v(r.begin(), r.end());
  const float special[] = {
      FromBits(0x3f808000u),  // 1 + 2^-8: halfway between 1 and 1 + 2^-7 -> 1 (even)
      FromBits(0x3f818000u),  // 1 + 3*2^-8: halfway -> 1 + 2^-6 (even, rounds up)
      FromBits(0x3f808001u),  // just above the tie -> rounds up
      FromBits(0x3f807fffu),  // just below the tie -> rounds down
      FromBits(0xbf818000u),  // negative tie
      std::numeric_limits<float>::quiet_NaN(),
      FromBits(0x7f800001u),  // a signalling NaN: stays NaN
      std::numeric_limits<float>::infinity(),
      -std::numeric_limits<float>::infinity(),
      std::numeric_limits<float>::max(),  // rounds to inf
      FromBits(0x7f7f7fffu),              // largest f32 that rounds down to bf16's max
      0.0f,
      -0.0f,
      FromBits(0x00000001u),  // smallest subnormal -> +0
      FromBits(0x00018000u),  // subnormal tie
      FromBits(0x807fffffu),  // largest negative subnormal
  };
  for (size_t i = 0; i < sizeof(special) / sizeof(special[0]) && i < v.size(); ++i) {
    v[(i * 7919) % v.size()] = special[i];
  }
  return v;
}

TEST_F(LayoutCuda, NchwToNhwcRoundsF32ToBf16BitExactly) {
  uint64_t seed = 10;
  for (const Nchw& s : Sizes()) {
    const std::vector<float> x = RoundingCases(s.numel(), ++seed);
    Tensor in, out;
    DT_ASSERT_OK(Tensor::Empty(s.nchw(), DType::kF32, gpu_->allocator(), &in));
    std::vector<float> host = x;
    DT_ASSERT_OK(in.CopyFrom(Tensor::Wrap(host.data(), s.nchw(), DType::kF32, DeviceType::kCPU), gpu_->stream()));
    DT_ASSERT_OK(MakeBf16FromBits(*gpu_, s.nhwc(), std::vector<uint16_t>(s.numel(), 0x7fc1), &out));  // NaN poison
    DT_ASSERT_OK(NchwToNhwc(*gpu_, in, &out));
    std::vector<uint16_t> got;
    DT_ASSERT_OK(FetchBf16Bits(*gpu_, out, &got));
    // The CPU reference (f32 permutation) then the host rounding of core/bf16.h.
    std::vector<float> perm(x.size());
    NchwToNhwcCpu(perm.data(), x.data(), s.n, s.c, s.h, s.w);
    int64_t mismatches = 0;
    for (size_t i = 0; i < perm.size(); ++i) {
      const uint16_t want = RoundBf16Rne(perm[i]);
      const bool both_nan = std::isnan(Bf16BitsToF32(want)) && std::isnan(Bf16BitsToF32(got[i]));
      if (got[i] != want && !both_nan && mismatches++ < 5) {
        ADD_FAILURE() << "[" << s.n << "," << s.c << "," << s.h << "," << s.w << "] i " << i << ": f32 " << perm[i]
                      << " -> bf16 0x" << std::hex << got[i] << ", want 0x" << want;
      }
    }
    EXPECT_EQ(mismatches, 0);
  }
}

TEST_F(LayoutCuda, NhwcToNchwWidensBf16ExactlyAndAccumulatesInF32) {
  uint64_t seed = 100;
  for (const Nchw& s : Sizes()) {
    // Input: bf16 bits of random values (NHWC order); init: random f32 for accumulate.
    const auto r = RandomVector(s.numel(), ++seed, -4.0, 4.0);
    std::vector<uint16_t> bits(r.size());
    std::vector<float> widened(r.size());
    for (size_t i = 0; i < r.size(); ++i) {
      bits[i] = RoundBf16Rne(static_cast<float>(r[i]));
      widened[i] = Bf16BitsToF32(bits[i]);
    }
    const auto init = RandomVector(s.numel(), ++seed);
    std::vector<float> want_set(r.size()), want_acc(init.begin(), init.end());
    NhwcToNchwCpu(want_set.data(), widened.data(), s.n, s.c, s.h, s.w, /*accumulate=*/false);
    NhwcToNchwCpu(want_acc.data(), widened.data(), s.n, s.c, s.h, s.w, /*accumulate=*/true);  // one f32 add

    Tensor in, out;
    DT_ASSERT_OK(MakeBf16FromBits(*gpu_, s.nhwc(), bits, &in));
    DT_ASSERT_OK(MakeTensor(*gpu_, DType::kF32, s.nchw(), std::vector<double>(s.numel(), NAN), &out));
    DT_ASSERT_OK(NhwcToNchw(*gpu_, in, &out, /*accumulate=*/false));
    std::vector<double> got;
    DT_ASSERT_OK(Fetch(*gpu_, out, &got));
    EXPECT_EQ(got, std::vector<double>(want_set.begin(), want_set.end()))
        << "[" << s.n << "," << s.c << "," << s.h << "," << s.w << "]";

    DT_ASSERT_OK(MakeTensor(*gpu_, DType::kF32, s.nchw(), init, &out));
    DT_ASSERT_OK(NhwcToNchw(*gpu_, in, &out, /*accumulate=*/true));
    DT_ASSERT_OK(Fetch(*gpu_, out, &got));
    EXPECT_EQ(got, std::vector<double>(want_acc.begin(), want_acc.end()))
        << "accumulate [" << s.n << "," << s.c << "," << s.h << "," << s.w << "]";
  }
}

// The CNN's weight path: f32 KCRS -> bf16 KRSC -> f32 KCRS gives the bf16 rounding of every weight in place.
TEST_F(LayoutCuda, RoundTripIsTheBf16RoundingInPlace) {
  const Nchw s{64, 32, 3, 3};
  const auto x = RandomVector(s.numel(), 7);
  Tensor in, mid, back;
  DT_ASSERT_OK(MakeTensor(*gpu_, DType::kF32, s.nchw(), x, &in));
  DT_ASSERT_OK(Tensor::Empty(s.nhwc(), DType::kBF16, gpu_->allocator(), &mid));
  DT_ASSERT_OK(MakeTensor(*gpu_, DType::kF32, s.nchw(), std::vector<double>(s.numel(), NAN), &back));
  DT_ASSERT_OK(NchwToNhwc(*gpu_, in, &mid));
  DT_ASSERT_OK(NhwcToNchw(*gpu_, mid, &back, false));
  std::vector<double> got;
  DT_ASSERT_OK(Fetch(*gpu_, back, &got));
  for (int64_t i = 0; i < s.numel(); ++i) {
    ASSERT_EQ(got[i], Bf16BitsToF32(RoundBf16Rne(static_cast<float>(x[i])))) << i;
  }
}

TEST_F(LayoutCuda, RejectsWrongDtypesAndShapes) {
  const Nchw s{2, 3, 4, 5};
  Tensor f32_nchw, f32_nhwc, bf16_nhwc, bf16_nchw;
  DT_ASSERT_OK(MakeTensor(*gpu_, DType::kF32, s.nchw(), Iota(s.numel()), &f32_nchw));
  DT_ASSERT_OK(MakeTensor(*gpu_, DType::kF32, s.nhwc(), Iota(s.numel()), &f32_nhwc));
  DT_ASSERT_OK(Tensor::Empty(s.nhwc(), DType::kBF16, gpu_->allocator(), &bf16_nhwc));
  DT_ASSERT_OK(Tensor::Empty(s.nchw(), DType::kBF16, gpu_->allocator(), &bf16_nchw));
  DT_ASSERT_OK(NchwToNhwc(*gpu_, f32_nchw, &bf16_nhwc));
  DT_ASSERT_OK(NhwcToNchw(*gpu_, bf16_nhwc, &f32_nchw, true));
  Status st = NchwToNhwc(*gpu_, f32_nchw, &f32_nhwc);  // CUDA converts f32 -> bf16 only
  EXPECT_EQ(st.code(), Status::Code::kInvalidArgument);
  EXPECT_NE(st.message().find("f32[2,4,5,3]"), std::string::npos) << st.ToString();
  EXPECT_EQ(NhwcToNchw(*gpu_, f32_nhwc, &f32_nchw, false).code(), Status::Code::kInvalidArgument);
  st = NchwToNhwc(*gpu_, f32_nchw, &bf16_nchw);  // not permuted
  EXPECT_EQ(st.code(), Status::Code::kInvalidArgument);
  EXPECT_NE(st.message().find("bf16[2,3,4,5]"), std::string::npos) << st.ToString();
  // Mixed devices.
  Tensor cpu_in;
  DT_ASSERT_OK(MakeTensor(*cpu_, DType::kF32, s.nchw(), Iota(s.numel()), &cpu_in));
  EXPECT_EQ(NchwToNhwc(*gpu_, cpu_in, &bf16_nhwc).code(), Status::Code::kInvalidArgument);
}

}  // namespace
}  // namespace dtrain::ops
