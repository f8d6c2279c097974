// Tests of kernels/softmax_xent: closed forms (uniform logits give log V, a hand-computed row, extreme
// logits), argmax ties, a finite-difference gradient check (f64), bad targets and shapes, and CPU-vs-CUDA
// agreement.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <tuple>
#include <vector>

#include "core/check.h"
#include "core/device_context.h"
#include "kernels/softmax_xent.h"
#include "tests/testing/grad_check.h"

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

// Runs SoftmaxCrossEntropy on ctx (outputs poisoned with NaN first); dlogits is skipped when `dlogits` is null.
Status RunXent(DeviceContext& ctx, DType dt, int64_t b, int64_t v, const std::vector<double>& logits,
               const std::vector<double>& targets, float grad_scale, std::vector<double>* losses,
               std::vector<double>* dlogits) {
  Tensor tl, tt, tloss, tdl;
  DT_RETURN_IF_ERROR(MakeTensor(ctx, dt, {b, v}, logits, &tl));
  DT_RETURN_IF_ERROR(MakeTensor(ctx, DType::kI32, {b}, targets, &tt));
  DT_RETURN_IF_ERROR(MakeTensor(ctx, dt, {b}, std::vector<double>(b, NAN), &tloss));
  DT_RETURN_IF_ERROR(MakeTensor(ctx, dt, {b, v}, std::vector<double>(b * v, NAN), &tdl));
  const Status st = SoftmaxCrossEntropy(ctx, tl, tt, &tloss, dlogits ? &tdl : nullptr, grad_scale);
  DT_RETURN_IF_ERROR(Fetch(ctx, tloss, losses));  // fetched even on error: checks that nothing was written
  if (dlogits != nullptr) DT_RETURN_IF_ERROR(Fetch(ctx, tdl, dlogits));
  return st;
}

// SoftmaxCrossEntropy for the losses, then SoftmaxCrossEntropyBackward from them, in place over the logits.
void RunXentBackward(DeviceContext& ctx, DType dt, int64_t b, int64_t v, int64_t u, const std::vector<double>& logits,
                     const std::vector<double>& targets, float grad_scale, std::vector<double>* dlogits) {
  Tensor tl, tt, tloss;
  DT_ASSERT_OK(MakeTensor(ctx, dt, {b, v}, logits, &tl));
  DT_ASSERT_OK(MakeTensor(ctx, DType::kI32, {b}, targets, &tt));
  DT_ASSERT_OK(MakeTensor(ctx, dt, {b}, std::vector<double>(b, NAN), &tloss));
  DT_ASSERT_OK(SoftmaxCrossEntropy(ctx, tl, tt, &tloss, nullptr, grad_scale, u));
  DT_ASSERT_OK(SoftmaxCrossEntropyBackward(ctx, tl, tt, tloss, &tl, grad_scale, u));
  DT_ASSERT_OK(Fetch(ctx, tl, dlogits));
}

void RunArgmax(DeviceContext& ctx, DType dt, int64_t b, int64_t v, const std::vector<double>& logits,
               std::vector<double>* out) {
  Tensor tl, tout;
  DT_ASSERT_OK(MakeTensor(ctx, dt, {b, v}, logits, &tl));
  DT_ASSERT_OK(MakeTensor(ctx, DType::kI32, {b}, std::vector<double>(b, -7), &tout));
  DT_ASSERT_OK(Argmax(ctx, tl, &tout));
  DT_ASSERT_OK(Fetch(ctx, tout, out));
}

TEST(SoftmaxXentCpu, UniformLogitsGiveLogV) {
  auto cpu = Cpu();
  for (const int64_t v : {10, 1000}) {
    for (DType dt : {DType::kF32, DType::kF64}) {
      const int64_t b = 3;
      std::vector<double> losses, dl;
      DT_ASSERT_OK(RunXent(*cpu, dt, b, v, std::vector<double>(b * v, 0.25), {0, 5, 9}, 0.5f, &losses, &dl));
      for (int64_t i = 0; i < b; ++i) EXPECT_NEAR(losses[i], std::log(static_cast<double>(v)), 1e-6);
      // dlogits = (1/V - onehot) * grad_scale
      EXPECT_NEAR(dl[0], (1.0 / v - 1.0) * 0.5, 1e-7);
      EXPECT_NEAR(dl[1], 0.5 / v, 1e-7);
      EXPECT_NEAR(dl[v + 5], (1.0 / v - 1.0) * 0.5, 1e-7);
    }
  }
}

