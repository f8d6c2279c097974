// (In tests/runtime: the step-loop case needs the optimizer.)
// Mlp: finite-difference gradient check in f64, the gradient-ready protocol, gradient accumulation,
// CPU-vs-CUDA agreement and the no-cudaMalloc-in-the-step-loop guarantee.

#include "models/mlp.h"

#include <gtest/gtest.h>

#include <memory>
#include <vector>

#include "runtime/optim/optimizer.h"
#include "tests/testing/grad_check.h"

namespace dtrain::models {
namespace {

using testing::Fetch;
using testing::MakeTensor;

MlpOptions Small(bool gelu, DType dtype) {
  MlpOptions o;
  o.input_dim = 6;
  o.hidden = {5, 4};
  o.num_classes = 3;
  o.gelu = gelu;
  o.dtype = dtype;
  return o;
}

// Mean cross-entropy of `m` on (x, y) after writing `params` into it.
double LossAt(DeviceContext& ctx, Mlp& m, const std::vector<double>& params, const Tensor& x, const Tensor& y) {
  Tensor p;
  EXPECT_TRUE(MakeTensor(ctx, m.params().dtype(), {m.params().numel()}, params, &p).ok());
  EXPECT_TRUE(m.params().CopyFrom(p, ctx.stream()).ok());
  EXPECT_TRUE(m.Forward(x, y).ok());
  std::vector<double> losses;
  EXPECT_TRUE(Fetch(ctx, m.losses(), &losses).ok());
  double sum = 0;
  for (double l : losses) sum += l;
  return sum / losses.size();
}

class MlpGradCheck : public ::testing::TestWithParam<bool> {};

TEST_P(MlpGradCheck, BackwardMatchesCentralDifferencesInF64) {
  std::unique_ptr<DeviceContext> ctx;
  DT_ASSERT_OK(DeviceContext::CreateCpu(&ctx));
  std::unique_ptr<Mlp> m;
  DT_ASSERT_OK(Mlp::Create(*ctx, Small(GetParam(), DType::kF64), &m));
  DT_ASSERT_OK(m->InitParams(3));
  const int64_t b = 4;
  Tensor x, y;
  DT_ASSERT_OK(MakeTensor(*ctx, DType::kF64, {b, 6}, testing::RandomVector(b * 6, 11), &x));
  DT_ASSERT_OK(MakeTensor(*ctx, DType::kI32, {b}, {0, 2, 1, 2}, &y));
  std::vector<double> p0;
  DT_ASSERT_OK(Fetch(*ctx, m->params(), &p0));

  DT_ASSERT_OK(m->grads().SetZero());
  LossAt(*ctx, *m, p0, x, y);
  std::vector<int> ready;
  DT_ASSERT_OK(m->Backward(1.0f, [&](int i) {
    ready.push_back(i);
    return Status::OK();
  }));
  std::vector<double> analytic;
  DT_ASSERT_OK(Fetch(*ctx, m->grads(), &analytic));

  auto f = [&](const std::vector<double>& p) { return LossAt(*ctx, *m, p, x, y); };
  const auto r = testing::CheckGradient(f, p0, analytic);
  EXPECT_LT(r.max_rel_error, 1e-6) << r.ToString();

  // Every parameter announced exactly once, in reverse layout order (bias before weight per layer).
  const std::vector<int> want = {5, 4, 3, 2, 1, 0};
  EXPECT_EQ(ready, want);
}

INSTANTIATE_TEST_SUITE_P(ReluAndGelu, MlpGradCheck, ::testing::Values(false, true),
                         [](const auto& info) { return info.param ? "gelu" : "relu"; });

// Two half-batches with loss_scale 0.5 accumulate exactly the full-batch gradient.
TEST(Mlp, GradientAccumulationEqualsTheFullBatch) {
  std::unique_ptr<DeviceContext> ctx;
  DT_ASSERT_OK(DeviceContext::CreateCpu(&ctx));
  std::unique_ptr<Mlp> m;
  DT_ASSERT_OK(Mlp::Create(*ctx, Small(false, DType::kF64), &m));
  DT_ASSERT_OK(m->InitParams(5));
  const auto xs = testing::RandomVector(8 * 6, 21);
  const std::vector<double> ys = {0, 1, 2, 0, 1, 2, 2, 1};
  Tensor x, y, x0, y0, x1, y1;
  DT_ASSERT_OK(MakeTensor(*ctx, DType::kF64, {8, 6}, xs, &x));
  DT_ASSERT_OK(MakeTensor(*ctx, DType::kI32, {8}, ys, &y));
  DT_ASSERT_OK(x.View(0, {4, 6}, &x0));
  DT_ASSERT_OK(x.View(24, {4, 6}, &x1));
  DT_ASSERT_OK(y.View(0, {4}, &y0));
  DT_ASSERT_OK(y.View(4, {4}, &y1));

  DT_ASSERT_OK(m->grads().SetZero());
  DT_ASSERT_OK(m->Forward(x, y));
  DT_ASSERT_OK(m->Backward(1.0f, nullptr));
  std::vector<double> full, accum;
  DT_ASSERT_OK(Fetch(*ctx, m->grads(), &full));

  DT_ASSERT_OK(m->grads().SetZero());
  DT_ASSERT_OK(m->Forward(x0, y0));
  DT_ASSERT_OK(m->Backward(0.5f, nullptr));
  DT_ASSERT_OK(m->Forward(x1, y1));
  DT_ASSERT_OK(m->Backward(0.5f, nullptr));
  DT_ASSERT_OK(Fetch(*ctx, m->grads(), &accum));
  EXPECT_LT(testing::MaxAbsDiff(accum, full), 1e-12 * testing::Scale(full));
}

TEST(Mlp, RejectsWrongInputWidth) {
  std::unique_ptr<DeviceContext> ctx;
  DT_ASSERT_OK(DeviceContext::CreateCpu(&ctx));
  std::unique_ptr<Mlp> m;
  DT_ASSERT_OK(Mlp::Create(*ctx, Small(false, DType::kF32), &m));
  Tensor x, y;
  DT_ASSERT_OK(MakeTensor(*ctx, DType::kF32, {2, 7}, std::vector<double>(14, 0.5), &x));
  DT_ASSERT_OK(MakeTensor(*ctx, DType::kI32, {2}, {0, 1}, &y));
  const Status st = m->Forward(x, y);
  EXPECT_EQ(st.code(), Status::Code::kInvalidArgument);
  EXPECT_NE(st.message().find("f32[2,7]"), std::string::npos) << st.ToString();
}

// The same initial weights and batch give the same losses and gradients on the GPU (f32, cuBLASLt
// with fp32 compute) as on the CPU: tolerance 1e-5 relative (Frobenius) for the gradients.
TEST(MlpCuda, MatchesCpuLossesAndGradients) {
  DT_SKIP_WITHOUT_CUDA();
  std::unique_ptr<DeviceContext> cpu, gpu;
  DT_ASSERT_OK(DeviceContext::CreateCpu(&cpu));
  DT_ASSERT_OK(DeviceContext::CreateCuda(0, &gpu));
  MlpOptions o;  // the real 784-256-128-10 shape
  std::vector<double> results[2][2];
  DeviceContext* ctxs[2] = {cpu.get(), gpu.get()};
  const auto xs = testing::RandomVector(64 * 784, 7);
  std::vector<double> ys(64);
  for (int i = 0; i < 64; ++i) ys[i] = (i * 7) % 10;
  for (int d = 0; d < 2; ++d) {
    std::unique_ptr<Mlp> m;
    DT_ASSERT_OK(Mlp::Create(*ctxs[d], o, &m));
    DT_ASSERT_OK(m->InitParams(1234));
    Tensor x, y;
    DT_ASSERT_OK(MakeTensor(*ctxs[d], DType::kF32, {64, 784}, xs, &x));
    DT_ASSERT_OK(MakeTensor(*ctxs[d], DType::kI32, {64}, ys, &y));
    DT_ASSERT_OK(m->grads().SetZero(ctxs[d]->stream()));
    DT_ASSERT_OK(m->Forward(x, y));
    DT_ASSERT_OK(m->Backward(1.0f, nullptr));
    DT_ASSERT_OK(Fetch(*ctxs[d], m->losses(), &results[d][0]));
    DT_ASSERT_OK(Fetch(*ctxs[d], m->grads(), &results[d][1]));
  }
  EXPECT_LT(testing::MaxAbsDiff(results[1][0], results[0][0]), 1e-5 * testing::Scale(results[0][0]));
  EXPECT_LT(testing::RelFrobenius(results[1][1], results[0][1]), 1e-5);
}

// After the first step has filled the caching allocator, training steps never call cudaMalloc.
TEST(MlpCuda, StepLoopDoesNotCallCudaMallocAfterWarmup) {
  DT_SKIP_WITHOUT_CUDA();
  std::unique_ptr<DeviceContext> gpu;
  DT_ASSERT_OK(DeviceContext::CreateCuda(0, &gpu));
  std::unique_ptr<Mlp> m;
  DT_ASSERT_OK(Mlp::Create(*gpu, MlpOptions(), &m));
  DT_ASSERT_OK(m->InitParams(1));
  runtime::OptimizerOptions oo;
  oo.grad_clip = 1.0;
  std::unique_ptr<runtime::Optimizer> opt;
  DT_ASSERT_OK(runtime::Optimizer::Create(*gpu, oo, m->params().numel(), &opt));
  Tensor x, y;
  DT_ASSERT_OK(MakeTensor(*gpu, DType::kF32, {64, 784}, testing::RandomVector(64 * 784, 3), &x));
  DT_ASSERT_OK(MakeTensor(*gpu, DType::kI32, {64}, std::vector<double>(64, 3), &y));
  int64_t mallocs_after_warmup = -1;
  for (int step = 0; step < 20; ++step) {
    DT_ASSERT_OK(m->grads().SetZero(gpu->stream()));
    DT_ASSERT_OK(m->Forward(x, y));
    DT_ASSERT_OK(m->Backward(1.0f, nullptr));
    DT_ASSERT_OK(opt->Step(*gpu, m->params(), m->grads(), 1e-3));
    if (step == 1) mallocs_after_warmup = gpu->device_allocator()->stats().device_mallocs;
  }
  DT_ASSERT_OK(gpu->Synchronize());
  EXPECT_GT(mallocs_after_warmup, 0);
  EXPECT_EQ(gpu->device_allocator()->stats().device_mallocs, mallocs_after_warmup);
  // And the loss went down on this fixed batch (the GPU step really trains).
  std::vector<double> losses;
  DT_ASSERT_OK(Fetch(*gpu, m->losses(), &losses));
  EXPECT_LT(losses[0], 0.5);
}

}  // namespace
}  // namespace dtrain::models
