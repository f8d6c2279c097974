// Tests of kernels/optim_update: SGD-momentum and AdamW updates against hand-computed values
// (CPU), the device clip coefficient, argument checks, and CPU-vs-CUDA agreement.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <random>
#include <vector>

#include "core/device_context.h"
#include "core/tensor.h"
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

// ---- SGD ---------------------------------------------------------------------------------------

TEST(SgdUpdateCpu, MomentumSequence) {
  // p0 = 1, constant g = 0.5, lr 0.1, momentum 0.9:
  // buf = 0.5, 0.95, 1.355 and p = 0.95, 0.855, 0.7195.
  SgdHyper h;
  h.lr = 0.1;
  h.momentum = 0.9;
  double p = 1.0, g = 0.5, buf = 0.0;
  const double want_buf[] = {0.5, 0.95, 1.355};
  const double want_p[] = {0.95, 0.855, 0.7195};
  for (int s = 0; s < 3; ++s) {
    SgdUpdateCpu(&p, &g, &buf, 1, h, static_cast<const double*>(nullptr));
    EXPECT_NEAR(buf, want_buf[s], 1e-12) << "step " << s;
    EXPECT_NEAR(p, want_p[s], 1e-12) << "step " << s;
  }
}

TEST(SgdUpdateCpu, NesterovSequence) {
  // Same setting with nesterov: d = g + 0.9 * buf = 0.95, 1.355, 1.7195; p = 0.905, 0.7695, 0.59755.
  SgdHyper h;
  h.lr = 0.1;
  h.momentum = 0.9;
  h.nesterov = true;
  float p = 1.0f, g = 0.5f, buf = 0.0f;
  const float want_p[] = {0.905f, 0.7695f, 0.59755f};
  for (int s = 0; s < 3; ++s) {
    SgdUpdateCpu(&p, &g, &buf, 1, h, static_cast<const float*>(nullptr));
    EXPECT_NEAR(p, want_p[s], 1e-6f) << "step " << s;
  }
}

TEST(SgdUpdateCpu, CoupledWeightDecayWithoutMomentum) {
  // g' = g + wd * p = 0.5 + 0.1 * 2 = 0.7; p1 = 2 - 0.1 * 0.7 = 1.93; buf holds g'.
  SgdHyper h;
  h.lr = 0.1;
  h.weight_decay = 0.1;
  double p = 2.0, g = 0.5, buf = 0.0;
  SgdUpdateCpu(&p, &g, &buf, 1, h, static_cast<const double*>(nullptr));
  EXPECT_NEAR(p, 1.93, 1e-12);
  EXPECT_NEAR(buf, 0.7, 1e-12);
}

TEST(SgdUpdate, GradScaleAndDeviceScaleMultiply) {
  // Effective gradient = g * 0.5 * 0.25 (exact in binary): p = -lr * g_eff with lr 1, p0 = 0.
  auto ctx = CpuContext();
  std::vector<float> p = {0.0f, 0.0f}, g = {2.0f, -4.0f}, buf = {0.0f, 0.0f}, scale = {0.25f};
  SgdHyper h;
  h.lr = 1.0;
  h.grad_scale = 0.5;
  Tensor tp = HostTensor(p), tb = HostTensor(buf), ts = HostTensor(scale);
  ASSERT_TRUE(SgdUpdate(*ctx, h, &tp, HostTensor(g), &tb, &ts).ok());
  EXPECT_EQ(p, (std::vector<float>{-0.25f, 0.5f}));
  EXPECT_EQ(buf, (std::vector<float>{0.25f, -0.5f}));
  EXPECT_EQ(g, (std::vector<float>{2.0f, -4.0f}));  // grads untouched
}

// ---- AdamW -------------------------------------------------------------------------------------

TEST(AdamWUpdateCpu, FirstStepMovesByLrTimesSignPlusDecay) {
  // Step 1: mhat = g, vhat = g^2, so p1 = p0 (1 - lr wd) - lr g / (|g| + eps).
  AdamWHyper h;
  h.lr = 0.01;
  h.weight_decay = 0.1;
  h.eps = 1e-8;
  std::vector<double> p = {1.0, -2.0, 0.5}, g = {0.3, -7.0, 1e-3}, m(3, 0.0), v(3, 0.0);
  const std::vector<double> p0 = p;
  AdamWUpdateCpu(p.data(), g.data(), m.data(), v.data(), 3, h, static_cast<const double*>(nullptr));
  for (int i = 0; i < 3; ++i) {
    const double want = p0[i] * (1.0 - 0.01 * 0.1) - 0.01 * g[i] / (std::abs(g[i]) + 1e-8);
    EXPECT_NEAR(p[i], want, 1e-12) << i;
    EXPECT_NEAR(m[i], 0.1 * g[i], 1e-15) << i;
    EXPECT_NEAR(v[i], 0.001 * g[i] * g[i], 1e-15) << i;
  }
}