TEST(SoftmaxXentCpu, HandComputedAndExtremeLogits) {
  auto cpu = Cpu();
  std::vector<double> losses, dl;
  // log(e + e^2 + e^3) - 3, computed independently.
  DT_ASSERT_OK(RunXent(*cpu, DType::kF64, 1, 3, {1, 2, 3}, {2}, 1.f, &losses, &dl));
  EXPECT_NEAR(losses[0], 0.40760596444438013, 1e-15);
  const double z = std::exp(1.0) + std::exp(2.0) + std::exp(3.0);
  EXPECT_NEAR(dl[0], std::exp(1.0) / z, 1e-15);
  EXPECT_NEAR(dl[2], std::exp(3.0) / z - 1, 1e-15);
  // |logits| = 1000 would overflow a naive exp: the max is subtracted first.
  for (DType dt : {DType::kF32, DType::kF64}) {
    DT_ASSERT_OK(RunXent(*cpu, dt, 2, 3, {1000, 0, -1000, 1000, 0, -1000}, {0, 1}, 1.f, &losses, &dl));
    EXPECT_EQ(losses[0], 0.0);
    EXPECT_NEAR(losses[1], 1000.0, 1e-9);
    EXPECT_EQ(dl[0], 0.0);  // softmax = 1 at the target
    EXPECT_EQ(dl[4], -1.0);
  }
  // dlogits may be omitted.
  DT_ASSERT_OK(RunXent(*cpu, DType::kF32, 1, 3, {1, 2, 3}, {2}, 1.f, &losses, nullptr));
  EXPECT_NEAR(losses[0], 0.40760596444438013, 1e-6);
}

TEST(ArgmaxCpu, TiesGoToLowestIndexAndNaNNeverWins) {
  auto cpu = Cpu();
  std::vector<double> out;
  ASSERT_NO_FATAL_FAILURE(
      RunArgmax(*cpu, DType::kF32, 4, 4, {1, 3, 3, 2, -1, -5, -0.5, -2, 0, 0, 0, 0, NAN, 1, 2, NAN}, &out));
  EXPECT_EQ(out, (std::vector<double>{1, 2, 0, 2}));
}

