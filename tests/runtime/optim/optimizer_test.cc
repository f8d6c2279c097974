// Tests of runtime/optim/optimizer: SGD, AdamW and Lion steps against hand-computed values, clipping to the
// clip value, step/state handling for checkpoints, CPU-vs-CUDA agreement, and CUDA-graph replay of every
// registered algorithm reading each step's constants from the staged buffer.
#include "runtime/optim/optimizer.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <random>
#include <vector>

#include "core/device_context.h"
#include "core/tensor.h"
#if DT_HAVE_CUDA
#include "core/cuda_graph.h"
#endif

namespace dtrain::runtime {
namespace {

std::unique_ptr<DeviceContext> CpuContext() {
  std::unique_ptr<DeviceContext> ctx;
  EXPECT_TRUE(DeviceContext::CreateCpu(&ctx).ok());
  return ctx;
}

Tensor HostTensor(std::vector<float>& v) {
  return Tensor::Wrap(v.data(), {static_cast<int64_t>(v.size())}, DType::kF32, DeviceType::kCPU);
}

std::unique_ptr<Optimizer> MakeOptimizer(DeviceContext& ctx, const OptimizerOptions& o, int64_t n) {
  std::unique_ptr<Optimizer> opt;
  const Status st = Optimizer::Create(ctx, o, n, &opt);
  EXPECT_TRUE(st.ok()) << st.ToString();
  return opt;
}

OptimizerOptions Sgd(double momentum, bool nesterov = false) {
  OptimizerOptions o;
  o.name = "sgd";
  o.momentum = momentum;
  o.nesterov = nesterov;
  return o;
}

TEST(Optimizer, CreateRejectsBadOptions) {
  auto ctx = CpuContext();
  std::unique_ptr<Optimizer> opt;
  auto code = [&](OptimizerOptions o, int64_t n = 4) { return Optimizer::Create(*ctx, o, n, &opt).code(); };
  const auto kBad = Status::Code::kInvalidArgument;
  OptimizerOptions o;
  EXPECT_EQ(code(o), Status::Code::kOk);
  EXPECT_EQ(code(o, 0), kBad);
  o.name = "adam";
  EXPECT_EQ(code(o), kBad);
  o = OptimizerOptions();
  o.lr = -1;
  EXPECT_EQ(code(o), kBad);
  o = OptimizerOptions();
  o.beta1 = 1.0;
  EXPECT_EQ(code(o), kBad);
  o = OptimizerOptions();
  o.grad_clip = -0.5;
  EXPECT_EQ(code(o), kBad);
  EXPECT_EQ(code(Sgd(0.0, /*nesterov=*/true)), kBad);
  EXPECT_EQ(code(Sgd(1.5)), kBad);
  o = OptimizerOptions();
  o.name = "lion";
  EXPECT_EQ(code(o), Status::Code::kOk);
  o.beta2 = 1.0;
  EXPECT_EQ(code(o), kBad);
  o.beta2 = 0.99;
  o.beta1 = -0.1;
  EXPECT_EQ(code(o), kBad);
}

TEST(Optimizer, LionTwoStepsByHandWithDecayAndClipping) {
  // g = (3, -4, 0) has norm 5, clipped to 1: g' = (0.6, -0.8, 0). beta1 0.9, beta2 0.99, lr 0.1, wd 0.5.
  // Step 1: c = 0.1 g' -> sign (1, -1, 0); p = 0.95 p - 0.1 sign; m = 0.01 g' = (0.006, -0.008, 0).
  // Step 2 (lr 0.2, g = -g): c = 0.9 m - 0.1 g' = (-0.0546, 0.0728, 0) -> sign (-1, 1, 0); p = 0.9 p - 0.2 sign;
  // m = 0.99 m - 0.01 g' = (-0.00006, 0.00008, 0).
  auto ctx = CpuContext();
  OptimizerOptions o;
  o.name = "lion";
  o.beta2 = 0.99;
  o.weight_decay = 0.5;
  o.grad_clip = 1.0;
  auto opt = MakeOptimizer(*ctx, o, 3);
  std::vector<float> p = {1.0f, 2.0f, -1.0f}, g = {3.0f, -4.0f, 0.0f};
  Tensor tp = HostTensor(p), tg = HostTensor(g);
  ASSERT_TRUE(opt->Step(*ctx, tp, tg, 0.1).ok());
  const float p1[] = {0.95f * 1.0f - 0.1f, 0.95f * 2.0f + 0.1f, 0.95f * -1.0f};
  for (int i = 0; i < 3; ++i) EXPECT_NEAR(p[i], p1[i], 1e-6f) << i;
  g = {-3.0f, 4.0f, 0.0f};
  ASSERT_TRUE(opt->Step(*ctx, tp, tg, 0.2).ok());
  const float p2[] = {0.9f * p1[0] + 0.2f, 0.9f * p1[1] - 0.2f, 0.9f * p1[2]};
  for (int i = 0; i < 3; ++i) EXPECT_NEAR(p[i], p2[i], 1e-6f) << i;
  auto st = opt->state();
  ASSERT_EQ(st.size(), 1u);
  EXPECT_EQ(st[0].first, "exp_avg");
  EXPECT_NEAR(st[0].second->data<float>()[0], -0.00006f, 1e-8f);
  EXPECT_NEAR(st[0].second->data<float>()[1], 0.00008f, 1e-8f);
  EXPECT_EQ(st[0].second->data<float>()[2], 0.0f);
}

TEST(Optimizer, AdamWTwoStepsByHandWithChangingLr) {
  // g1 = (1, -2), g2 = -g1, eps 0: step 1 moves each param by lr1 * sign(g1). At step 2 the bias
  // corrected moments are mhat = -g1/19 and vhat = g1^2, so the params move by +lr2 * sign(g1) / 19.
  auto ctx = CpuContext();
  OptimizerOptions o;
  o.eps = 0.0;
  auto opt = MakeOptimizer(*ctx, o, 2);
  std::vector<float> p = {0.5f, -1.0f}, g = {1.0f, -2.0f};
  Tensor tp = HostTensor(p), tg = HostTensor(g);
  ASSERT_TRUE(opt->Step(*ctx, tp, tg, 0.1).ok());
  EXPECT_EQ(opt->step(), 1);
  EXPECT_NEAR(p[0], 0.4f, 1e-6f);
  EXPECT_NEAR(p[1], -0.9f, 1e-6f);
  g = {-1.0f, 2.0f};
  ASSERT_TRUE(opt->Step(*ctx, tp, tg, 0.05).ok());
  EXPECT_EQ(opt->step(), 2);
  EXPECT_NEAR(p[0], 0.4f + 0.05f / 19, 1e-6f);
  EXPECT_NEAR(p[1], -0.9f - 0.05f / 19, 1e-6f);
  auto st = opt->state();
  ASSERT_EQ(st.size(), 2u);
  EXPECT_EQ(st[0].first, "exp_avg");
  EXPECT_EQ(st[1].first, "exp_avg_sq");
  EXPECT_NEAR(st[0].second->data<float>()[0], -0.01f, 1e-7f);
  EXPECT_NEAR(st[0].second->data<float>()[1], 0.02f, 1e-7f);
  EXPECT_NEAR(st[1].second->data<float>()[1], 0.007996f, 1e-8f);
}

TEST(Optimizer, AdamWDecoupledDecayWithZeroGradient) {
  // g = 0 leaves m = v = 0 and the Adam term 0 / (0 + eps) = 0: only p *= 1 - lr * wd remains.
  auto ctx = CpuContext();
  OptimizerOptions o;
  o.weight_decay = 0.1;
  auto opt = MakeOptimizer(*ctx, o, 3);
  std::vector<float> p = {1.0f, -2.0f, 4.0f}, g(3, 0.0f);
  Tensor tp = HostTensor(p), tg = HostTensor(g);
  ASSERT_TRUE(opt->Step(*ctx, tp, tg, 0.5).ok());
  EXPECT_FLOAT_EQ(p[0], 0.95f);
  EXPECT_FLOAT_EQ(p[1], -1.9f);
  EXPECT_FLOAT_EQ(p[2], 3.8f);
}

TEST(Optimizer, SgdMomentumAndNesterovSequences) {
  // p0 = 1, g = 0.5, lr 0.1, momentum 0.9. Plain: p = 0.95, 0.855, 0.7195.
  // Nesterov (d = g + 0.9 buf): p = 0.905, 0.7695, 0.59755.
  auto ctx = CpuContext();
  const float want[2][3] = {{0.95f, 0.855f, 0.7195f}, {0.905f, 0.7695f, 0.59755f}};
  for (int nesterov = 0; nesterov < 2; ++nesterov) {
    auto opt = MakeOptimizer(*ctx, Sgd(0.9, nesterov == 1), 1);
    std::vector<float> p = {1.0f}, g = {0.5f};
    Tensor tp = HostTensor(p), tg = HostTensor(g);
    for (int s = 0; s < 3; ++s) {
      ASSERT_TRUE(opt->Step(*ctx, tp, tg, 0.1).ok());
      EXPECT_NEAR(p[0], want[nesterov][s], 1e-6f) << "nesterov " << nesterov << " step " << s;
    }
    ASSERT_EQ(opt->state().size(), 1u);
    EXPECT_EQ(opt->state()[0].first, "momentum_buffer");
    EXPECT_NEAR(opt->state()[0].second->data<float>()[0], 1.355f, 1e-6f);
  }
}

TEST(Optimizer, ClippingScalesAKnownNormToTheClipValue) {
  // grads (3, 4, 0, 0) have norm 5. With SGD, lr 1 and no momentum, p = -coef * g.
  auto ctx = CpuContext();
  for (double clip : {1.0, 2.5, 10.0}) {
    OptimizerOptions o = Sgd(0.0);
    o.grad_clip = clip;
    auto opt = MakeOptimizer(*ctx, o, 4);
    std::vector<float> p(4, 0.0f), g = {3.0f, 4.0f, 0.0f, 0.0f};
    Tensor tp = HostTensor(p), tg = HostTensor(g);
    ASSERT_TRUE(opt->Step(*ctx, tp, tg, 1.0).ok());
    const double applied = std::sqrt(double(p[0]) * p[0] + double(p[1]) * p[1]);
    EXPECT_NEAR(applied, std::min(clip, 5.0), 1e-6) << clip;  // 5 * clip / (5 + 1e-6) when clipping
    float norm = 0;
    ASSERT_TRUE(opt->LastGradNorm(*ctx, &norm).ok());
    EXPECT_EQ(norm, 5.0f);                                       // before clipping
    EXPECT_EQ(g, (std::vector<float>{3.0f, 4.0f, 0.0f, 0.0f}));  // grads untouched
  }
}

TEST(Optimizer, GradNormIsReportedWithClippingOffAndRejectedBeforeTheFirstStep) {
  auto ctx = CpuContext();
  auto opt = MakeOptimizer(*ctx, Sgd(0.9), 2);
  float norm = 0;
  EXPECT_EQ(opt->LastGradNorm(*ctx, &norm).code(), Status::Code::kFailedPrecondition);
  std::vector<float> p(2, 0.0f), g = {6.0f, 8.0f}, wrong(3, 0.0f);
  Tensor tp = HostTensor(p), tg = HostTensor(g), tw = HostTensor(wrong);
  EXPECT_EQ(opt->Step(*ctx, tp, tw, 0.1).code(), Status::Code::kInvalidArgument);
  EXPECT_EQ(opt->Step(*ctx, tp, tg, -1.0).code(), Status::Code::kInvalidArgument);
  EXPECT_EQ(opt->step(), 0);
  ASSERT_TRUE(opt->Step(*ctx, tp, tg, 1.0).ok());
  ASSERT_TRUE(opt->LastGradNorm(*ctx, &norm).ok());
  EXPECT_EQ(norm, 10.0f);
  EXPECT_EQ(p, (std::vector<float>{-6.0f, -8.0f}));  // unclipped
}

TEST(Optimizer, SetStepDrivesAdamWBiasCorrection) {
  // At a huge step both bias corrections are 1: the first update is lr * 0.1 g / (sqrt(0.001) |g|).
  auto ctx = CpuContext();
  OptimizerOptions o;
  o.eps = 0.0;
  auto opt = MakeOptimizer(*ctx, o, 1);
  opt->set_step(1000000);
  std::vector<float> p = {0.0f}, g = {-3.0f};
  Tensor tp = HostTensor(p), tg = HostTensor(g);
  ASSERT_TRUE(opt->Step(*ctx, tp, tg, 0.01).ok());
  EXPECT_EQ(opt->step(), 1000001);
  EXPECT_NEAR(p[0], 0.01 * 0.1 / std::sqrt(0.001), 1e-6);
}

TEST(Optimizer, RestoredStateContinuesIdentically) {
  auto ctx = CpuContext();
  OptimizerOptions o;
  o.weight_decay = 0.01;
  o.grad_clip = 0.5;
  auto a = MakeOptimizer(*ctx, o, 3);
  std::vector<float> pa = {0.1f, 0.2f, -0.3f}, g = {0.4f, -0.5f, 0.6f};
  Tensor tpa = HostTensor(pa), tg = HostTensor(g);
  for (int s = 0; s < 2; ++s) ASSERT_TRUE(a->Step(*ctx, tpa, tg, 0.01).ok());
  // "Checkpoint" a into b: params, state tensors and the step.
  auto b = MakeOptimizer(*ctx, o, 3);
  std::vector<float> pb = pa;
  Tensor tpb = HostTensor(pb);
  auto sa = a->state(), sb = b->state();
  ASSERT_EQ(sa.size(), sb.size());
  for (size_t i = 0; i < sa.size(); ++i) ASSERT_TRUE(sb[i].second->CopyFrom(*sa[i].second).ok());
  b->set_step(a->step());
  ASSERT_TRUE(a->Step(*ctx, tpa, tg, 0.01).ok());
  ASSERT_TRUE(b->Step(*ctx, tpb, tg, 0.01).ok());
  EXPECT_EQ(pa, pb);
}

// ---- CUDA vs CPU -------------------------------------------------------------------------------

// Several steps of each optimizer with clipping on, on random data, from identical starting
// points. Tolerance, norm-wise: |gpu_i - cpu_i| <= 1e-6 * max_j |cpu_j|. The kernels perform the
// CPU reference's operations in the same order; FMA contraction on the GPU and the summation order
// of the norm's f64 partials change the last bits only (by up to an ulp of the largest operand,
// which is why the bound is relative to the array's scale rather than to each entry).
TEST(OptimizerCuda, MatchesCpu) {
  if (CudaDeviceCount() == 0) GTEST_SKIP() << "no CUDA device: CPU-vs-CUDA optimizer checks need a GPU";
  std::unique_ptr<DeviceContext> gpu;
  ASSERT_TRUE(DeviceContext::CreateCuda(0, &gpu).ok());
  auto cpu = CpuContext();
  const int64_t n = 50021;
  std::mt19937 rng(3);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  auto to_device = [&](std::vector<float>& h) {
    Tensor d;
    EXPECT_TRUE(Tensor::Empty({n}, DType::kF32, gpu->allocator(), &d).ok());
    EXPECT_TRUE(d.CopyFrom(HostTensor(h), gpu->stream()).ok());
    return d;
  };
  for (const char* name : {"sgd", "adamw", "lion"}) {
    OptimizerOptions o;
    o.name = name;
    o.nesterov = true;
    o.weight_decay = 0.01;
    o.grad_clip = 50.0;  // the random grads have norm ~ sqrt(n) = 224: clipping is active
    // Lion without clipping: its update is the sign of c, so an ulp of difference in the clip coefficient (the
    // norm is summed in another order on the GPU) could flip an element whose c is ~0 by a whole lr. Without a
    // coefficient the kernel gives the CPU's bits (tests/kernels/lion_update_op_test.cc).
    if (o.name == "lion") o.grad_clip = 0.0;
    auto oc = MakeOptimizer(*cpu, o, n);
    auto og = MakeOptimizer(*gpu, o, n);
    std::vector<float> p(n), g(n);
    for (auto& x : p) x = dist(rng);
    Tensor dp = to_device(p), tp = HostTensor(p);
    for (int s = 0; s < 3; ++s) {
      for (auto& x : g) x = dist(rng);
      Tensor dg = to_device(g), tg = HostTensor(g);
      const double lr = 0.01 / (s + 1);
      ASSERT_TRUE(og->Step(*gpu, dp, dg, lr).ok());
      ASSERT_TRUE(oc->Step(*cpu, tp, tg, lr).ok());
      float norm_c = 0, norm_g = 0;
      ASSERT_TRUE(oc->LastGradNorm(*cpu, &norm_c).ok());
      ASSERT_TRUE(og->LastGradNorm(*gpu, &norm_g).ok());
      EXPECT_NEAR(norm_g, norm_c, 1e-6 * norm_c) << name << " step " << s;
    }
    std::vector<float> back(n);
    Tensor tb = HostTensor(back);
    ASSERT_TRUE(tb.CopyFrom(dp, gpu->stream()).ok());
    ASSERT_TRUE(gpu->Synchronize().ok());
    float scale = 0.0f;
    for (float x : p) scale = std::max(scale, std::abs(x));
    int bad = 0;
    for (int64_t i = 0; i < n && bad < 5; ++i) {
      if (!(std::abs(back[i] - p[i]) <= 1e-6f * scale)) {
        ADD_FAILURE() << name << " param " << i << ": gpu " << back[i] << " cpu " << p[i] << " scale " << scale;
        ++bad;
      }
    }
  }
}

// CUDA graphs: Apply captured once and replayed after each Stage gives, for every registered algorithm, bitwise
// the parameters of eager Steps with the same changing LRs — the replays read each step's constants (LR, bias
// corrections) from the staged buffer, not the values frozen at capture.
TEST(OptimizerCuda, GraphReplayReadsEachStepsConstants) {
#if DT_HAVE_CUDA
  if (CudaDeviceCount() == 0) GTEST_SKIP() << "no CUDA device: graph replay needs a GPU";
  std::unique_ptr<DeviceContext> gpu;
  ASSERT_TRUE(DeviceContext::CreateCuda(0, &gpu).ok());
  const int64_t n = 4099;
  std::mt19937 rng(5);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<float> p0(n), g(n);
  for (auto& x : p0) x = dist(rng);
  for (auto& x : g) x = dist(rng);
  auto to_device = [&](std::vector<float>& h) {
    Tensor d;
    EXPECT_TRUE(Tensor::Empty({n}, DType::kF32, gpu->allocator(), &d).ok());
    EXPECT_TRUE(d.CopyFrom(HostTensor(h), gpu->stream()).ok());
    return d;
  };
  for (const std::string& name : OptimAlgorithmNames()) {
    OptimizerOptions o;
    o.name = name;
    o.weight_decay = 0.01;
    o.grad_clip = 10.0;
    auto eager = MakeOptimizer(*gpu, o, n);
    auto graphed = MakeOptimizer(*gpu, o, n);
    Tensor pe = to_device(p0), pg = to_device(p0), grads = to_device(g);
    ASSERT_TRUE(gpu->Synchronize().ok());
    auto pool = std::make_shared<CudaGraphPool>(gpu->device_allocator());
    std::unique_ptr<CudaGraph> graph;
    ASSERT_TRUE(graphed->Stage(*gpu, 0.1).ok());
    ASSERT_TRUE(CudaGraph::Capture(
                    gpu->stream(), pool, [&] { return graphed->Apply(*gpu, pg, grads); }, &graph)
                    .ok());
    for (int s = 0; s < 4; ++s) {
      const double lr = 0.1 / (1 << s);
      if (s > 0) ASSERT_TRUE(graphed->Stage(*gpu, lr).ok());
      ASSERT_TRUE(graph->Launch(gpu->stream()).ok());
      ASSERT_TRUE(eager->Step(*gpu, pe, grads, lr).ok());
    }
    std::vector<float> be(n), bg(n);
    Tensor the = HostTensor(be), thg = HostTensor(bg);
    ASSERT_TRUE(the.CopyFrom(pe, gpu->stream()).ok());
    ASSERT_TRUE(thg.CopyFrom(pg, gpu->stream()).ok());
    ASSERT_TRUE(gpu->Synchronize().ok());
    EXPECT_EQ(bg, be) << name;
    EXPECT_NE(be, p0) << name;
  }
#else
  GTEST_SKIP() << "built without CUDA";
#endif
}

}  // namespace
}  // namespace dtrain::runtime
