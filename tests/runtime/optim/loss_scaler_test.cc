// Tests of runtime/loss_scaler (dynamic loss scaling) with runtime/optimizer on the CPU: an inf/NaN gradient skips
// the step (params and optimizer state unchanged) and halves the scale; a finite step equals the unscaled update
// exactly (power-of-two scales), with AdamW's bias correction counting applied updates only; kGrowthInterval good
// steps double the scale; clipping sees the unscaled norm; the state round-trips through the checkpoint proto.
#include "runtime/optim/loss_scaler.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "core/check.h"
#include "core/device_context.h"
#include "core/tensor.h"
#include "runtime/optim/optimizer.h"
#include "tests/testing/grad_check.h"

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

std::vector<float> Copy(Tensor* t) { return std::vector<float>(t->data<float>(), t->data<float>() + t->numel()); }

OptimizerOptions AdamW(double grad_clip = 0.0) {
  OptimizerOptions o;
  o.name = "adamw";
  o.lr = 0.1;
  o.weight_decay = 0.01;
  o.grad_clip = grad_clip;
  return o;
}

struct Fixture {
  std::unique_ptr<DeviceContext> ctx = CpuContext();
  std::unique_ptr<Optimizer> opt;
  std::unique_ptr<LossScaler> scaler;
  std::vector<float> params = {1.0f, -2.0f, 0.5f, 3.0f};
  std::vector<float> grads = std::vector<float>(4, 0.0f);

  explicit Fixture(const OptimizerOptions& o = AdamW(), const ops::LossScaleHyper& h = LossScaler::DefaultHyper()) {
    EXPECT_TRUE(Optimizer::Create(*ctx, o, 4, &opt).ok());
    EXPECT_TRUE(LossScaler::Create(*ctx, &scaler, h).ok());
  }
  // One step whose true gradient is `g`: grads = scale * g, as Backward(scale) would produce.
  Status Step(const std::vector<float>& g) {
    float s = 0;
    DT_RETURN_IF_ERROR(scaler->Scale(&s));
    for (size_t i = 0; i < g.size(); ++i) grads[i] = g[i] * s;
    Tensor p = HostTensor(params), gr = HostTensor(grads);
    return opt->Step(*ctx, p, gr, 0.1, scaler.get());
  }
  LossScalerState State() {
    LossScalerState st;
    EXPECT_TRUE(scaler->state(&st).ok());
    return st;
  }
};

TEST(LossScaler, StartsAtPyTorchDefaults) {
  Fixture f;
  float s = 0;
  DT_ASSERT_OK(f.scaler->Scale(&s));
  EXPECT_EQ(s, 65536.0f);
  const LossScalerState st = f.State();
  EXPECT_EQ(st.good_steps, 0);
  EXPECT_EQ(st.skipped_steps, 0);
  EXPECT_EQ(kGrowthInterval, 2000);
  EXPECT_EQ(kGrowthFactor, 2.0);
  EXPECT_EQ(kBackoffFactor, 0.5);
}

TEST(LossScaler, OverflowHalvesTheScaleAndSkipsTheStep) {
  for (const float bad : {std::numeric_limits<float>::infinity(), std::numeric_limits<float>::quiet_NaN()}) {
    Fixture f;
    const std::vector<float> before = f.params;
    DT_ASSERT_OK(f.Step({0.1f, bad, 0.3f, -0.2f}));
    EXPECT_EQ(f.params, before) << "a skipped step must not touch the params (bad = " << bad << ")";
    for (auto& [name, t] : f.opt->state()) {
      for (float v : Copy(t)) EXPECT_EQ(v, 0.0f) << name << " changed on a skipped step";
    }
    LossScalerState st = f.State();
    EXPECT_EQ(st.scale, 32768.0);
    EXPECT_TRUE(st.last_found_inf);
    EXPECT_EQ(st.skipped_steps, 1);
    EXPECT_EQ(st.good_steps, 0);
    float norm = 0;
    DT_ASSERT_OK(f.opt->LastGradNorm(*f.ctx, &norm));
    EXPECT_FALSE(std::isfinite(norm));
    // Two overflows in a row: the scale keeps halving.
    DT_ASSERT_OK(f.Step({bad, 0.f, 0.f, 0.f}));
    st = f.State();
    EXPECT_EQ(st.scale, 16384.0);
    EXPECT_EQ(st.skipped_steps, 2);
    EXPECT_EQ(f.params, before);
  }
}