// valid_cols < V: padded columns take no part in the softmax or argmax and get zero gradient; the result equals
// the unpadded problem's. Targets in the padding are rejected. dlogits may be the logits tensor (in place).
TEST(SoftmaxXentCpu, PaddedColumnsAreIgnored) {
  auto cpu = Cpu();
  const int64_t b = 3, u = 5, v = 8;
  const auto small = RandomVector(b * u, 21, -3, 3);
  std::vector<double> padded(b * v, 50.0);  // padding larger than every valid logit
  for (int64_t i = 0; i < b; ++i) std::copy(small.begin() + i * u, small.begin() + (i + 1) * u, padded.begin() + i * v);
  const std::vector<double> targets = {4, 0, 2};
  for (DType dt : {DType::kF32, DType::kF64}) {
    Tensor tsmall, tpad, tt, tl_small, tl_pad, td_small, td_pad, am;
    DT_ASSERT_OK(MakeTensor(*cpu, dt, {b, u}, small, &tsmall));
    DT_ASSERT_OK(MakeTensor(*cpu, dt, {b, v}, padded, &tpad));
    DT_ASSERT_OK(MakeTensor(*cpu, DType::kI32, {b}, targets, &tt));
    DT_ASSERT_OK(MakeTensor(*cpu, dt, {b}, std::vector<double>(b, NAN), &tl_small));
    DT_ASSERT_OK(MakeTensor(*cpu, dt, {b}, std::vector<double>(b, NAN), &tl_pad));
    DT_ASSERT_OK(MakeTensor(*cpu, dt, {b, u}, std::vector<double>(b * u, NAN), &td_small));
    DT_ASSERT_OK(MakeTensor(*cpu, DType::kI32, {b}, std::vector<double>(b, -1), &am));
    DT_ASSERT_OK(SoftmaxCrossEntropy(*cpu, tsmall, tt, &tl_small, &td_small, 0.5f));
    DT_ASSERT_OK(SoftmaxCrossEntropy(*cpu, tpad, tt, &tl_pad, &tpad, 0.5f, u));  // in place
    std::vector<double> l_small, l_pad, d_small, d_pad, argmax;
    DT_ASSERT_OK(Fetch(*cpu, tl_small, &l_small));
    DT_ASSERT_OK(Fetch(*cpu, tl_pad, &l_pad));
    DT_ASSERT_OK(Fetch(*cpu, td_small, &d_small));
    DT_ASSERT_OK(Fetch(*cpu, tpad, &d_pad));
    EXPECT_EQ(l_pad, l_small) << DTypeName(dt);
    for (int64_t i = 0; i < b; ++i) {
      for (int64_t j = 0; j < v; ++j) {
        EXPECT_EQ(d_pad[i * v + j], j < u ? d_small[i * u + j] : 0.0) << DTypeName(dt) << " " << i << "," << j;
      }
    }
    DT_ASSERT_OK(MakeTensor(*cpu, dt, {b, v}, padded, &tpad));
    DT_ASSERT_OK(Argmax(*cpu, tpad, &am, u));
    DT_ASSERT_OK(Fetch(*cpu, am, &argmax));
    for (int64_t i = 0; i < b; ++i) {
      const auto row = small.begin() + i * u;
      EXPECT_EQ(argmax[i], std::max_element(row, row + u) - row) << i;
    }
  }
  Tensor logits, tt, losses;
  DT_ASSERT_OK(MakeTensor(*cpu, DType::kF32, {1, v}, std::vector<double>(v, 0.0), &logits));
  DT_ASSERT_OK(MakeTensor(*cpu, DType::kI32, {1}, {static_cast<double>(u)}, &tt));  // a padded column
  DT_ASSERT_OK(MakeTensor(*cpu, DType::kF32, {1}, {0.0}, &losses));
  const Status st = SoftmaxCrossEntropy(*cpu, logits, tt, &losses, nullptr, 1.f, u);
  EXPECT_EQ(st.code(), Status::Code::kInvalidArgument);
  EXPECT_NE(st.message().find("outside [0, 5)"), std::string::npos) << st.ToString();
  EXPECT_EQ(SoftmaxCrossEntropy(*cpu, logits, tt, &losses, nullptr, 1.f, v + 1).code(), Status::Code::kInvalidArgument);
  EXPECT_EQ(SoftmaxCrossEntropy(*cpu, logits, tt, &losses, nullptr, 1.f, 0).code(), Status::Code::kInvalidArgument);
}

// loss = grad_scale * sum_b losses[b]; its gradient is exactly dlogits.
TEST(SoftmaxXentGrad, FiniteDifferences) {
  auto cpu = Cpu();
  const int64_t b = 3, v = 5;
  const float grad_scale = 1.f / b;
  const auto logits = RandomVector(b * v, 1, -3, 3);
  const std::vector<double> targets = {4, 0, 2};
  std::vector<double> losses, dl;
  DT_ASSERT_OK(RunXent(*cpu, DType::kF64, b, v, logits, targets, grad_scale, &losses, &dl));
  auto loss = [&](const std::vector<double>& x) {
    std::vector<double> l;
    EXPECT_TRUE(RunXent(*cpu, DType::kF64, b, v, x, targets, grad_scale, &l, nullptr).ok());
    return grad_scale * (l[0] + l[1] + l[2]);
  };
  const auto r = testing::CheckGradient(loss, logits, dl);
  EXPECT_LT(r.max_rel_error, 1e-6) << r.ToString();
}

