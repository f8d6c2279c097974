// Tests of kernels/lion_update: the Lion update against hand-computed values over three steps (CPU, f64 and f32),
// the gradient scale and skip flag, NaN and zero handling, argument checks, and CPU-vs-CUDA agreement (bitwise: the
// kernel does not contract into FMAs), also with the constants read from a staged device buffer.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <memory>
#include <random>
#include <vector>

#include "core/device_context.h"
#include "core/tensor.h"
#include "kernels/lion_update.h"
#include "kernels/optim_update.h"

namespace dtrain::ops {
namespace {

std::unique_ptr<DeviceContext> CpuContext() {
  std::unique_ptr<DeviceContext> ctx;
  EXPECT_TRUE(DeviceContext::CreateCpu(&ctx).ok());
  return ctx;
}

template <typename T>
Tensor HostTensor(std::vector<T>& v) {
  return Tensor::Wrap(v.data(), {static_cast<int64_t>(v.size())}, DTypeOf<T>::value, DeviceType::kCPU);
}

LionHyper Hyper(double lr, double wd) {
  LionHyper h;  // beta1 0.9, beta2 0.99: the paper's defaults
  h.lr = lr;
  h.weight_decay = wd;
  return h;
}

// Three steps with g1, g2 = -0.05 g1, g3 = -g1 (beta1 0.9, beta2 0.99, m0 = 0), per element with s = sign(g1):
//   step 1: c = 0.1 g1 (sign s),                     m1 = 0.01 g1
//   step 2: c = 0.009 g1 - 0.005 g1 = 0.004 g1 (s),   m2 = 0.0099 g1 - 0.0005 g1 = 0.0094 g1
//   step 3: c = 0.00846 g1 - 0.1 g1 = -0.09154 g1 (-s), m3 = 0.009306 g1 - 0.01 g1 = -0.000694 g1
// and p_{k+1} = (1 - lr wd) p_k - lr sign(c): d = 1 - lr wd, p1 = d p0 - lr s, p2 = d p1 - lr s, p3 = d p2 + lr s.
// The third element has g1 = 0: c = 0 every step, so it only decays and m stays 0.
template <typename T>
void CheckThreeSteps(double tol) {
  const double lr = 0.1, wd = 0.2, d = 1 - lr * wd;
  const std::vector<double> p0 = {1.0, -2.0, 0.5}, g1 = {0.5, -3.0, 0.0};
  std::vector<T> p(p0.begin(), p0.end()), m(3, T(0)), g(3);
  const double factors[] = {1.0, -0.05, -1.0};
  const double m_want[] = {0.01, 0.0094, -0.000694};
  const double sign_factor[] = {1.0, 1.0, -1.0};
  std::vector<double> want = p0;
  for (int s = 0; s < 3; ++s) {
    for (int i = 0; i < 3; ++i) g[i] = static_cast<T>(factors[s] * g1[i]);
    LionUpdateCpu(p.data(), g.data(), m.data(), 3, Hyper(lr, wd), static_cast<const T*>(nullptr));
    for (int i = 0; i < 3; ++i) {
      const double sg = g1[i] > 0 ? 1.0 : (g1[i] < 0 ? -1.0 : 0.0);
      want[i] = d * want[i] - lr * sign_factor[s] * sg;
      EXPECT_NEAR(p[i], want[i], tol) << "step " << s + 1 << " param " << i;
      EXPECT_NEAR(m[i], m_want[s] * g1[i], tol) << "step " << s + 1 << " exp_avg " << i;
    }
  }
  // The recursion above, closed, for the first element (s = +1) and the third (s = 0).
  EXPECT_NEAR(p[0], d * (d * (d * 1.0 - lr) - lr) + lr, tol);
  EXPECT_NEAR(p[2], d * d * d * 0.5, tol);
}

TEST(LionUpdateCpu, ThreeStepsByHandF64) { CheckThreeSteps<double>(1e-12); }
TEST(LionUpdateCpu, ThreeStepsByHandF32) { CheckThreeSteps<float>(1e-6); }

TEST(LionUpdateCpu, ScaleMovesTheMomentumNotTheStepAndSkipDoesNothing) {
  // grad 4 scaled by 0.5 * 0.25: g = 0.5. The step is lr whatever the scale; m = 0.01 * 0.5.
  LionHyper h = Hyper(0.01, 0.0);
  h.grad_scale = 0.5;
  double p = 1.0, g = 4.0, m = 0.0, scale = 0.25, skip = 1.0, no_skip = 0.0;
  LionUpdateCpu(&p, &g, &m, 1, h, &scale, &skip);
  EXPECT_EQ(p, 1.0);
  EXPECT_EQ(m, 0.0);
  LionUpdateCpu(&p, &g, &m, 1, h, &scale, &no_skip);
  EXPECT_DOUBLE_EQ(p, 0.99);
  EXPECT_NEAR(m, 0.005, 1e-15);  // (1 - 0.99) is 0.01 + 9e-18 in f64
}

TEST(LionUpdateCpu, NanGradientPoisonsTheParameter) {
  // torch.sign(NaN) is NaN: a NaN gradient must show in the parameters (and so in the loss), not vanish.
  float p = 1.0f, g = std::nanf(""), m = 0.0f;
  LionUpdateCpu(&p, &g, &m, 1, Hyper(0.1, 0.0), static_cast<const float*>(nullptr));
  EXPECT_TRUE(std::isnan(p));
  EXPECT_TRUE(std::isnan(m));
}

TEST(LionUpdate, TensorLevelMatchesTheReferenceAndChecksArguments) {
  auto ctx = CpuContext();
  std::vector<float> p = {1.0f, -1.0f}, g = {0.3f, 0.2f}, m = {-0.5f, 0.1f}, scale = {2.0f};
  std::vector<float> rp = p, rm = m;
  Tensor tp = HostTensor(p), tg = HostTensor(g), tm = HostTensor(m), ts = HostTensor(scale);
  const LionHyper h = Hyper(0.05, 0.1);
  ASSERT_TRUE(LionUpdate(*ctx, h, &tp, tg, &tm, &ts).ok());
  LionUpdateCpu(rp.data(), g.data(), rm.data(), 2, h, scale.data());
  EXPECT_EQ(p, rp);
  EXPECT_EQ(m, rm);
  // c = 0.9 * -0.5 + 0.1 * 0.6 < 0 for the first element: it moves up despite a positive gradient.
  EXPECT_FLOAT_EQ(p[0], 1.0f * (1.0f - 0.005f) + 0.05f);

  std::vector<float> short_m(1, 0.0f), pair(2, 0.0f);
  std::vector<double> f64(2, 0.0);
  Tensor tshort = HostTensor(short_m), tpair = HostTensor(pair), tf64 = HostTensor(f64);
  const auto kBad = Status::Code::kInvalidArgument;
  EXPECT_EQ(LionUpdate(*ctx, h, &tp, tg, &tshort).code(), kBad);
  EXPECT_EQ(LionUpdate(*ctx, h, &tp, tg, nullptr).code(), kBad);
  EXPECT_EQ(LionUpdate(*ctx, h, &tp, tf64, &tm).code(), kBad);        // dtype mismatch
  EXPECT_EQ(LionUpdate(*ctx, h, &tp, tg, &tm, &tpair).code(), kBad);  // scale must be one element
  EXPECT_EQ(LionUpdate(*ctx, h, &tp, tg, &tm, nullptr, &tpair).code(), kBad);
}

TEST(LionUpdate, StagedArgsAreTheRoundedHyperParameters) {
  LionHyper h = Hyper(3e-4, 0.1);
  h.beta2 = 0.98;
  h.grad_scale = 0.5;
  const LionKernelArgs a = StagedArgsFor(h);
  EXPECT_EQ(a.lr, 3e-4f);
  EXPECT_EQ(a.decay, static_cast<float>(1.0 - 3e-5));
  EXPECT_EQ(a.beta1, 0.9f);
  EXPECT_EQ(a.one_minus_b1, static_cast<float>(1.0 - 0.9));
  EXPECT_EQ(a.beta2, 0.98f);
  EXPECT_EQ(a.one_minus_b2, static_cast<float>(1.0 - 0.98));
  EXPECT_EQ(a.grad_scale, 0.5f);
  static_assert(sizeof(LionKernelArgs) <= kStagedArgsBytes);
}

// ---- CUDA vs CPU -------------------------------------------------------------------------------

class LionUpdateCudaTest : public ::testing::Test {
 protected:
  static constexpr int64_t kN = (1 << 17) + 5;
  void SetUp() override {
    if (CudaDeviceCount() == 0) GTEST_SKIP() << "no CUDA device: CPU-vs-CUDA Lion checks need a GPU";
    ASSERT_TRUE(DeviceContext::CreateCuda(0, &gpu_).ok());
  }
  static std::vector<float> Random(float lo, float hi, uint32_t seed) {
    std::mt19937 rng(seed);
    std::uniform_real_distribution<float> dist(lo, hi);
    std::vector<float> v(kN);
    for (auto& x : v) x = dist(rng);
    return v;
  }
  Tensor ToDevice(const void* host, int64_t bytes) {
    Tensor d;
    EXPECT_TRUE(Tensor::Empty({bytes}, DType::kU8, gpu_->allocator(), &d).ok());
    Tensor h = Tensor::Wrap(const_cast<void*>(host), {bytes}, DType::kU8, DeviceType::kCPU);
    EXPECT_TRUE(d.CopyFrom(h, gpu_->stream()).ok());
    return d;
  }
  Tensor ToDevice(std::vector<float>& host) {
    Tensor d;
    EXPECT_TRUE(Tensor::Empty({static_cast<int64_t>(host.size())}, DType::kF32, gpu_->allocator(), &d).ok());
    EXPECT_TRUE(d.CopyFrom(HostTensor(host), gpu_->stream()).ok());
    return d;
  }
  std::vector<float> ToHost(const Tensor& d) {
    std::vector<float> host(d.numel());
    Tensor h = HostTensor(host);
    EXPECT_TRUE(h.CopyFrom(d, gpu_->stream()).ok());
    EXPECT_TRUE(gpu_->Synchronize().ok());
    return host;
  }
  static int CountDiffs(const std::vector<float>& gpu, const std::vector<float>& cpu, const char* what) {
    int bad = 0;
    for (size_t i = 0; i < cpu.size(); ++i) {
      if (std::memcmp(&gpu[i], &cpu[i], sizeof(float)) != 0 && ++bad <= 5) {
        ADD_FAILURE() << what << "[" << i << "]: gpu " << gpu[i] << " cpu " << cpu[i];
      }
    }
    return bad;
  }
  std::unique_ptr<DeviceContext> gpu_;
};

TEST_F(LionUpdateCudaTest, MatchesCpuBitwise) {
  std::vector<float> p = Random(-1, 1, 1), m(kN, 0.0f), scale = {0.7f};
  Tensor dp = ToDevice(p), dm = ToDevice(m), dscale = ToDevice(scale);
  LionHyper h = Hyper(0.0, 0.1);
  h.grad_scale = 0.5;
  for (int s = 1; s <= 4; ++s) {
    std::vector<float> g = Random(-2, 2, 100 + s);
    h.lr = 1e-3 / s;
    const Tensor* sc = s % 2 ? &dscale : nullptr;  // alternate between the device scale and none
    ASSERT_TRUE(LionUpdate(*gpu_, h, &dp, ToDevice(g), &dm, sc).ok());
    LionUpdateCpu(p.data(), g.data(), m.data(), kN, h, s % 2 ? scale.data() : nullptr);
  }
  EXPECT_EQ(CountDiffs(ToHost(dp), p, "params"), 0);
  EXPECT_EQ(CountDiffs(ToHost(dm), m, "exp_avg"), 0);
}

// With `staged`, the kernel takes its constants from device memory, not from `h` (a replayed CUDA graph's case).
TEST_F(LionUpdateCudaTest, ReadsStagedConstants) {
  std::vector<float> p = Random(-1, 1, 2), m = Random(-0.1f, 0.1f, 3), g = Random(-2, 2, 4);
  Tensor dp = ToDevice(p), dm = ToDevice(m), dg = ToDevice(g);
  const LionHyper real = Hyper(2e-3, 0.05);
  const LionKernelArgs args = StagedArgsFor(real);
  unsigned char buf[kStagedArgsBytes] = {};
  std::memcpy(buf, &args, sizeof(args));
  Tensor staged = ToDevice(buf, kStagedArgsBytes);
  ASSERT_TRUE(LionUpdate(*gpu_, Hyper(0.0, 0.0), &dp, dg, &dm, nullptr, nullptr, &staged).ok());  // lr 0 ignored
  LionUpdateCpu(p.data(), g.data(), m.data(), kN, real, static_cast<const float*>(nullptr));
  EXPECT_EQ(CountDiffs(ToHost(dp), p, "params"), 0);
  EXPECT_EQ(CountDiffs(ToHost(dm), m, "exp_avg"), 0);
}

TEST_F(LionUpdateCudaTest, SkipFlagOnTheDeviceLeavesEverythingUnchanged) {
  std::vector<float> p = Random(-1, 1, 5), m = Random(-0.1f, 0.1f, 6), g = Random(-2, 2, 7), skip = {1.0f};
  Tensor dp = ToDevice(p), dm = ToDevice(m), dskip = ToDevice(skip);
  ASSERT_TRUE(LionUpdate(*gpu_, Hyper(0.1, 0.1), &dp, ToDevice(g), &dm, nullptr, &dskip).ok());
  EXPECT_EQ(ToHost(dp), p);
  EXPECT_EQ(ToHost(dm), m);
}

}  // namespace
}  // namespace dtrain::ops