// After a skipped step, the first applied update equals an unscaled optimizer's FIRST update bitwise: the
// unscale multiplier is an exact power of two, and AdamW's bias correction counts applied updates (step 1).
TEST(LossScaler, AppliedStepEqualsTheUnscaledUpdateAndSkipsDoNotAdvanceBiasCorrection) {
  Fixture f;
  DT_ASSERT_OK(f.Step({std::numeric_limits<float>::infinity(), 0.f, 0.f, 0.f}));
  const std::vector<float> g = {0.1f, -0.25f, 0.3f, 0.05f};
  DT_ASSERT_OK(f.Step(g));
  EXPECT_FALSE(f.State().last_found_inf);
  EXPECT_EQ(f.State().good_steps, 1);
  EXPECT_EQ(f.opt->step(), 2);  // step() still counts every call

  std::unique_ptr<DeviceContext> ctx = CpuContext();
  std::unique_ptr<Optimizer> ref;
  DT_ASSERT_OK(Optimizer::Create(*ctx, AdamW(), 4, &ref));
  std::vector<float> params = {1.0f, -2.0f, 0.5f, 3.0f}, grads = g;
  Tensor p = HostTensor(params), gr = HostTensor(grads);
  DT_ASSERT_OK(ref->Step(*ctx, p, gr, 0.1));
  EXPECT_EQ(f.params, params);
}

// SGD with momentum and weight decay: a skip leaves the momentum buffer alone too; applied steps match.
TEST(LossScaler, SgdSkipsAndMatchesTheUnscaledUpdate) {
  OptimizerOptions o;
  o.name = "sgd";
  o.lr = 0.1;
  o.momentum = 0.9;
  o.weight_decay = 0.01;
  Fixture f(o);
  const std::vector<float> g = {0.5f, -0.25f, 0.125f, 1.0f};
  DT_ASSERT_OK(f.Step(g));
  const std::vector<float> after_one = f.params;
  const std::vector<float> buf = Copy(f.opt->state()[0].second);
  DT_ASSERT_OK(f.Step({0.f, std::numeric_limits<float>::quiet_NaN(), 0.f, 0.f}));
  EXPECT_EQ(f.params, after_one);
  EXPECT_EQ(Copy(f.opt->state()[0].second), buf);

  std::unique_ptr<DeviceContext> ctx = CpuContext();
  std::unique_ptr<Optimizer> ref;
  DT_ASSERT_OK(Optimizer::Create(*ctx, o, 4, &ref));
  std::vector<float> params = {1.0f, -2.0f, 0.5f, 3.0f}, grads = g;
  Tensor p = HostTensor(params), gr = HostTensor(grads);
  DT_ASSERT_OK(ref->Step(*ctx, p, gr, 0.1));
  EXPECT_EQ(after_one, params);
}

TEST(LossScaler, GrowthIntervalGoodStepsDoubleTheScale) {
  Fixture f(AdamW(), LossScaler::DefaultHyper());
  const std::vector<float> g = {1e-3f, -1e-3f, 2e-3f, 0.f};
  for (int64_t i = 0; i + 1 < kGrowthInterval; ++i) DT_ASSERT_OK(f.Step(g));
  LossScalerState st = f.State();
  EXPECT_EQ(st.scale, 65536.0);
  EXPECT_EQ(st.good_steps, kGrowthInterval - 1);
  DT_ASSERT_OK(f.Step(g));
  st = f.State();
  EXPECT_EQ(st.scale, 131072.0);
  EXPECT_EQ(st.good_steps, 0);
  // An overflow resets the countdown: growth needs another full interval of good steps.
  DT_ASSERT_OK(f.Step({std::numeric_limits<float>::infinity(), 0.f, 0.f, 0.f}));
  EXPECT_EQ(f.State().scale, 65536.0);
  for (int64_t i = 0; i + 1 < kGrowthInterval; ++i) DT_ASSERT_OK(f.Step(g));
  EXPECT_EQ(f.State().scale, 65536.0);
  DT_ASSERT_OK(f.Step(g));
  EXPECT_EQ(f.State().scale, 131072.0);
}

// The grad-norm and the clip act on the unscaled gradient: norm of (3, 4, 0, 0) is 5 at any scale.
TEST(LossScaler, ClipSeesTheUnscaledNorm) {
  Fixture f(AdamW(/*grad_clip=*/1.0));
  DT_ASSERT_OK(f.Step({3.f, 4.f, 0.f, 0.f}));
  float norm = 0;
  DT_ASSERT_OK(f.opt->LastGradNorm(*f.ctx, &norm));
  EXPECT_FLOAT_EQ(norm, 5.0f);

  std::unique_ptr<DeviceContext> ctx = CpuContext();
  std::unique_ptr<Optimizer> ref;
  DT_ASSERT_OK(Optimizer::Create(*ctx, AdamW(1.0), 4, &ref));
  std::vector<float> params = {1.0f, -2.0f, 0.5f, 3.0f}, grads = {3.f, 4.f, 0.f, 0.f};
  Tensor p = HostTensor(params), gr = HostTensor(grads);
  DT_ASSERT_OK(ref->Step(*ctx, p, gr, 0.1));
  for (size_t i = 0; i < params.size(); ++i) EXPECT_NEAR(f.params[i], params[i], 1e-6) << i;
}