TEST(SoftmaxXent, RejectsBadTargetsAndShapes) {
  auto cpu = Cpu();
  std::vector<double> losses, dl;
  for (const double bad : {3.0, -1.0}) {
    const Status st = RunXent(*cpu, DType::kF32, 2, 3, std::vector<double>(6, 0.0), {0, bad}, 1.f, &losses, &dl);
    EXPECT_EQ(st.code(), Status::Code::kInvalidArgument);
    EXPECT_NE(st.message().find("outside [0, 3)"), std::string::npos) << st.ToString();
    EXPECT_TRUE(std::isnan(losses[0]) && std::isnan(dl[0])) << "nothing is written on a bad target";
  }
  Tensor logits, targets3, losses4, out;
  DT_ASSERT_OK(MakeTensor(*cpu, DType::kF32, {4, 5}, std::vector<double>(20, 0.0), &logits));
  DT_ASSERT_OK(MakeTensor(*cpu, DType::kI32, {3}, std::vector<double>(3, 0.0), &targets3));
  DT_ASSERT_OK(MakeTensor(*cpu, DType::kF32, {4}, std::vector<double>(4, 0.0), &losses4));
  const Status st = SoftmaxCrossEntropy(*cpu, logits, targets3, &losses4, nullptr, 1.f);
  EXPECT_EQ(st.code(), Status::Code::kInvalidArgument);
  EXPECT_NE(st.message().find("i32[3]"), std::string::npos) << st.ToString();
  EXPECT_NE(st.message().find("f32[4,5]"), std::string::npos) << st.ToString();
  Tensor dl_bad;
  DT_ASSERT_OK(MakeTensor(*cpu, DType::kF32, {5, 4}, std::vector<double>(20, 0.0), &dl_bad));
  Tensor targets4;
  DT_ASSERT_OK(MakeTensor(*cpu, DType::kI32, {4}, std::vector<double>(4, 0.0), &targets4));
  EXPECT_EQ(SoftmaxCrossEntropy(*cpu, logits, targets4, &losses4, &dl_bad, 1.f).code(), Status::Code::kInvalidArgument);
  EXPECT_EQ(SoftmaxCrossEntropy(*cpu, logits, losses4, &losses4, nullptr, 1.f).code(),
            Status::Code::kInvalidArgument);  // f32 targets
  EXPECT_EQ(Argmax(*cpu, logits, &targets3).code(), Status::Code::kInvalidArgument);
  EXPECT_EQ(Argmax(*cpu, logits, &losses4).code(), Status::Code::kInvalidArgument);  // out must be i32
  const Status no_dl = SoftmaxCrossEntropyBackward(*cpu, logits, targets4, losses4, nullptr, 1.f);
  EXPECT_EQ(no_dl.code(), Status::Code::kInvalidArgument);
  EXPECT_NE(no_dl.message().find("SoftmaxCrossEntropyBackward: dlogits is null"), std::string::npos) << no_dl.message();
}

// GPU vs the CPU f64 reference on f32 logits in [-8, 8], for V from one warp (10) to GPT-2's 50257. 16384 and
// 28672 columns (64 KB and 112 KB rows) take the row kernel, the others (28676: 4 bytes over) the streaming kernel.
// Tolerances: losses max abs err <= 1e-5 * scale; dlogits (|value| <= grad_scale <= 1) max abs err <= 1e-6.
TEST(SoftmaxXentCuda, MatchesCpuReference) {
  DT_SKIP_WITHOUT_CUDA();
  auto cpu = Cpu();
  std::unique_ptr<DeviceContext> gpu;
  DT_ASSERT_OK(DeviceContext::CreateCuda(0, &gpu));
  for (const auto& [b, v] :
       {std::pair<int64_t, int64_t>{64, 10}, {33, 1000}, {5, 50257}, {2, 1}, {3, 16384}, {2, 28672}, {2, 28676}}) {
    auto logits = RandomVector(b * v, b + v, -8, 8);
    for (double& x : logits) x = static_cast<float>(x);
    std::vector<double> targets(b);
    for (int64_t i = 0; i < b; ++i) targets[i] = (i * 7919) % v;
    const float grad_scale = 1.f / b;
    std::vector<double> want_l, want_d, got_l, got_d;
    DT_ASSERT_OK(RunXent(*cpu, DType::kF64, b, v, logits, targets, grad_scale, &want_l, &want_d));
    DT_ASSERT_OK(RunXent(*gpu, DType::kF32, b, v, logits, targets, grad_scale, &got_l, &got_d));
    EXPECT_LE(testing::MaxAbsDiff(got_l, want_l), 1e-5 * testing::Scale(want_l)) << b << "x" << v;
    EXPECT_LE(testing::MaxAbsDiff(got_d, want_d), 1e-6) << b << "x" << v;
  }
}

