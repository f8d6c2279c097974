// Tests of models/cnn: parameter layout and buffers, deterministic init, an f64 gradient check of the whole tiny
// model (every parameter), the gradient-ready order and loss_scale/accumulation, train vs eval mode, learning a
// small fixed batch, and CPU-vs-CUDA agreement of the whole model with a documented tolerance.
#include "models/cnn.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <memory>
#include <vector>

#include "core/device_context.h"
#include "tests/testing/grad_check.h"

namespace dtrain::models {
namespace {

using testing::Fetch;
using testing::MakeTensor;
using testing::RandomVector;

std::unique_ptr<DeviceContext> Cpu() {
  std::unique_ptr<DeviceContext> ctx;
  EXPECT_TRUE(DeviceContext::CreateCpu(&ctx).ok());
  return ctx;
}

// 2 stages (the second with a stride-2 projection block), 2 blocks in each: every code path, tiny.
CnnOptions Tiny(DType dt = DType::kF32) {
  CnnOptions o;
  o.in_channels = 2;
  o.image_size = 6;
  o.channels = {3, 4};
  o.blocks_per_stage = 2;
  o.num_classes = 3;
  o.dtype = dt;
  return o;
}

std::unique_ptr<Cnn> Make(DeviceContext& ctx, const CnnOptions& o, uint64_t seed = 7) {
  std::unique_ptr<Cnn> m;
  EXPECT_TRUE(Cnn::Create(ctx, o, &m).ok());
  if (m) {
    EXPECT_TRUE(m->InitParams(seed).ok());
  }
  return m;
}

struct Batch {
  std::vector<double> x;
  std::vector<double> y;
};

// Images whose class is readable from the data: class k brightens a class-specific quadrant, plus noise.
Batch MakeBatch(const CnnOptions& o, int64_t b, uint64_t seed) {
  Batch batch;
  const int64_t s = o.image_size, per = o.in_channels * s * s;
  batch.x = RandomVector(b * per, seed, -0.5, 0.5);
  for (int64_t i = 0; i < b; ++i) {
    const int64_t k = i % o.num_classes;
    batch.y.push_back(static_cast<double>(k));
    for (int64_t c = 0; c < o.in_channels; ++c)
      for (int64_t r = 0; r < s / 2; ++r)
        for (int64_t q = 0; q < s / 2; ++q) {
          const int64_t row = r + (k % 2) * (s / 2), col = q + (k / 2 % 2) * (s / 2);
          batch.x[i * per + (c * s + row) * s + col] += 1.0;
        }
  }
  return batch;
}

void ToDevice(DeviceContext& ctx, const CnnOptions& o, const Batch& b, Tensor* x, Tensor* y, bool four_d = false) {
  const int64_t n = static_cast<int64_t>(b.y.size()), s = o.image_size;
  const std::vector<int64_t> shape =
      four_d ? std::vector<int64_t>{n, o.in_channels, s, s} : std::vector<int64_t>{n, o.in_channels * s * s};
  DT_ASSERT_OK(MakeTensor(ctx, o.dtype, shape, b.x, x));
  DT_ASSERT_OK(MakeTensor(ctx, DType::kI32, {n}, b.y, y));
}

double MeanLoss(DeviceContext& ctx, Cnn& m) {
  std::vector<double> l;
  EXPECT_TRUE(Fetch(ctx, m.losses(), &l).ok());
  double s = 0;
  for (double v : l) s += v;
  return s / static_cast<double>(l.size());
}

TEST(Cnn, ParameterLayoutAndBuffers) {
  auto cpu = Cpu();
  auto m = Make(*cpu, Tiny());
  ASSERT_TRUE(m);
  const auto& p = m->param_infos();
  // stem (3) + s0: 2 identity blocks (6 each) + s1: projection block (9) and identity block (6) + fc (2).
  ASSERT_EQ(p.size(), 3u + 12u + 15u + 2u);
  EXPECT_EQ(p[0].name, "stem.conv.weight");
  EXPECT_EQ(p[0].shape, (std::vector<int64_t>{3, 2, 3, 3}));
  EXPECT_EQ(p[1].name, "stem.bn.weight");
  EXPECT_EQ(p[15].name, "s1.b0.proj.conv.weight");
  EXPECT_EQ(p[15].shape, (std::vector<int64_t>{4, 3, 1, 1}));
  EXPECT_EQ(p[18].name, "s1.b0.conv1.weight");
  EXPECT_EQ(p[18].shape, (std::vector<int64_t>{4, 3, 3, 3}));
  EXPECT_EQ(p[p.size() - 2].name, "fc.weight");
  EXPECT_EQ(p[p.size() - 2].shape, (std::vector<int64_t>{3, 4}));
  EXPECT_EQ(p.back().name, "fc.bias");
  int64_t offset = 0;
  for (const ParamInfo& info : p) {
    EXPECT_EQ(info.offset, offset) << info.name;
    EXPECT_EQ(info.numel, Tensor::NumelOf(info.shape)) << info.name;
    offset += info.numel;
  }
  EXPECT_EQ(m->params().numel(), offset);
  EXPECT_EQ(m->grads().numel(), offset);
  // Buffers: running mean and var of the 10 BNs (stem, 2 + 2 in s0, 3 + 2 in s1), mean 0 / var 1 after init.
  const auto bufs = m->buffers();
  ASSERT_EQ(bufs.size(), 2u * (1 + 2 + 2 + 3 + 2));
  EXPECT_EQ(bufs[0].first, "stem.bn.running_mean");
  EXPECT_EQ(bufs[1].first, "stem.bn.running_var");
  EXPECT_EQ(bufs.back().first, "s1.b1.bn2.running_var");
  for (size_t i = 0; i < bufs.size(); ++i) {
    std::vector<double> v;
    DT_ASSERT_OK(Fetch(*cpu, *bufs[i].second, &v));
    for (double e : v) EXPECT_EQ(e, i % 2 ? 1.0 : 0.0) << bufs[i].first;
  }
}

TEST(Cnn, InitIsDeterministicAndKaiming) {
  auto cpu = Cpu();
  CnnOptions o = Tiny();
  o.channels = {64, 8};
  auto a = Make(*cpu, o, 5), b = Make(*cpu, o, 5), c = Make(*cpu, o, 6);
  std::vector<double> pa, pb, pc;
  DT_ASSERT_OK(Fetch(*cpu, a->params(), &pa));
  DT_ASSERT_OK(Fetch(*cpu, b->params(), &pb));
  DT_ASSERT_OK(Fetch(*cpu, c->params(), &pc));
  EXPECT_EQ(pa, pb);
  EXPECT_NE(pa, pc);
  for (const ParamInfo& info : a->param_infos()) {
    const double* v = pa.data() + info.offset;
    if (info.name == "s0.b0.conv2.weight") {  // [64, 64, 3, 3]: std should be sqrt(2 / (64 * 9)) = 0.0589
      double sq = 0, sum = 0;
      for (int64_t i = 0; i < info.numel; ++i) sum += v[i], sq += v[i] * v[i];
      const double n = static_cast<double>(info.numel);
      EXPECT_NEAR(sum / n, 0.0, 0.002);
      EXPECT_NEAR(std::sqrt(sq / n), std::sqrt(2.0 / 576), 0.002);
    }
    if (info.name == "s0.b0.bn1.weight") {
      EXPECT_EQ(std::vector<double>(v, v + info.numel), std::vector<double>(64, 1));
    }
    if (info.name == "s0.b0.bn1.bias") {
      EXPECT_EQ(std::vector<double>(v, v + info.numel), std::vector<double>(64, 0));
    }
    if (info.name == "fc.weight") {
      for (int64_t i = 0; i < info.numel; ++i) EXPECT_LE(std::abs(v[i]), 1.0 / std::sqrt(8.0));
    }
  }
}

// The whole tiny model in f64: analytic gradients of the mean loss (BN in training mode) against central
// differences for EVERY parameter; also the gradient-ready order (exactly params n-1, ..., 0).
TEST(CnnGrad, WholeModelFiniteDifferences) {
  auto cpu = Cpu();
  const CnnOptions o = Tiny(DType::kF64);
  auto m = Make(*cpu, o);
  ASSERT_TRUE(m);
  const Batch batch = MakeBatch(o, 5, 11);
  Tensor x, y;
  ASSERT_NO_FATAL_FAILURE(ToDevice(*cpu, o, batch, &x, &y));
  std::vector<double> p0;
  DT_ASSERT_OK(Fetch(*cpu, m->params(), &p0));
  DT_ASSERT_OK(m->Forward(x, y));
  std::vector<int> order;
  DT_ASSERT_OK(m->Backward(1.0f, [&](int i) {
    order.push_back(i);
    return Status::OK();
  }));
  std::vector<double> analytic;
  DT_ASSERT_OK(Fetch(*cpu, m->grads(), &analytic));
  const int np = static_cast<int>(m->param_infos().size());
  ASSERT_EQ(static_cast<int>(order.size()), np);
  for (int i = 0; i < np; ++i) EXPECT_EQ(order[i], np - 1 - i);

  auto loss = [&](const std::vector<double>& p) {
    Tensor staged;
    EXPECT_TRUE(MakeTensor(*cpu, DType::kF64, {static_cast<int64_t>(p.size())}, p, &staged).ok());
    EXPECT_TRUE(m->params().CopyFrom(staged).ok());
    EXPECT_TRUE(m->Forward(x, y).ok());
    return MeanLoss(*cpu, *m);
  };
  const auto r = testing::CheckGradient(loss, p0, analytic, 1e-5, 1e-4);
  EXPECT_LT(r.max_rel_error, 1e-5) << r.ToString() << " param offset " << r.worst_index;
}

TEST(Cnn, BackwardAccumulatesAndScales) {
  auto cpu = Cpu();
  const CnnOptions o = Tiny(DType::kF64);
  auto m = Make(*cpu, o);
  const Batch batch = MakeBatch(o, 4, 3);
  Tensor x, y;
  ASSERT_NO_FATAL_FAILURE(ToDevice(*cpu, o, batch, &x, &y));
  std::vector<double> g1, g3;
  DT_ASSERT_OK(m->Forward(x, y));
  DT_ASSERT_OK(m->Backward(1.0f, nullptr));
  DT_ASSERT_OK(Fetch(*cpu, m->grads(), &g1));
  EXPECT_EQ(m->Backward(1.0f, nullptr).code(), Status::Code::kFailedPrecondition);  // one Backward per Forward
  DT_ASSERT_OK(m->Forward(x, y));
  DT_ASSERT_OK(m->Backward(2.0f, nullptr));  // adds 2 * g1
  DT_ASSERT_OK(Fetch(*cpu, m->grads(), &g3));
  for (size_t i = 0; i < g1.size(); ++i) EXPECT_NEAR(g3[i], 3 * g1[i], 1e-12 * (1 + std::abs(g1[i]))) << i;
}

TEST(Cnn, AcceptsFlatAndImageInputs) {
  auto cpu = Cpu();
  const CnnOptions o = Tiny();
  auto m = Make(*cpu, o);
  const Batch batch = MakeBatch(o, 4, 3);
  Tensor x2, x4, y;
  ASSERT_NO_FATAL_FAILURE(ToDevice(*cpu, o, batch, &x2, &y, false));
  ASSERT_NO_FATAL_FAILURE(ToDevice(*cpu, o, batch, &x4, &y, true));
  std::vector<double> l2, l4;
  DT_ASSERT_OK(m->Forward(x2, y));
  DT_ASSERT_OK(Fetch(*cpu, m->logits(), &l2));
  DT_ASSERT_OK(m->Forward(x4, y));
  DT_ASSERT_OK(Fetch(*cpu, m->logits(), &l4));
  EXPECT_EQ(l2, l4);
  Tensor bad;
  DT_ASSERT_OK(MakeTensor(*cpu, DType::kF32, {4, 71}, std::vector<double>(284, 0.0), &bad));
  const Status st = m->Forward(bad, y);
  EXPECT_EQ(st.code(), Status::Code::kInvalidArgument);
  EXPECT_NE(st.message().find("f32[4,71]"), std::string::npos) << st.ToString();
}

// Eval mode uses (and keeps) the running statistics, gives different logits than training mode on a fresh
// model, and refuses Backward.
TEST(Cnn, EvalModeUsesRunningStatistics) {
  auto cpu = Cpu();
  const CnnOptions o = Tiny();
  auto m = Make(*cpu, o);
  const Batch batch = MakeBatch(o, 6, 3);
  Tensor x, y;
  ASSERT_NO_FATAL_FAILURE(ToDevice(*cpu, o, batch, &x, &y));
  std::vector<double> r0, r1, r2, train_logits, eval_logits;
  DT_ASSERT_OK(Fetch(*cpu, *m->buffers()[0].second, &r0));
  DT_ASSERT_OK(m->Forward(x, y));
  DT_ASSERT_OK(Fetch(*cpu, m->logits(), &train_logits));
  DT_ASSERT_OK(Fetch(*cpu, *m->buffers()[0].second, &r1));
  EXPECT_NE(r0, r1);  // training forward moved the stem's running mean
  m->set_training(false);
  EXPECT_FALSE(m->training());
  DT_ASSERT_OK(m->Forward(x, y));
  DT_ASSERT_OK(Fetch(*cpu, m->logits(), &eval_logits));
  DT_ASSERT_OK(Fetch(*cpu, *m->buffers()[0].second, &r2));
  EXPECT_EQ(r1, r2);  // eval forward leaves it alone
  EXPECT_GT(testing::MaxAbsDiff(train_logits, eval_logits), 1e-3);
  EXPECT_EQ(m->Backward(1.0f, nullptr).code(), Status::Code::kFailedPrecondition);
  m->set_training(true);
  DT_ASSERT_OK(m->Forward(x, y));
  DT_ASSERT_OK(m->Backward(1.0f, nullptr));
}

// SGD with momentum on one fixed batch of 24 images: the loss must fall from ~ln(3) to near zero, and, once the
// running statistics have caught up with the batch, eval mode must classify every image correctly.
TEST(Cnn, LearnsASmallFixedBatch) {
  auto cpu = Cpu();
  CnnOptions o = Tiny();
  o.image_size = 8;
  o.channels = {8, 16};
  o.blocks_per_stage = 1;
  auto m = Make(*cpu, o, 3);
  const Batch batch = MakeBatch(o, 24, 5);
  Tensor x, y;
  ASSERT_NO_FATAL_FAILURE(ToDevice(*cpu, o, batch, &x, &y));
  const int64_t np = m->params().numel();
  std::vector<double> velocity(np, 0.0), p, g;
  double first = 0, last = 0;
  for (int step = 0; step < 60; ++step) {
    DT_ASSERT_OK(m->grads().SetZero());
    DT_ASSERT_OK(m->Forward(x, y));
    (step == 0 ? first : last) = MeanLoss(*cpu, *m);
    DT_ASSERT_OK(m->Backward(1.0f, nullptr));
    DT_ASSERT_OK(Fetch(*cpu, m->params(), &p));
    DT_ASSERT_OK(Fetch(*cpu, m->grads(), &g));
    for (int64_t i = 0; i < np; ++i) {
      velocity[i] = 0.9 * velocity[i] + g[i];
      p[i] -= 0.05 * velocity[i];
    }
    Tensor staged;
    DT_ASSERT_OK(MakeTensor(*cpu, DType::kF32, {np}, p, &staged));
    DT_ASSERT_OK(m->params().CopyFrom(staged));
  }
  EXPECT_NEAR(first, std::log(3.0), 0.5);
  EXPECT_LT(last, 0.05) << "first loss " << first;
  m->set_training(false);
  DT_ASSERT_OK(m->Forward(x, y));
  std::vector<double> logits;
  DT_ASSERT_OK(Fetch(*cpu, m->logits(), &logits));
  int correct = 0;
  for (size_t i = 0; i < batch.y.size(); ++i) {
    const double* row = logits.data() + 3 * i;
    const int pred = static_cast<int>(std::max_element(row, row + 3) - row);
    correct += pred == static_cast<int>(batch.y[i]);
  }
  EXPECT_EQ(correct, 24);
}

// One training step (forward, backward) of (x, y), then an eval-mode forward of (ex, ey): everything the
// CPU-vs-GPU comparisons below look at.
struct StepOutputs {
  std::vector<double> grads, logits, losses, eval_logits;
  std::vector<std::vector<double>> running;
};
void StepAndEval(DeviceContext& ctx, Cnn& m, const Tensor& x, const Tensor& y, const Tensor& ex, const Tensor& ey,
                 StepOutputs* out) {
  DT_ASSERT_OK(m.Forward(x, y));
  DT_ASSERT_OK(m.Backward(1.0f, nullptr));
  DT_ASSERT_OK(Fetch(ctx, m.grads(), &out->grads));
  DT_ASSERT_OK(Fetch(ctx, m.logits(), &out->logits));
  DT_ASSERT_OK(Fetch(ctx, m.losses(), &out->losses));
  for (const auto& [name, t] : m.buffers()) {
    out->running.emplace_back();
    DT_ASSERT_OK(Fetch(ctx, *t, &out->running.back()));
  }
  m.set_training(false);
  DT_ASSERT_OK(m.Forward(ex, ey));
  DT_ASSERT_OK(Fetch(ctx, m.logits(), &out->eval_logits));
}

// The CPU-vs-GPU setup of the comparisons below: the Fashion-MNIST shape, narrower, the same init on both devices
// (checked: the init is generated on the host) with the GPU model in `gpu_precision`; each runs StepAndEval on the
// same 16-image batch and 10-image eval batch. Fills both outputs and the parameter layout.
void RunCpuAndGpu(Precision gpu_precision, std::vector<ParamInfo>* infos, StepOutputs* cpu_out, StepOutputs* gpu_out) {
  auto cpu = Cpu();
  std::unique_ptr<DeviceContext> gpu;
  DT_ASSERT_OK(DeviceContext::CreateCuda(0, &gpu));
  CnnOptions o;
  o.channels = {8, 16, 32};
  CnnOptions og = o;
  og.precision = gpu_precision;
  auto mc = Make(*cpu, o, 9), mg = Make(*gpu, og, 9);
  ASSERT_TRUE(mc && mg);
  const Batch batch = MakeBatch(o, 16, 4), eval = MakeBatch(o, 10, 8);
  Tensor xc, yc, xg, yg, exc, eyc, exg, eyg;
  ASSERT_NO_FATAL_FAILURE(ToDevice(*cpu, o, batch, &xc, &yc, true));
  ASSERT_NO_FATAL_FAILURE(ToDevice(*gpu, o, batch, &xg, &yg, true));
  ASSERT_NO_FATAL_FAILURE(ToDevice(*cpu, o, eval, &exc, &eyc));
  ASSERT_NO_FATAL_FAILURE(ToDevice(*gpu, o, eval, &exg, &eyg));
  std::vector<double> pc, pg;
  DT_ASSERT_OK(Fetch(*cpu, mc->params(), &pc));
  DT_ASSERT_OK(Fetch(*gpu, mg->params(), &pg));
  EXPECT_EQ(pc, pg);  // identical init on both devices
  ASSERT_NO_FATAL_FAILURE(StepAndEval(*cpu, *mc, xc, yc, exc, eyc, cpu_out));
  ASSERT_NO_FATAL_FAILURE(StepAndEval(*gpu, *mg, xg, yg, exg, eyg, gpu_out));
  EXPECT_GT(mg->conv_cache().num_plans(), 0);
  *infos = mc->param_infos();
}

// Parameter `info`'s slice of a flat gradient.
std::vector<double> Slice(const std::vector<double>& flat, const ParamInfo& info) {
  return std::vector<double>(flat.begin() + info.offset, flat.begin() + info.offset + info.numel);
}

// The whole model, CPU vs cuDNN, from the same init on the same batch: losses, logits, every gradient and the
// running statistics. fp32 on both sides with different summation orders, amplified a little by batch norm's
// 1/std (std ~ 0.3..1 here): we allow relative Frobenius error 1e-4 on logits and gradients and
// max |gpu - cpu| <= 1e-4 * max(1, max |cpu|) on losses and running stats. Then one eval-mode forward (batch
// size changes: a second set of cuDNN plans) with the same tolerance.
TEST(CnnCuda, MatchesCpu) {
  DT_SKIP_WITHOUT_CUDA();
  std::vector<ParamInfo> infos;
  StepOutputs cpu_out, gpu_out;
  ASSERT_NO_FATAL_FAILURE(RunCpuAndGpu(Precision::kFp32, &infos, &cpu_out, &gpu_out));
  EXPECT_LE(testing::RelFrobenius(gpu_out.logits, cpu_out.logits), 1e-4);
  EXPECT_LE(testing::MaxAbsDiff(gpu_out.losses, cpu_out.losses), 1e-4 * testing::Scale(cpu_out.losses));
  EXPECT_LE(testing::RelFrobenius(gpu_out.eval_logits, cpu_out.eval_logits), 1e-4);
  for (const ParamInfo& info : infos) {
    EXPECT_LE(testing::RelFrobenius(Slice(gpu_out.grads, info), Slice(cpu_out.grads, info)), 1e-4) << info.name;
  }
  for (size_t i = 0; i < cpu_out.running.size(); ++i) {
    EXPECT_LE(testing::MaxAbsDiff(gpu_out.running[i], cpu_out.running[i]), 1e-4 * testing::Scale(cpu_out.running[i]))
        << i;
  }
}

// Two identical steps at the real shape and batch give bit-identical, non-zero gradients (deterministic cuDNN
// algorithms or engines, fixed-order reductions).
void ExpectStepBitwiseReproducible(Precision precision) {
  std::unique_ptr<DeviceContext> gpu;
  DT_ASSERT_OK(DeviceContext::CreateCuda(0, &gpu));
  CnnOptions o;
  o.precision = precision;
  auto m = Make(*gpu, o, 1);
  ASSERT_TRUE(m);
  const Batch batch = MakeBatch(o, 128, 2);
  Tensor x, y;
  ASSERT_NO_FATAL_FAILURE(ToDevice(*gpu, o, batch, &x, &y));
  std::vector<double> g[2];
  for (int rep = 0; rep < 2; ++rep) {
    DT_ASSERT_OK(m->grads().SetZero(gpu->stream()));
    DT_ASSERT_OK(m->Forward(x, y));
    DT_ASSERT_OK(m->Backward(1.0f, nullptr));
    DT_ASSERT_OK(Fetch(*gpu, m->grads(), &g[rep]));
  }
  EXPECT_EQ(g[0], g[1]);
  double norm = 0;
  for (double v : g[0]) norm += v * v;
  EXPECT_GT(norm, 0);
}

TEST(CnnCuda, BackwardIsBitwiseReproducible) {
  DT_SKIP_WITHOUT_CUDA();
  ExpectStepBitwiseReproducible(Precision::kFp32);
}

// The bf16 channels-last step against the CPU's fp32 one, from the same init on the same batch. bf16 rounds every
// activation (8 bits of mantissa: ~2e-3 relative each), so the tolerances are bf16's, not fp32's. The forward is
// close (logits 3.1e-3, eval logits 1.8e-3 on an H200); the gradients are not as close, for a reason of batch
// norm's backward: dx = A (g - mean g) - D (x - mean x) is a small difference of two large terms (here the head's
// gradient is nearly constant over each 7x7 map), and x is the bf16-stored convolution output, so its rounding is
// amplified; PyTorch autocast stores the same bf16 tensor. Measured on an H200: 2.5e-2 at the last batch norms'
// gamma and beta, 9e-2 one convolution further, 0.13-0.19 from there to the stem, 0.109 over the whole gradient
// (cosine similarity ~0.994). Bounds: 3e-2 on the logits and eval logits, 0.2 on the whole gradient, 0.3 on each
// parameter's (a wrong or missing gradient path gives errors near 1), 1e-2 on the head's; running statistics
// within 3e-2 of their scale. Convergence is the real check: 8 epochs of bf16 reach the fp32 run's test accuracy
// (bench/results/2026-12-02-cnn-bf16-channels-last-h200.md). The errors are printed.
TEST(CnnCuda, Bf16ChannelsLastMatchesCpuFp32) {
  DT_SKIP_WITHOUT_CUDA();
  std::vector<ParamInfo> infos;
  StepOutputs cpu_out, gpu_out;
  ASSERT_NO_FATAL_FAILURE(RunCpuAndGpu(Precision::kBf16, &infos, &cpu_out, &gpu_out));
  const double e_logits = testing::RelFrobenius(gpu_out.logits, cpu_out.logits);
  const double e_eval = testing::RelFrobenius(gpu_out.eval_logits, cpu_out.eval_logits);
  const double e_grads = testing::RelFrobenius(gpu_out.grads, cpu_out.grads);
  std::printf("bf16 vs fp32: logits %.2e, eval logits %.2e, all gradients %.2e (relative Frobenius)\n", e_logits,
              e_eval, e_grads);
  EXPECT_LE(e_logits, 3e-2);
  EXPECT_LE(e_eval, 3e-2);
  EXPECT_LE(e_grads, 0.2);
  EXPECT_LE(testing::MaxAbsDiff(gpu_out.losses, cpu_out.losses), 3e-2 * testing::Scale(cpu_out.losses));
  for (const ParamInfo& info : infos) {
    const double e = testing::RelFrobenius(Slice(gpu_out.grads, info), Slice(cpu_out.grads, info));
    std::printf("  %-22s %.2e\n", info.name.c_str(), e);
    EXPECT_LE(e, info.name.rfind("fc.", 0) == 0 ? 1e-2 : 0.3) << info.name;
  }
  for (size_t i = 0; i < cpu_out.running.size(); ++i) {
    EXPECT_LE(testing::MaxAbsDiff(gpu_out.running[i], cpu_out.running[i]), 3e-2 * testing::Scale(cpu_out.running[i]))
        << i;
  }
}

// The bf16 channels-last step too.
TEST(CnnCuda, Bf16BackwardIsBitwiseReproducible) {
  DT_SKIP_WITHOUT_CUDA();
  ExpectStepBitwiseReproducible(Precision::kBf16);
}

// bf16 is a GPU path: a CPU context refuses it by name.
TEST(Cnn, Bf16NeedsCuda) {
  auto cpu = Cpu();
  CnnOptions o = Tiny();
  o.precision = Precision::kBf16;
  std::unique_ptr<Cnn> m;
  const Status st = Cnn::Create(*cpu, o, &m);
  EXPECT_EQ(st.code(), Status::Code::kInvalidArgument);
  EXPECT_NE(st.message().find("precision bf16 needs a CUDA device"), std::string::npos) << st.ToString();
}

}  // namespace
}  // namespace dtrain::models