TEST(LossScaler, StateRoundTripsThroughTheCheckpointProto) {
  ops::LossScaleHyper h = LossScaler::DefaultHyper();
  h.growth_interval = 3;
  Fixture f(AdamW(), h);
  const std::vector<float> g = {0.1f, 0.2f, 0.3f, 0.4f};
  DT_ASSERT_OK(f.Step(g));
  DT_ASSERT_OK(f.Step({std::numeric_limits<float>::infinity(), 0.f, 0.f, 0.f}));
  DT_ASSERT_OK(f.Step(g));
  DT_ASSERT_OK(f.Step(g));  // scale 32768, 2 good steps, 1 skipped

  proto::CheckpointManifest m;
  DT_ASSERT_OK(f.scaler->Save(m.mutable_loss_scaler()));
  std::string bytes;
  ASSERT_TRUE(m.SerializeToString(&bytes));
  proto::CheckpointManifest loaded;
  ASSERT_TRUE(loaded.ParseFromString(bytes));
  ASSERT_TRUE(loaded.has_loss_scaler());
  EXPECT_EQ(loaded.loss_scaler().scale(), 32768.0);
  EXPECT_EQ(loaded.loss_scaler().good_steps(), 2);
  EXPECT_EQ(loaded.loss_scaler().skipped_steps(), 1);

  Fixture resumed(AdamW(), h);  // a resume restores the optimizer's step with the scaler (bias correction)
  resumed.opt->set_step(f.opt->step());
  DT_ASSERT_OK(resumed.scaler->Restore(*resumed.ctx, loaded.loss_scaler()));
  LossScalerState st = resumed.State();
  EXPECT_EQ(st.scale, 32768.0);
  EXPECT_EQ(st.good_steps, 2);
  EXPECT_EQ(st.skipped_steps, 1);
  // Both continue identically: one more good step completes the interval and doubles the scale.
  DT_ASSERT_OK(f.Step(g));
  DT_ASSERT_OK(resumed.Step(g));
  EXPECT_EQ(f.State().scale, 65536.0);
  EXPECT_EQ(resumed.State().scale, 65536.0);
  EXPECT_EQ(resumed.State().good_steps, 0);
}

TEST(LossScaler, RejectsBadHyperAndState) {
  auto ctx = CpuContext();
  std::unique_ptr<LossScaler> s;
  ops::LossScaleHyper h = LossScaler::DefaultHyper();
  h.backoff_factor = 1.0;
  EXPECT_EQ(LossScaler::Create(*ctx, &s, h).code(), Status::Code::kInvalidArgument);
  h = LossScaler::DefaultHyper();
  h.growth_factor = 1.0;
  EXPECT_EQ(LossScaler::Create(*ctx, &s, h).code(), Status::Code::kInvalidArgument);
  h = LossScaler::DefaultHyper();
  h.growth_interval = 0;
  EXPECT_EQ(LossScaler::Create(*ctx, &s, h).code(), Status::Code::kInvalidArgument);
  DT_ASSERT_OK(LossScaler::Create(*ctx, &s));
  proto::LossScalerState bad;
  bad.set_scale(0.0);
  EXPECT_EQ(s->Restore(*ctx, bad).code(), Status::Code::kInvalidArgument);
  bad.set_scale(std::numeric_limits<double>::infinity());
  EXPECT_EQ(s->Restore(*ctx, bad).code(), Status::Code::kInvalidArgument);
}

// The op itself: growth never overflows the scale to inf (it stays at the largest finite power of two).
TEST(LossScaleOp, GrowthStopsBeforeInfinity) {
  ops::LossScaleHyper h;
  h.growth_interval = 1;
  float state[ops::kLossScaleStateSize] = {std::ldexp(1.0f, 127), 0.f, 0.f, 0.f};
  const float sum_squares = 1.0f;
  float norm = 0, coef = 0;
  ops::LossScaleStepCpu(h, 0.0, &sum_squares, state, &norm, &coef);
  EXPECT_EQ(state[ops::kLossScaleScale], std::ldexp(1.0f, 127));
  EXPECT_EQ(state[ops::kLossScaleGoodSteps], 0.f);
  EXPECT_EQ(coef, std::ldexp(1.0f, -127));
  EXPECT_EQ(norm, std::ldexp(1.0f, -127));
}

}  // namespace
}  // namespace dtrain::runtime