template <typename T>
void CheckTwoAdamWSteps(double tol) {
  // g1 = 1, g2 = -1, lr 0.1, eps 0: step 1 moves by -0.1. Step 2: m = -0.01, v = 0.001999,
  // bias corrections 0.19 and 0.001999, so mhat = -1/19, vhat = 1 and p moves by +0.1/19.
  AdamWHyper h;
  h.lr = 0.1;
  h.eps = 0.0;
  T p = T(0.5), m = T(0), v = T(0);
  T g = T(1);
  AdamWUpdateCpu(&p, &g, &m, &v, 1, h, static_cast<const T*>(nullptr));
  EXPECT_NEAR(p, 0.4, tol);
  g = T(-1);
  h.step = 2;
  AdamWUpdateCpu(&p, &g, &m, &v, 1, h, static_cast<const T*>(nullptr));
  EXPECT_NEAR(m, -0.01, tol);
  EXPECT_NEAR(v, 0.001999, tol);
  EXPECT_NEAR(p, 0.4 + 0.1 / 19.0, tol);
}

TEST(AdamWUpdateCpu, TwoStepsByHandF64) { CheckTwoAdamWSteps<double>(1e-12); }
TEST(AdamWUpdateCpu, TwoStepsByHandF32) { CheckTwoAdamWSteps<float>(1e-6); }

TEST(AdamWUpdate, ScaleIsAppliedToTheGradient) {
  // With scale 0.5 and g = 4 the update sees g = 2: m = 0.2, v = 0.004.
  auto ctx = CpuContext();
  std::vector<float> p = {1.0f}, g = {4.0f}, m = {0.0f}, v = {0.0f}, scale = {0.5f};
  AdamWHyper h;
  h.lr = 0.1;
  Tensor tp = HostTensor(p), tm = HostTensor(m), tv = HostTensor(v), ts = HostTensor(scale);
  ASSERT_TRUE(AdamWUpdate(*ctx, h, &tp, HostTensor(g), &tm, &tv, &ts).ok());
  EXPECT_NEAR(m[0], 0.2f, 1e-7f);
  EXPECT_NEAR(v[0], 0.004f, 1e-9f);
  EXPECT_NEAR(p[0], 0.9f, 1e-6f);
}

TEST(AdamWUpdate, RejectsBadArguments) {
  auto ctx = CpuContext();
  std::vector<float> p(4), g(4), m(4), v(4), short_v(3), scale2(2);
  std::vector<double> gd(4);
  std::vector<int32_t> pi(4);
  Tensor tp = HostTensor(p), tm = HostTensor(m), tv = HostTensor(v), tsv = HostTensor(short_v);
  Tensor ts2 = HostTensor(scale2);
  AdamWHyper h;
  h.step = 0;
  EXPECT_EQ(AdamWUpdate(*ctx, h, &tp, HostTensor(g), &tm, &tv).code(), Status::Code::kInvalidArgument);
  h.step = 1;
  EXPECT_TRUE(AdamWUpdate(*ctx, h, &tp, HostTensor(g), &tm, &tv).ok());
  EXPECT_EQ(AdamWUpdate(*ctx, h, &tp, HostTensor(g), &tm, &tsv).code(), Status::Code::kInvalidArgument);
  EXPECT_EQ(AdamWUpdate(*ctx, h, &tp, HostTensor(gd), &tm, &tv).code(), Status::Code::kInvalidArgument);
  EXPECT_EQ(AdamWUpdate(*ctx, h, &tp, HostTensor(g), &tm, &tv, &ts2).code(), Status::Code::kInvalidArgument);
  Tensor tpi = HostTensor(pi);
  Tensor tbuf = HostTensor(m);
  EXPECT_EQ(SgdUpdate(*ctx, SgdHyper{}, &tpi, HostTensor(pi), &tbuf).code(), Status::Code::kInvalidArgument);
  Tensor on_gpu = Tensor::Wrap(p.data(), {4}, DType::kF32, DeviceType::kCUDA);
  EXPECT_EQ(SgdUpdate(*ctx, SgdHyper{}, &on_gpu, HostTensor(g), &tbuf).code(), Status::Code::kInvalidArgument);
}

// ---- Clip coefficient --------------------------------------------------------------------------

TEST(GradClipCoef, MatchesClipGradNormSemantics) {
  auto ctx = CpuContext();
  std::vector<float> ss = {25.0f};
  Tensor norm, coef;
  ASSERT_TRUE(GradClipCoef(*ctx, HostTensor(ss), 1.0, &norm, &coef).ok());
  EXPECT_EQ(norm.data<float>()[0], 5.0f);
  EXPECT_FLOAT_EQ(coef.data<float>()[0], 1.0f / (5.0f + 1e-6f));
  ASSERT_TRUE(GradClipCoef(*ctx, HostTensor(ss), 10.0, &norm, &coef).ok());
  EXPECT_EQ(coef.data<float>()[0], 1.0f);  // norm below the threshold: untouched
  ASSERT_TRUE(GradClipCoef(*ctx, HostTensor(ss), 0.0, &norm, &coef).ok());
  EXPECT_EQ(coef.data<float>()[0], 1.0f);  // clipping off
  EXPECT_EQ(norm.data<float>()[0], 5.0f);  // the norm is still reported
  double nan_ss = std::nan(""), n = 0, c = 0;
  GradClipCoefCpu(&nan_ss, 1.0, &n, &c);
  EXPECT_TRUE(std::isnan(c));
}

