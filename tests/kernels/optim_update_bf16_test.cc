// Tests of the mixed-storage AdamW (kernels/optim_update.h: bf16 params, grads and/or state, f32 math, stochastic
// rounding of kernels/bf16_round.h): the rounding itself (exact values stay, others land on a neighbour, unbiased),
// the CPU update against an f64 reference, unbiasedness of a sub-ulp update of bf16 params, determinism per (seed,
// step), the argument checks, split masters (SplitF32 / JoinF32 and the update on them: the f32 update's value bit for
// bit), and (GPU) the CUDA kernel equal to the CPU reference bit for bit.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "core/device_context.h"
#include "core/tensor.h"
#include "kernels/bf16_round.h"
#include "kernels/optim_update.h"

namespace dtrain::ops {
namespace {

using Bf16 = uint16_t;

std::unique_ptr<DeviceContext> CpuContext() {
  std::unique_ptr<DeviceContext> ctx;
  EXPECT_TRUE(DeviceContext::CreateCpu(&ctx).ok());
  return ctx;
}

template <typename T>
Tensor HostTensor(std::vector<T>& v, DType dtype) {
  return Tensor::Wrap(v.data(), {static_cast<int64_t>(v.size())}, dtype, DeviceType::kCPU);
}

std::vector<Bf16> ToBf16(const std::vector<float>& v) {
  std::vector<Bf16> out;
  for (float x : v) out.push_back(RoundBf16Rne(x));
  return out;
}

// The bf16 neighbours lo <= x <= hi of a finite x (lo == hi when x is a bf16 value), toward and away from zero.
void Neighbours(double x, double* toward_zero, double* away) {
  const float f = static_cast<float>(x);
  uint32_t u = F32Bits(f) & 0xffff0000u;
  float t;
  std::memcpy(&t, &u, sizeof(t));
  *toward_zero = t;
  *away = static_cast<double>(t) == x ? t : Bf16BitsToF32(static_cast<Bf16>((u >> 16) + 1));
}

TEST(Bf16Round, ExactValuesStayAndOthersLandOnANeighbour) {
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> dist(-3.0f, 3.0f);
  for (int i = 0; i < 10000; ++i) {
    const float x = dist(rng);
    const uint32_t r = rng() & 0xffffu;
    const float exact = Bf16BitsToF32(RoundBf16Rne(x));
    EXPECT_EQ(RoundBf16Sr(exact, r), RoundBf16Rne(exact)) << exact;  // a bf16 value rounds to itself
    double lo = 0, hi = 0;
    Neighbours(x, &lo, &hi);
    const double got = Bf16BitsToF32(RoundBf16Sr(x, r));
    EXPECT_TRUE(got == lo || got == hi) << x << " -> " << got;
  }
  // inf and NaN as round-to-nearest; r = 0 truncates, r = 0xffff rounds any dropped bits up.
  EXPECT_EQ(RoundBf16Sr(INFINITY, 0xffffu), 0x7f80u);
  EXPECT_TRUE(std::isnan(Bf16BitsToF32(RoundBf16Sr(NAN, 0x1234u))));
  EXPECT_EQ(RoundBf16Sr(1.0f + 0x1p-10f, 0), RoundBf16Rne(1.0f));
  EXPECT_EQ(Bf16BitsToF32(RoundBf16Sr(1.0f + 0x1p-10f, 0xffffu)), 1.0f + 0x1p-7f);
  EXPECT_EQ(Bf16BitsToF32(RoundBf16Sr(-1.0f - 0x1p-10f, 0xffffu)), -1.0f - 0x1p-7f);
}

TEST(Bf16Round, SrBitsDependOnKeyAndIndex) {
  EXPECT_EQ(SrBits(SrKey(1, 2), 3), SrBits(SrKey(1, 2), 3));
  EXPECT_NE(SrBits(SrKey(1, 2), 3), SrBits(SrKey(1, 2), 4));
  EXPECT_NE(SrBits(SrKey(1, 2), 3), SrBits(SrKey(1, 3), 3));
  EXPECT_NE(SrBits(SrKey(1, 2), 3), SrBits(SrKey(2, 2), 3));
  // The 16-bit fields are close to uniform: the mean of 2^16 draws of each is near 2^15 - 0.5.
  for (int shift : {16, 32, 48}) {
    double sum = 0;
    for (uint64_t i = 0; i < (1u << 16); ++i) sum += static_cast<double>((SrBits(SrKey(9, 1), i) >> shift) & 0xffffu);
    EXPECT_NEAR(sum / 65536.0, 32767.5, 32768.0 * 0.02) << shift;
  }
}

// One AdamW step per element in f64 from the same (bf16-representable) inputs.
struct Ref {
  double p, m, v;
};
Ref AdamWF64(double p, double g, double m, double v, const AdamWHyper& h, double scale) {
  const double t = static_cast<double>(h.step);
  g *= h.grad_scale * scale;
  p *= 1.0 - h.lr * h.weight_decay;
  m = h.beta1 * m + (1.0 - h.beta1) * g;
  v = h.beta2 * v + (1.0 - h.beta2) * g * g;
  const double denom = std::sqrt(v) / std::sqrt(1.0 - std::pow(h.beta2, t)) + h.eps;
  p -= h.lr / (1.0 - std::pow(h.beta1, t)) * m / denom;
  return {p, m, v};
}

// |got - want| within one bf16 ulp of want (plus f32 rounding of the math).
void ExpectWithinBf16Ulp(double got, double want, const char* what, int i) {
  double lo = 0, hi = 0;
  Neighbours(want, &lo, &hi);
  const double ulp = std::max(std::fabs(hi - lo), std::fabs(want) * 0x1p-8);
  EXPECT_LE(std::fabs(got - want), ulp * (1 + 1e-4) + std::fabs(want) * 1e-6) << what << "[" << i << "]";
}

struct MixedCase {
  bool p16, s16;
  bool g16 = false;  // bf16 grads (train.gradients)
};
std::vector<MixedCase> MixedCases() {
  return {{false, true}, {true, false}, {true, true}, {false, false, true}, {false, true, true}, {true, true, true}};
}
std::string MixedCaseName(const ::testing::TestParamInfo<MixedCase>& info) {
  return std::string(info.param.p16 ? "Bf16Params" : "F32Params") + (info.param.s16 ? "Bf16State" : "F32State") +
         (info.param.g16 ? "Bf16Grads" : "");
}

class AdamWMixedCpu : public ::testing::TestWithParam<MixedCase> {};

TEST_P(AdamWMixedCpu, OneStepAgainstF64Reference) {
  const MixedCase mc = GetParam();
  constexpr int n = 4096;
  std::mt19937 rng(11);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  std::vector<float> p(n), g(n), m(n), v(n), scale = {0.5f};
  for (int i = 0; i < n; ++i) {
    // bf16-representable inputs, so the f64 reference starts from exactly what the kernel reads.
    p[i] = Bf16BitsToF32(RoundBf16Rne(dist(rng)));
    g[i] = mc.g16 ? Bf16BitsToF32(RoundBf16Rne(dist(rng))) : dist(rng);
    m[i] = Bf16BitsToF32(RoundBf16Rne(0.1f * dist(rng)));
    v[i] = Bf16BitsToF32(RoundBf16Rne(0.01f * std::fabs(dist(rng))));
  }
  AdamWHyper h;
  h.lr = 1e-2;
  h.weight_decay = 0.1;
  h.step = 3;
  h.sr_seed = 42;
  std::vector<Bf16> p16 = ToBf16(p), g16 = ToBf16(g), m16 = ToBf16(m), v16 = ToBf16(v);
  std::vector<float> pf = p, mf = m, vf = v;
  auto ctx = CpuContext();
  Tensor tp = mc.p16 ? HostTensor(p16, DType::kBF16) : HostTensor(pf, DType::kF32);
  Tensor tm = mc.s16 ? HostTensor(m16, DType::kBF16) : HostTensor(mf, DType::kF32);
  Tensor tv = mc.s16 ? HostTensor(v16, DType::kBF16) : HostTensor(vf, DType::kF32);
  Tensor ts = HostTensor(scale, DType::kF32);
  ASSERT_TRUE(
      AdamWUpdate(*ctx, h, &tp, mc.g16 ? HostTensor(g16, DType::kBF16) : HostTensor(g, DType::kF32), &tm, &tv, &ts)
          .ok());
  for (int i = 0; i < n; ++i) {
    const Ref r = AdamWF64(p[i], g[i], m[i], v[i], h, scale[0]);
    const double gp = mc.p16 ? Bf16BitsToF32(p16[i]) : pf[i];
    const double gm = mc.s16 ? Bf16BitsToF32(m16[i]) : mf[i];
    const double gv = mc.s16 ? Bf16BitsToF32(v16[i]) : vf[i];
    if (mc.p16) {
      ExpectWithinBf16Ulp(gp, r.p, "params", i);
    } else {
      EXPECT_NEAR(gp, r.p, 1e-6) << i;
    }
    if (mc.s16) {
      ExpectWithinBf16Ulp(gm, r.m, "exp_avg", i);
      ExpectWithinBf16Ulp(gv, r.v, "exp_avg_sq", i);
    } else {
      EXPECT_NEAR(gm, r.m, 1e-7) << i;
      EXPECT_NEAR(gv, r.v, 1e-8) << i;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Storage, AdamWMixedCpu, ::testing::ValuesIn(MixedCases()), MixedCaseName);

TEST(AdamWMixedCpuSr, SubUlpUpdatesOfBf16ParamsAreUnbiased) {
  // Every element starts at p0 = 1 with the same gradient and state; the step (1e-3) is a quarter of bf16's spacing
  // below 1 (2^-8): round-to-nearest would leave every weight at 1. The elements draw independent
  // rounding bits (their indices), so their mean estimates E[round(p)] = the exact update.
  constexpr int n = 1 << 16;
  std::vector<Bf16> p(n, RoundBf16Rne(1.0f));
  std::vector<float> g(n, 0.5f), m(n, 0.0f), v(n, 0.0f);
  AdamWHyper h;
  h.lr = 1e-3;
  h.weight_decay = 0.0;
  h.step = 1;
  h.sr_seed = 2024;
  auto ctx = CpuContext();
  Tensor tp = HostTensor(p, DType::kBF16), tm = HostTensor(m, DType::kF32), tv = HostTensor(v, DType::kF32);
  ASSERT_TRUE(AdamWUpdate(*ctx, h, &tp, HostTensor(g, DType::kF32), &tm, &tv).ok());
  const double want = AdamWF64(1.0, 0.5, 0.0, 0.0, h, 1.0).p;  // 1 - 1e-3 / (1 + 2e-8)
  double sum = 0;
  int moved = 0;
  for (Bf16 b : p) {
    const double x = Bf16BitsToF32(b);
    EXPECT_TRUE(x == 1.0 || x == 1.0 - 0x1p-8) << x;  // below 1 the bf16 spacing is 2^-8
    sum += x;
    moved += x != 1.0;
  }
  const double mean = sum / n;
  // Each value is one of two 2^-8 apart: the standard deviation of the mean is at most 2^-9 / sqrt(n).
  const double sigma = 0x1p-9 / std::sqrt(static_cast<double>(n));
  EXPECT_NEAR(mean, want, 5 * sigma) << "moved " << moved << " of " << n;
  EXPECT_GT(1.0 - mean, 20 * sigma);  // round-to-nearest would give exactly 1
}

TEST(AdamWMixedCpuSr, DeterministicPerSeedAndStep) {
  constexpr int n = 2048;
  std::mt19937 rng(3);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  std::vector<float> g(n);
  std::vector<Bf16> p0(n);
  for (int i = 0; i < n; ++i) {
    g[i] = dist(rng);
    p0[i] = RoundBf16Rne(dist(rng));
  }
  auto run = [&](uint64_t seed, int64_t step) {
    std::vector<Bf16> p = p0, m(n, 0), v(n, 0);
    AdamWHyper h;
    h.lr = 1e-3;
    h.step = step;
    h.sr_seed = seed;
    auto ctx = CpuContext();
    Tensor tp = HostTensor(p, DType::kBF16), tm = HostTensor(m, DType::kBF16), tv = HostTensor(v, DType::kBF16);
    EXPECT_TRUE(AdamWUpdate(*ctx, h, &tp, HostTensor(g, DType::kF32), &tm, &tv).ok());
    p.insert(p.end(), m.begin(), m.end());
    p.insert(p.end(), v.begin(), v.end());
    return p;
  };
  EXPECT_EQ(run(5, 1), run(5, 1));
  EXPECT_NE(run(5, 1), run(6, 1));
  EXPECT_NE(run(5, 1), run(5, 2));
}

TEST(AdamWMixedCpuSr, RangesDrawTheBitsOfTheWholeBuffer) {
  // Two halves updated with sr_offset equal one update of the whole buffer (ZeRO-style cuts).
  constexpr int n = 1000;
  std::vector<float> g(n);
  for (int i = 0; i < n; ++i) g[i] = std::sin(0.1 * i);
  std::vector<Bf16> whole(n, RoundBf16Rne(0.3f)), parts = whole, zm(n, 0), zv(n, 0), zm2 = zm, zv2 = zv;
  AdamWHyper h;
  h.lr = 1e-3;
  h.sr_seed = 77;
  AdamWUpdateMixedCpu(whole.data(), g.data(), zm.data(), zv.data(), n, h, nullptr);
  AdamWUpdateMixedCpu(parts.data(), g.data(), zm2.data(), zv2.data(), 400, h, nullptr);
  h.sr_offset = 400;
  AdamWUpdateMixedCpu(parts.data() + 400, g.data() + 400, zm2.data() + 400, zv2.data() + 400, n - 400, h, nullptr);
  EXPECT_EQ(whole, parts);
  EXPECT_EQ(zm, zm2);
  EXPECT_EQ(zv, zv2);
}

TEST(AdamWMixedCpuSr, SkipLeavesEverything) {
  std::vector<Bf16> p = {RoundBf16Rne(1.0f)}, m = {0}, v = {0};
  std::vector<float> g = {1.0f}, skip = {1.0f};
  auto ctx = CpuContext();
  AdamWHyper h;
  h.lr = 0.1;
  Tensor tp = HostTensor(p, DType::kBF16), tm = HostTensor(m, DType::kBF16), tv = HostTensor(v, DType::kBF16);
  Tensor tskip = HostTensor(skip, DType::kF32);
  ASSERT_TRUE(AdamWUpdate(*ctx, h, &tp, HostTensor(g, DType::kF32), &tm, &tv, nullptr, &tskip).ok());
  EXPECT_EQ(p[0], RoundBf16Rne(1.0f));
  EXPECT_EQ(m[0], 0);
}

TEST(AdamWMixed, RejectsMismatchedStorage) {
  auto ctx = CpuContext();
  std::vector<Bf16> p16(4), m16(4);
  std::vector<float> g(4), v(4);
  std::vector<double> pd(4), gd(4), md(4), vd(4);
  AdamWHyper h;
  Tensor tp = HostTensor(p16, DType::kBF16), tm16 = HostTensor(m16, DType::kBF16), tv = HostTensor(v, DType::kF32);
  // exp_avg bf16, exp_avg_sq f32: both must share one dtype.
  Status st = AdamWUpdate(*ctx, h, &tp, HostTensor(g, DType::kF32), &tm16, &tv);
  EXPECT_EQ(st.code(), Status::Code::kInvalidArgument);
  EXPECT_NE(st.message().find("must both be f32 or both bf16"), std::string::npos) << st.ToString();
  // bf16 params need f32 or bf16 grads, not f64.
  Tensor tm = HostTensor(v, DType::kF32), tv2 = HostTensor(g, DType::kF32);
  st = AdamWUpdate(*ctx, h, &tp, HostTensor(gd, DType::kF64), &tm, &tv2);
  EXPECT_EQ(st.code(), Status::Code::kInvalidArgument);
  // f64 params with bf16 state.
  Tensor tpd = HostTensor(pd, DType::kF64), tv16 = HostTensor(p16, DType::kBF16);
  st = AdamWUpdate(*ctx, h, &tpd, HostTensor(gd, DType::kF64), &tm16, &tv16);
  EXPECT_EQ(st.code(), Status::Code::kInvalidArgument);
}

// SplitF32 / JoinF32 (split masters): any f32 comes back bit for bit (a NaN as a NaN), and the high half is the bf16
// nearest, ties away from zero (round to nearest even but at ties), NaN, inf, -0, the largest finite and denormals
// included.
TEST(Bf16Round, SplitHalvesJoinBackExactly) {
  std::vector<uint32_t> bits = {0x00000000u, 0x80000000u, 0x7f800000u, 0xff800000u, 0x7fc00000u,
                                0x7f808001u, 0x7f7fffffu, 0xff7fffffu, 0x00000001u, 0x8000ffffu,
                                0x3f808000u, 0x3f818000u, 0xbf808000u, 0x3f807fffu, 0x3f80ffffu};
  std::mt19937 rng(5);
  for (int i = 0; i < 100000; ++i) bits.push_back(static_cast<uint32_t>(rng()));
  for (const uint32_t u : bits) {
    float x;
    std::memcpy(&x, &u, sizeof(x));
    uint16_t hi = 0, lo = 0;
    SplitF32(x, &hi, &lo);
    const float back = JoinF32(hi, lo);
    if (std::isnan(x)) {
      EXPECT_TRUE(std::isnan(back) && std::isnan(Bf16BitsToF32(hi))) << std::hex << u;
      continue;
    }
    ASSERT_EQ(F32Bits(back), u) << std::hex << u;
    ASSERT_EQ(lo, u & 0xffffu) << std::hex << u;
    const bool tie = (u & 0xffffu) == 0x8000u;
    if (!tie && (u & 0x7fffffffu) < 0x7f7f8000u) ASSERT_EQ(hi, RoundBf16Rne(x)) << std::hex << u;  // not at ties
  }
  uint16_t hi = 0, lo = 0;
  SplitF32(1.0f + 0x1p-8f, &hi, &lo);  // a tie: away from zero (1 + 2^-7), where RNE gives 1
  EXPECT_EQ(hi, 0x3f81);
  EXPECT_EQ(RoundBf16Rne(1.0f + 0x1p-8f), 0x3f80);
}

// Split masters: AdamW on bf16 high halves with master_low is the f32-params AdamW's value bit for bit, step after
// step (the halves join to it; the high half is its bf16 nearest), with f32 and bf16 state and grads.
TEST(AdamWMixedCpu, SplitMastersAreTheF32UpdateBitForBit) {
  auto ctx = CpuContext();
  constexpr int64_t n = 4099;
  for (const bool s16 : {false, true}) {
    for (const bool g16 : {false, true}) {
      SCOPED_TRACE(std::string(s16 ? "bf16" : "f32") + " state, " + (g16 ? "bf16" : "f32") + " grads");
      std::mt19937 rng(9);
      std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
      std::vector<float> pf(n), mf(n, 0.0f), vf(n, 0.0f), mf2(n, 0.0f), vf2(n, 0.0f);
      for (auto& x : pf) x = dist(rng);
      std::vector<Bf16> hi(n), lo(n), m16(n, 0), v16(n, 0), m16b(n, 0), v16b(n, 0);
      for (int64_t i = 0; i < n; ++i) SplitF32(pf[static_cast<size_t>(i)], &hi[i], &lo[i]);
      Tensor tp = HostTensor(pf, DType::kF32), thi = HostTensor(hi, DType::kBF16), tlo = HostTensor(lo, DType::kBF16);
      Tensor tm = s16 ? HostTensor(m16, DType::kBF16) : HostTensor(mf, DType::kF32);
      Tensor tv = s16 ? HostTensor(v16, DType::kBF16) : HostTensor(vf, DType::kF32);
      Tensor tm2 = s16 ? HostTensor(m16b, DType::kBF16) : HostTensor(mf2, DType::kF32);
      Tensor tv2 = s16 ? HostTensor(v16b, DType::kBF16) : HostTensor(vf2, DType::kF32);
      AdamWHyper h;
      h.weight_decay = 0.1;
      h.sr_seed = 3;
      for (int s = 1; s <= 4; ++s) {
        std::vector<float> g(n);
        for (auto& x : g) x = 0.5f * dist(rng);
        std::vector<Bf16> gb = ToBf16(g);
        h.lr = 1e-3 * s;
        h.step = s;
        Tensor tg = g16 ? HostTensor(gb, DType::kBF16) : HostTensor(g, DType::kF32);
        ASSERT_TRUE(AdamWUpdate(*ctx, h, &tp, tg, &tm, &tv).ok());
        const Status st = AdamWUpdate(*ctx, h, &thi, tg, &tm2, &tv2, nullptr, nullptr, nullptr, &tlo);
        ASSERT_TRUE(st.ok()) << st.ToString();
      }
      int64_t differ = 0;
      for (int64_t i = 0; i < n; ++i) {
        const float want = pf[static_cast<size_t>(i)];
        differ += F32Bits(JoinF32(hi[i], lo[i])) != F32Bits(want);
        uint16_t want_hi = 0, want_lo = 0;
        SplitF32(want, &want_hi, &want_lo);
        differ += hi[i] != want_hi;
      }
      EXPECT_EQ(differ, 0);
      if (s16) {
        EXPECT_EQ(m16b, m16);  // the state saw the same updates (same stochastic bits)
        EXPECT_EQ(v16b, v16);
      } else {
        EXPECT_EQ(mf2, mf);
        EXPECT_EQ(vf2, vf);
      }
    }
  }
  // master_low takes bf16 params of its numel.
  std::vector<float> p(4), g(4), m(4), v(4);
  std::vector<Bf16> lo(4), lo3(3);
  Tensor tp = HostTensor(p, DType::kF32), tg = HostTensor(g, DType::kF32), tm = HostTensor(m, DType::kF32),
         tv = HostTensor(v, DType::kF32), tlo = HostTensor(lo, DType::kBF16);
  AdamWHyper h;
  EXPECT_EQ(AdamWUpdate(*ctx, h, &tp, tg, &tm, &tv, nullptr, nullptr, nullptr, &tlo).code(),
            Status::Code::kInvalidArgument);
  std::vector<Bf16> p16(4);
  Tensor tp16 = HostTensor(p16, DType::kBF16), tlo3 = HostTensor(lo3, DType::kBF16);
  EXPECT_EQ(AdamWUpdate(*ctx, h, &tp16, tg, &tm, &tv, nullptr, nullptr, nullptr, &tlo3).code(),
            Status::Code::kInvalidArgument);
}

// ---- CUDA against the CPU reference, bit for bit ------------------------------------------------

class AdamWMixedCuda : public ::testing::TestWithParam<MixedCase> {
 protected:
  void SetUp() override {
    if (::dtrain::CudaDeviceCount() == 0) GTEST_SKIP() << "no CUDA device: the CUDA mixed AdamW needs a GPU";
    ASSERT_TRUE(DeviceContext::CreateCuda(0, &gpu_).ok());
  }
  template <typename T>
  Tensor ToDevice(std::vector<T>& host, DType dtype) {
    Tensor d;
    EXPECT_TRUE(Tensor::Empty({static_cast<int64_t>(host.size())}, dtype, gpu_->allocator(), &d).ok());
    EXPECT_TRUE(d.CopyFrom(HostTensor(host, dtype), gpu_->stream()).ok());
    return d;
  }
  template <typename T>
  std::vector<T> ToHost(const Tensor& d) {
    std::vector<T> host(d.numel());
    Tensor h = HostTensor(host, d.dtype());
    EXPECT_TRUE(h.CopyFrom(d, gpu_->stream()).ok());
    EXPECT_TRUE(gpu_->Synchronize().ok());
    return host;
  }
  std::unique_ptr<DeviceContext> gpu_;
};

TEST_P(AdamWMixedCuda, EqualsCpuReferenceBitForBit) {
  const MixedCase mc = GetParam();
  constexpr int64_t n = (1 << 17) + 5;
  std::mt19937 rng(21);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  std::vector<float> pf(n), mf(n, 0.0f), vf(n, 0.0f), scale = {0.3f};
  for (auto& x : pf) x = dist(rng);
  std::vector<Bf16> p16 = ToBf16(pf), m16(n, 0), v16(n, 0);
  Tensor dp = mc.p16 ? ToDevice(p16, DType::kBF16) : ToDevice(pf, DType::kF32);
  Tensor dm = mc.s16 ? ToDevice(m16, DType::kBF16) : ToDevice(mf, DType::kF32);
  Tensor dv = mc.s16 ? ToDevice(v16, DType::kBF16) : ToDevice(vf, DType::kF32);
  Tensor dscale = ToDevice(scale, DType::kF32);
  Tensor staged;
  ASSERT_TRUE(Tensor::Empty({static_cast<int64_t>(kStagedArgsBytes)}, DType::kU8, gpu_->allocator(), &staged).ok());
  AdamWHyper h;
  h.weight_decay = 0.1;
  h.sr_seed = 99;
  auto ctx = CpuContext();
  Tensor tp = mc.p16 ? HostTensor(p16, DType::kBF16) : HostTensor(pf, DType::kF32);
  Tensor tm = mc.s16 ? HostTensor(m16, DType::kBF16) : HostTensor(mf, DType::kF32);
  Tensor tv = mc.s16 ? HostTensor(v16, DType::kBF16) : HostTensor(vf, DType::kF32);
  Tensor ts = HostTensor(scale, DType::kF32);
  for (int s = 1; s <= 3; ++s) {
    std::vector<float> g(n);
    for (auto& x : g) x = 2.0f * dist(rng);
    std::vector<Bf16> g16 = ToBf16(g);
    h.lr = 1e-2 / s;
    h.step = s;
    const bool use_scale = s % 2 == 1;
    // Step 2 reads its constants from the staged buffer (the CUDA-graph path).
    const Tensor* st = nullptr;
    if (s == 2) {
      AdamWKernelArgs a = StagedArgsFor(h);
      Tensor host = Tensor::Wrap(&a, {static_cast<int64_t>(sizeof(a))}, DType::kU8, DeviceType::kCPU);
      Tensor dst;
      ASSERT_TRUE(staged.View(0, {static_cast<int64_t>(sizeof(a))}, &dst).ok());
      ASSERT_TRUE(dst.CopyFrom(host, gpu_->stream()).ok());
      ASSERT_TRUE(gpu_->Synchronize().ok());
      st = &staged;
    }
    Tensor dg = mc.g16 ? ToDevice(g16, DType::kBF16) : ToDevice(g, DType::kF32);
    Tensor tg = mc.g16 ? HostTensor(g16, DType::kBF16) : HostTensor(g, DType::kF32);
    ASSERT_TRUE(AdamWUpdate(*gpu_, h, &dp, dg, &dm, &dv, use_scale ? &dscale : nullptr, nullptr, st).ok());
    ASSERT_TRUE(AdamWUpdate(*ctx, h, &tp, tg, &tm, &tv, use_scale ? &ts : nullptr).ok());
  }
  if (mc.p16) {
    EXPECT_EQ(ToHost<Bf16>(dp), p16);
  } else {
    EXPECT_EQ(ToHost<float>(dp), pf);
  }
  if (mc.s16) {
    EXPECT_EQ(ToHost<Bf16>(dm), m16);
    EXPECT_EQ(ToHost<Bf16>(dv), v16);
  } else {
    EXPECT_EQ(ToHost<float>(dm), mf);
    EXPECT_EQ(ToHost<float>(dv), vf);
  }
}

INSTANTIATE_TEST_SUITE_P(Storage, AdamWMixedCuda, ::testing::ValuesIn(MixedCases()), MixedCaseName);

// Split masters on CUDA: the CPU reference's halves bit for bit (f32 and bf16 state), the staged path included.
TEST(AdamWMixedCudaSplit, EqualsCpuReferenceBitForBit) {
  if (::dtrain::CudaDeviceCount() == 0) GTEST_SKIP() << "no CUDA device: the CUDA mixed AdamW needs a GPU";
  std::unique_ptr<DeviceContext> gpu;
  ASSERT_TRUE(DeviceContext::CreateCuda(0, &gpu).ok());
  auto ctx = CpuContext();
  constexpr int64_t n = (1 << 16) + 3;
  for (const bool s16 : {false, true}) {
    SCOPED_TRACE(s16 ? "bf16 state" : "f32 state");
    std::mt19937 rng(13);
    std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
    std::vector<Bf16> hi(n), lo(n);
    for (int64_t i = 0; i < n; ++i) SplitF32(dist(rng), &hi[i], &lo[i]);
    std::vector<float> mf(n, 0.0f), vf(n, 0.0f);
    std::vector<Bf16> m16(n, 0), v16(n, 0);
    const DType sd = s16 ? DType::kBF16 : DType::kF32;
    Tensor thi = HostTensor(hi, DType::kBF16), tlo = HostTensor(lo, DType::kBF16);
    Tensor tm = s16 ? HostTensor(m16, sd) : HostTensor(mf, sd), tv = s16 ? HostTensor(v16, sd) : HostTensor(vf, sd);
    Tensor dhi, dlo, dm, dv, staged;
    for (auto [d, t] : {std::pair<Tensor*, Tensor*>{&dhi, &thi}, {&dlo, &tlo}, {&dm, &tm}, {&dv, &tv}}) {
      ASSERT_TRUE(Tensor::Empty({n}, t->dtype(), gpu->allocator(), d).ok());
      ASSERT_TRUE(d->CopyFrom(*t, gpu->stream()).ok());
    }
    ASSERT_TRUE(Tensor::Empty({static_cast<int64_t>(kStagedArgsBytes)}, DType::kU8, gpu->allocator(), &staged).ok());
    AdamWHyper h;
    h.weight_decay = 0.1;
    for (int s = 1; s <= 3; ++s) {
      std::vector<float> g(n);
      for (auto& x : g) x = dist(rng);
      h.lr = 1e-3 * s;
      h.step = s;
      Tensor tg = HostTensor(g, DType::kF32), dg;
      ASSERT_TRUE(Tensor::Empty({n}, DType::kF32, gpu->allocator(), &dg).ok());
      ASSERT_TRUE(dg.CopyFrom(tg, gpu->stream()).ok());
      const Tensor* st = nullptr;
      AdamWKernelArgs a = StagedArgsFor(h);
      if (s == 2) {  // the CUDA-graph path
        Tensor host = Tensor::Wrap(&a, {static_cast<int64_t>(sizeof(a))}, DType::kU8, DeviceType::kCPU), dst;
        ASSERT_TRUE(staged.View(0, {static_cast<int64_t>(sizeof(a))}, &dst).ok());
        ASSERT_TRUE(dst.CopyFrom(host, gpu->stream()).ok());
        st = &staged;
      }
      ASSERT_TRUE(AdamWUpdate(*gpu, h, &dhi, dg, &dm, &dv, nullptr, nullptr, st, &dlo).ok());
      ASSERT_TRUE(gpu->Synchronize().ok());
      ASSERT_TRUE(AdamWUpdate(*ctx, h, &thi, tg, &tm, &tv, nullptr, nullptr, nullptr, &tlo).ok());
    }
    std::vector<Bf16> got_hi(n), got_lo(n);
    Tensor ghi = HostTensor(got_hi, DType::kBF16), glo = HostTensor(got_lo, DType::kBF16);
    ASSERT_TRUE(ghi.CopyFrom(dhi, gpu->stream()).ok());
    ASSERT_TRUE(glo.CopyFrom(dlo, gpu->stream()).ok());
    ASSERT_TRUE(gpu->Synchronize().ok());
    EXPECT_EQ(got_hi, hi);
    EXPECT_EQ(got_lo, lo);
  }
}

}  // namespace
}  // namespace dtrain::ops