// The backward from saved losses (one pass) against the fused call's dlogits in f64 on the CPU, for plain and padded
// rows (GPT-2's 50304 / 50257 included); on `gpu` (when given) in f32, in place over the logits (16384 columns: the
// row kernel).
void CheckBackwardFromLosses(DeviceContext& cpu, DeviceContext* gpu) {
  for (const auto& [b, v, u] :
       {std::tuple<int64_t, int64_t, int64_t>{33, 1000, 1000}, {5, 50304, 50257}, {7, 1003, 1000}, {3, 16384, 16000}}) {
    auto logits = RandomVector(b * v, b + v, -8, 8);
    for (double& x : logits) x = static_cast<float>(x);
    std::vector<double> targets(b);
    for (int64_t i = 0; i < b; ++i) targets[i] = (i * 7919) % u;
    const float grad_scale = 1.f / b;
    Tensor tl, tt, tloss, td;
    std::vector<double> want_d, got_d;
    DT_ASSERT_OK(MakeTensor(cpu, DType::kF64, {b, v}, logits, &tl));
    DT_ASSERT_OK(MakeTensor(cpu, DType::kI32, {b}, targets, &tt));
    DT_ASSERT_OK(MakeTensor(cpu, DType::kF64, {b}, std::vector<double>(b, NAN), &tloss));
    DT_ASSERT_OK(MakeTensor(cpu, DType::kF64, {b, v}, std::vector<double>(b * v, NAN), &td));
    DT_ASSERT_OK(SoftmaxCrossEntropy(cpu, tl, tt, &tloss, &td, grad_scale, u));
    DT_ASSERT_OK(Fetch(cpu, td, &want_d));
    DeviceContext& ctx = gpu != nullptr ? *gpu : cpu;
    ASSERT_NO_FATAL_FAILURE(
        RunXentBackward(ctx, gpu != nullptr ? DType::kF32 : DType::kF64, b, v, u, logits, targets, grad_scale, &got_d));
    EXPECT_LE(testing::MaxAbsDiff(got_d, want_d), gpu != nullptr ? 1e-6 : 1e-12) << b << "x" << v;
  }
}

TEST(SoftmaxXentCpu, BackwardFromLossesMatchesFused) {
  auto cpu = Cpu();
  ASSERT_NO_FATAL_FAILURE(CheckBackwardFromLosses(*cpu, nullptr));
}

// CUDA f32 within 1e-6 of the CPU reference (|dlogits| <= grad_scale); a bad target's row is NaN.
TEST(SoftmaxXentCuda, BackwardFromLossesMatchesCpu) {
  DT_SKIP_WITHOUT_CUDA();
  auto cpu = Cpu();
  std::unique_ptr<DeviceContext> gpu;
  DT_ASSERT_OK(DeviceContext::CreateCuda(0, &gpu));
  ASSERT_NO_FATAL_FAILURE(CheckBackwardFromLosses(*cpu, gpu.get()));
  std::vector<double> dl;
  ASSERT_NO_FATAL_FAILURE(RunXentBackward(*gpu, DType::kF32, 2, 4, 4, std::vector<double>(8, 1.0), {1, -1}, 1.f, &dl));
  for (int j = 0; j < 4; ++j) {
    EXPECT_NEAR(dl[j], 0.25 - (j == 1 ? 1.0 : 0.0), 1e-6);
    EXPECT_TRUE(std::isnan(dl[4 + j]));
  }
}