// ---- CUDA vs CPU -------------------------------------------------------------------------------

// Tolerance for f32 CPU vs CUDA, norm-wise: |gpu_i - cpu_i| <= 1e-6 * max_j |cpu_j|. The kernels
// perform the CPU reference's operations in the same order, but nvcc contracts a*b+c into FMAs,
// which changes the last bits of each result by up to an ulp of its largest operand; an entry that
// cancels to near 0 keeps that absolute error, so the bound is relative to the array's scale.
void ExpectClose(const std::vector<float>& gpu, const std::vector<float>& cpu, const char* what) {
  ASSERT_EQ(gpu.size(), cpu.size());
  float scale = 0.0f;
  for (float x : cpu) scale = std::max(scale, std::abs(x));
  const float tol = 1e-6f * scale;
  int bad = 0;
  for (size_t i = 0; i < cpu.size() && bad < 5; ++i) {
    if (!(std::abs(gpu[i] - cpu[i]) <= tol)) {
      ADD_FAILURE() << what << "[" << i << "]: gpu " << gpu[i] << " cpu " << cpu[i] << " tol " << tol;
      ++bad;
    }
  }
}

class OptimUpdateCudaTest : public ::testing::Test {
 protected:
  static constexpr int64_t kN = (1 << 17) + 5;
  void SetUp() override {
    if (CudaDeviceCount() == 0) GTEST_SKIP() << "no CUDA device: CPU-vs-CUDA optimizer update checks need a GPU";
    ASSERT_TRUE(DeviceContext::CreateCuda(0, &gpu_).ok());
  }
  std::vector<float> Random(float lo, float hi, uint32_t seed) {
    std::mt19937 rng(seed);
    std::uniform_real_distribution<float> dist(lo, hi);
    std::vector<float> v(kN);
    for (auto& x : v) x = dist(rng);
    return v;
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
  std::unique_ptr<DeviceContext> gpu_;
};

TEST_F(OptimUpdateCudaTest, SgdMatchesCpu) {
  for (bool nesterov : {false, true}) {
    std::vector<float> p = Random(-1, 1, 1), buf(kN, 0.0f), scale = {0.7f};
    Tensor dp = ToDevice(p), dbuf = ToDevice(buf), dscale = ToDevice(scale);
    SgdHyper h;
    h.momentum = 0.9;
    h.weight_decay = 0.01;
    h.nesterov = nesterov;
    h.grad_scale = 0.5;
    for (int s = 0; s < 3; ++s) {
      std::vector<float> g = Random(-2, 2, 100 + s);
      h.lr = 0.1 / (s + 1);
      ASSERT_TRUE(SgdUpdate(*gpu_, h, &dp, ToDevice(g), &dbuf, &dscale).ok());
      SgdUpdateCpu(p.data(), g.data(), buf.data(), kN, h, scale.data());
    }
    ExpectClose(ToHost(dp), p, nesterov ? "nesterov params" : "params");
    ExpectClose(ToHost(dbuf), buf, "momentum_buf");
  }
}

TEST_F(OptimUpdateCudaTest, AdamWMatchesCpu) {
  std::vector<float> p = Random(-1, 1, 2), m(kN, 0.0f), v(kN, 0.0f), scale = {0.3f};
  Tensor dp = ToDevice(p), dm = ToDevice(m), dv = ToDevice(v), dscale = ToDevice(scale);
  AdamWHyper h;
  h.weight_decay = 0.1;
  for (int s = 1; s <= 3; ++s) {
    std::vector<float> g = Random(-2, 2, 200 + s);
    h.lr = 1e-2 / s;
    h.step = s;
    // Alternate between the device scale and none.
    const Tensor* sc = s % 2 ? &dscale : nullptr;
    ASSERT_TRUE(AdamWUpdate(*gpu_, h, &dp, ToDevice(g), &dm, &dv, sc).ok());
    AdamWUpdateCpu(p.data(), g.data(), m.data(), v.data(), kN, h, s % 2 ? scale.data() : nullptr);
  }
  ExpectClose(ToHost(dp), p, "params");
  ExpectClose(ToHost(dm), m, "exp_avg");
  ExpectClose(ToHost(dv), v, "exp_avg_sq");
}

TEST_F(OptimUpdateCudaTest, GradClipCoefMatchesCpu) {
  std::vector<float> ss = {1234.5f};
  Tensor dss = ToDevice(ss), dnorm, dcoef;
  for (double clip : {0.0, 1.0, 100.0}) {
    ASSERT_TRUE(GradClipCoef(*gpu_, dss, clip, &dnorm, &dcoef).ok());
    float norm = 0, coef = 0;
    GradClipCoefCpu(ss.data(), clip, &norm, &coef);
    EXPECT_EQ(ToHost(dnorm)[0], norm) << clip;  // sqrt and division are IEEE on both sides
    EXPECT_EQ(ToHost(dcoef)[0], coef) << clip;
  }
}

}  // namespace
}  // namespace dtrain::ops