// On the GPU an out-of-range target cannot be an error: its row gets a NaN loss and NaN dlogits, others are fine.
// V = 4 takes the streaming kernel, V = 8192 the row kernel.
TEST(SoftmaxXentCuda, BadTargetPoisonsOnlyItsRow) {
  DT_SKIP_WITHOUT_CUDA();
  std::unique_ptr<DeviceContext> gpu;
  DT_ASSERT_OK(DeviceContext::CreateCuda(0, &gpu));
  for (const int64_t v : {4, 8192}) {
    std::vector<double> losses, dl;
    const double bad = static_cast<double>(v);
    DT_ASSERT_OK(RunXent(*gpu, DType::kF32, 3, v, std::vector<double>(3 * v, 1.0), {1, bad, -1}, 1.f, &losses, &dl));
    EXPECT_NEAR(losses[0], std::log(static_cast<double>(v)), 1e-5) << v;
    EXPECT_TRUE(std::isnan(losses[1]) && std::isnan(losses[2])) << v;
    for (int64_t j = 0; j < v; ++j) {
      ASSERT_FALSE(std::isnan(dl[j])) << v << " col " << j;
      ASSERT_TRUE(std::isnan(dl[v + j]) && std::isnan(dl[2 * v + j])) << v << " col " << j;
    }
  }
}

// CUDA f32 with padding (valid_cols < V, V odd: the scalar path) vs the CPU f64 reference; padding gets 0.
TEST(SoftmaxXentCuda, PaddedColumnsMatchCpu) {
  DT_SKIP_WITHOUT_CUDA();
  auto cpu = Cpu();
  std::unique_ptr<DeviceContext> gpu;
  DT_ASSERT_OK(DeviceContext::CreateCuda(0, &gpu));
  const int64_t b = 7, v = 1003, u = 1000;
  auto logits = RandomVector(b * v, 31, -8, 8);
  for (double& x : logits) x = static_cast<float>(x);
  std::vector<double> targets(b);
  for (int64_t i = 0; i < b; ++i) targets[i] = (i * 131) % u;
  std::vector<double> want_l, want_d, got_l, got_d;
  for (auto* ctx : {cpu.get(), gpu.get()}) {
    const DType dt = ctx == cpu.get() ? DType::kF64 : DType::kF32;
    Tensor tl, tt, tloss, td;
    DT_ASSERT_OK(MakeTensor(*ctx, dt, {b, v}, logits, &tl));
    DT_ASSERT_OK(MakeTensor(*ctx, DType::kI32, {b}, targets, &tt));
    DT_ASSERT_OK(MakeTensor(*ctx, dt, {b}, std::vector<double>(b, NAN), &tloss));
    DT_ASSERT_OK(MakeTensor(*ctx, dt, {b, v}, std::vector<double>(b * v, NAN), &td));
    DT_ASSERT_OK(SoftmaxCrossEntropy(*ctx, tl, tt, &tloss, &td, 1.f / b, u));
    DT_ASSERT_OK(Fetch(*ctx, tloss, ctx == cpu.get() ? &want_l : &got_l));
    DT_ASSERT_OK(Fetch(*ctx, td, ctx == cpu.get() ? &want_d : &got_d));
  }
  EXPECT_LE(testing::MaxAbsDiff(got_l, want_l), 1e-5 * testing::Scale(want_l));
  EXPECT_LE(testing::MaxAbsDiff(got_d, want_d), 1e-6);
}

// Argmax must agree exactly, including ties (logits drawn from {0, 1, 2, 3}, so most rows tie across threads).
TEST(ArgmaxCuda, MatchesCpuExactlyWithTies) {
  DT_SKIP_WITHOUT_CUDA();
  auto cpu = Cpu();
  std::unique_ptr<DeviceContext> gpu;
  DT_ASSERT_OK(DeviceContext::CreateCuda(0, &gpu));
  for (const auto& [b, v] : {std::pair<int64_t, int64_t>{64, 10}, {17, 1000}, {3, 50257}}) {
    auto logits = RandomVector(b * v, v, 0, 4);
    for (double& x : logits) x = std::floor(x);
    logits[v + 3] = NAN;
    std::vector<double> want, got;
    ASSERT_NO_FATAL_FAILURE(RunArgmax(*cpu, DType::kF32, b, v, logits, &want));
    ASSERT_NO_FATAL_FAILURE(RunArgmax(*gpu, DType::kF32, b, v, logits, &got));
    EXPECT_EQ(got, want) << b << "x" << v;
  }
}

}  // namespace
}  // namespace dtrain::ops
