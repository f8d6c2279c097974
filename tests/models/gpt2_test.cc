// Tests of models/gpt2: the parameter layout (HF names, forward order), GPT-2's init, the loss at init (~ln vocab,
// padded columns masked), finite-difference gradients of the whole model (CPU f64), recompute giving bit-identical
// gradients and the reverse-layout ready order, the chunked loss giving the unchunked losses, gradients and eval
// scores, AdamW steps reducing the loss, and CUDA f32 / bf16 / fp16 against the CPU and chunked against unchunked.
#include "models/gpt2.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "core/device_context.h"
#include "kernels/optim_update.h"
#include "tests/testing/grad_check.h"

namespace dtrain::models {
namespace {

using testing::Fetch;
using testing::MakeTensor;

// The tiny config of the brief: 2 layers, 2 heads, C = 16, T = 8, vocab 61 padded to 64.
Gpt2Options Tiny() {
  Gpt2Options o;
  o.vocab_size = 61;
  o.padded_vocab_size = 64;
  o.max_seq_len = 8;
  o.n_layer = 2;
  o.n_head = 2;
  o.n_embd = 16;
  return o;
}

std::unique_ptr<DeviceContext> Cpu() {
  std::unique_ptr<DeviceContext> ctx;
  EXPECT_TRUE(DeviceContext::CreateCpu(&ctx).ok());
  return ctx;
}

// Token ids uniform in [0, vocab), reproducible from `seed`.
std::vector<double> Tokens(int64_t n, int64_t vocab, uint64_t seed) {
  std::vector<double> v = testing::RandomVector(n, seed, 0.0, static_cast<double>(vocab));
  for (double& e : v) e = std::floor(e);
  return v;
}

struct Batch {
  Tensor inputs, targets;
};

void MakeBatch(DeviceContext& ctx, int64_t b, int64_t t, int64_t vocab, uint64_t seed, Batch* out) {
  DT_ASSERT_OK(MakeTensor(ctx, DType::kI32, {b, t}, Tokens(b * t, vocab, seed), &out->inputs));
  DT_ASSERT_OK(MakeTensor(ctx, DType::kI32, {b, t}, Tokens(b * t, vocab, seed + 1), &out->targets));
}

double Mean(const std::vector<double>& v) {
  double s = 0;
  for (double e : v) s += e;
  return s / static_cast<double>(v.size());
}

// One Forward/Backward (with `loss_scale`, divided out of the returned grads) from zeroed grads; returns the mean
// loss, the grads and the ready order.
void Step(DeviceContext& ctx, Gpt2& m, const Batch& batch, double* loss, std::vector<double>* grads,
          std::vector<int>* order = nullptr, float loss_scale = 1.0f) {
  DT_ASSERT_OK(m.grads().SetZero(ctx.stream()));
  DT_ASSERT_OK(m.Forward(batch.inputs, batch.targets));
  std::vector<double> losses;
  DT_ASSERT_OK(Fetch(ctx, m.losses(), &losses));
  *loss = Mean(losses);
  DT_ASSERT_OK(m.Backward(loss_scale, [&](int i) {
    if (order != nullptr) order->push_back(i);
    return Status::OK();
  }));
  DT_ASSERT_OK(Fetch(ctx, m.grads(), grads));
  for (double& g : *grads) g /= loss_scale;
}

TEST(Gpt2, ParamLayoutUsesHfNamesInForwardOrder) {
  auto cpu = Cpu();
  std::unique_ptr<Gpt2> m;
  DT_ASSERT_OK(Gpt2::Create(*cpu, Tiny(), 2, 8, &m));
  const auto& p = m->param_infos();
  ASSERT_EQ(p.size(), 2u + 12u * 2u + 2u);
  EXPECT_EQ(p[0].name, "wte.weight");
  EXPECT_EQ(p[0].shape, (std::vector<int64_t>{64, 16}));
  EXPECT_EQ(p[1].name, "wpe.weight");
  EXPECT_EQ(p[1].shape, (std::vector<int64_t>{8, 16}));
  EXPECT_EQ(p[2].name, "h.0.ln_1.weight");
  EXPECT_EQ(p[4].name, "h.0.attn.c_attn.weight");
  EXPECT_EQ(p[4].shape, (std::vector<int64_t>{48, 16}));  // [3C, C]: nn.Linear's [out, in]
  EXPECT_EQ(p[12].name, "h.0.mlp.c_proj.weight");
  EXPECT_EQ(p[12].shape, (std::vector<int64_t>{16, 64}));
  EXPECT_EQ(p[14].name, "h.1.ln_1.weight");
  EXPECT_EQ(p[26].name, "ln_f.weight");
  EXPECT_EQ(p[27].name, "ln_f.bias");
  int64_t offset = 0;
  for (const ParamInfo& info : p) {
    EXPECT_EQ(info.offset, offset) << info.name;
    EXPECT_EQ(info.numel, Tensor::NumelOf(info.shape)) << info.name;
    offset += info.numel;
  }
  EXPECT_EQ(m->params().numel(), offset);
  EXPECT_EQ(offset, 64 * 16 + 8 * 16 + 2 * (4 * 16 + 48 * 16 + 48 + 16 * 16 + 16 + 64 * 16 + 64 + 16 * 64 + 16) + 32);
}

// N(0, 0.02) weights, residual projections N(0, 0.02 / sqrt(2 L)), LN 1/0, biases 0; same seed, same values.
TEST(Gpt2, InitFollowsGpt2AndIsDeterministic) {
  auto cpu = Cpu();
  Gpt2Options o = Tiny();
  o.n_embd = 64;
  o.n_head = 4;
  std::unique_ptr<Gpt2> a, b;
  DT_ASSERT_OK(Gpt2::Create(*cpu, o, 1, 8, &a));
  DT_ASSERT_OK(Gpt2::Create(*cpu, o, 1, 8, &b));
  DT_ASSERT_OK(a->InitParams(7));
  DT_ASSERT_OK(b->InitParams(7));
  ASSERT_EQ(std::memcmp(a->params().data(), b->params().data(), a->params().nbytes()), 0);
  const float* w = a->params().data<float>();
  auto stddev = [&](const ParamInfo& p) {
    double s = 0, s2 = 0;
    for (int64_t k = 0; k < p.numel; ++k) {
      s += w[p.offset + k];
      s2 += static_cast<double>(w[p.offset + k]) * w[p.offset + k];
    }
    EXPECT_NEAR(s / p.numel, 0.0, 0.1 * std::sqrt(s2 / p.numel)) << p.name;
    return std::sqrt(s2 / p.numel);
  };
  for (const ParamInfo& p : a->param_infos()) {
    if (p.name.find("ln_") != std::string::npos) {
      const double want = p.name.find(".weight") != std::string::npos ? 1.0 : 0.0;
      for (int64_t k = 0; k < p.numel; ++k) ASSERT_EQ(w[p.offset + k], want) << p.name;
    } else if (p.name.find(".bias") != std::string::npos) {
      for (int64_t k = 0; k < p.numel; ++k) ASSERT_EQ(w[p.offset + k], 0.0f) << p.name;
    } else if (p.numel >= 4096) {  // enough samples for a 10% check of the standard deviation
      const double want = p.name.find("c_proj") != std::string::npos ? 0.02 / 2.0 : 0.02;  // sqrt(2 * 2 layers)
      EXPECT_NEAR(stddev(p), want, 0.1 * want) << p.name;
    }
  }
}

// At init the logits are ~0, so the loss is ~ln(vocab); and it is the cross-entropy over the first 61 columns only.
TEST(Gpt2Cpu, InitialLossIsLogVocabWithPaddedColumnsMasked) {
  auto cpu = Cpu();
  std::unique_ptr<Gpt2> m;
  DT_ASSERT_OK(Gpt2::Create(*cpu, Tiny(), 4, 8, &m));
  DT_ASSERT_OK(m->InitParams(1234));
  Batch batch;
  ASSERT_NO_FATAL_FAILURE(MakeBatch(*cpu, 4, 8, 61, 1, &batch));
  DT_ASSERT_OK(m->Forward(batch.inputs, batch.targets));
  std::vector<double> losses, logits, targets;
  DT_ASSERT_OK(Fetch(*cpu, m->losses(), &losses));
  DT_ASSERT_OK(Fetch(*cpu, m->logits(), &logits));
  DT_ASSERT_OK(Fetch(*cpu, batch.targets, &targets));
  ASSERT_EQ(losses.size(), 32u);
  ASSERT_EQ(logits.size(), 32u * 64u);
  EXPECT_NEAR(Mean(losses), std::log(61.0), 0.1);
  for (size_t i = 0; i < losses.size(); ++i) {
    double mx = -INFINITY, sum = 0;
    for (int j = 0; j < 61; ++j) mx = std::max(mx, logits[i * 64 + j]);
    for (int j = 0; j < 61; ++j) sum += std::exp(logits[i * 64 + j] - mx);
    const double want = std::log(sum) + mx - logits[i * 64 + static_cast<int>(targets[i])];
    EXPECT_NEAR(losses[i], want, 1e-5) << "token " << i;
  }
}

// The whole model in f64: d(mean loss)/d(params) against central differences, at random (not init) parameters so
// attention, GELU and layer norm are well away from linear. A sample of every parameter tensor is checked.
TEST(Gpt2Cpu, GradientMatchesFiniteDifferences) {
  auto cpu = Cpu();
  Gpt2Options o = Tiny();
  o.dtype = DType::kF64;
  std::unique_ptr<Gpt2> m;
  DT_ASSERT_OK(Gpt2::Create(*cpu, o, 2, 8, &m));
  const int64_t np = m->params().numel();
  std::vector<double> base = testing::RandomVector(np, 3, -0.3, 0.3);
  double* params = m->params().data<double>();
  std::memcpy(params, base.data(), np * sizeof(double));
  Batch batch;
  ASSERT_NO_FATAL_FAILURE(MakeBatch(*cpu, 2, 8, 61, 5, &batch));
  double loss0 = 0;
  std::vector<double> grads;
  ASSERT_NO_FATAL_FAILURE(Step(*cpu, *m, batch, &loss0, &grads));

  std::vector<int64_t> idx;  // up to 16 evenly spaced elements of each parameter
  for (const ParamInfo& p : m->param_infos()) {
    const int64_t stride = std::max<int64_t>(1, p.numel / 16);
    for (int64_t k = 0; k < p.numel; k += stride) idx.push_back(p.offset + k);
  }
  std::vector<double> x(idx.size()), analytic(idx.size());
  for (size_t i = 0; i < idx.size(); ++i) {
    x[i] = base[idx[i]];
    analytic[i] = grads[idx[i]];
  }
  auto loss = [&](const std::vector<double>& xs) {
    for (size_t i = 0; i < idx.size(); ++i) params[idx[i]] = xs[i];
    EXPECT_TRUE(m->Forward(batch.inputs, batch.targets).ok());
    std::vector<double> losses;
    EXPECT_TRUE(Fetch(*cpu, m->losses(), &losses).ok());
    return Mean(losses);
  };
  const auto r = testing::CheckGradient(loss, x, analytic, 1e-5, 1e-4);
  EXPECT_LT(r.max_rel_error, 1e-5) << r.ToString() << " (flat index " << idx[r.worst_index] << ")";
}

// recompute re-runs each block's forward in backward: the same arithmetic, so bit-identical gradients; both
// announce every parameter exactly once, in reverse layout order (wte last).
TEST(Gpt2Cpu, RecomputeGivesBitIdenticalGradsAndReverseReadyOrder) {
  auto cpu = Cpu();
  Gpt2Options o = Tiny();
  std::unique_ptr<Gpt2> plain, recompute;
  DT_ASSERT_OK(Gpt2::Create(*cpu, o, 2, 8, &plain));
  o.recompute = true;
  DT_ASSERT_OK(Gpt2::Create(*cpu, o, 2, 8, &recompute));
  DT_ASSERT_OK(plain->InitParams(11));
  DT_ASSERT_OK(recompute->InitParams(11));
  Batch batch;
  ASSERT_NO_FATAL_FAILURE(MakeBatch(*cpu, 2, 8, 61, 9, &batch));
  double la = 0, lb = 0;
  std::vector<double> ga, gb;
  std::vector<int> oa, ob;
  ASSERT_NO_FATAL_FAILURE(Step(*cpu, *plain, batch, &la, &ga, &oa));
  ASSERT_NO_FATAL_FAILURE(Step(*cpu, *recompute, batch, &lb, &gb, &ob));
  EXPECT_EQ(la, lb);
  ASSERT_EQ(ga.size(), gb.size());
  for (size_t i = 0; i < ga.size(); ++i) ASSERT_EQ(ga[i], gb[i]) << "flat index " << i;
  const int np = static_cast<int>(plain->param_infos().size());
  ASSERT_EQ(static_cast<int>(oa.size()), np);
  for (int k = 0; k < np; ++k) EXPECT_EQ(oa[k], np - 1 - k) << "position " << k;
  EXPECT_EQ(oa, ob);
}

// The fused classifier (the forward writes d(mean loss)/d(logits) over the logits; the loss scale goes into the
// LM-head GEMMs) computes the same gradient as the separate backward pass: f64, loss scale 4 (exact to divide out).
TEST(Gpt2Cpu, FusedClassifierGivesTheTwoPassGradients) {
  auto cpu = Cpu();
  Gpt2Options o = Tiny();
  o.dtype = DType::kF64;
  std::unique_ptr<Gpt2> plain, fused;
  DT_ASSERT_OK(Gpt2::Create(*cpu, o, 2, 8, &plain));
  o.fused_classifier = true;
  DT_ASSERT_OK(Gpt2::Create(*cpu, o, 2, 8, &fused));
  DT_ASSERT_OK(plain->InitParams(5));
  DT_ASSERT_OK(fused->InitParams(5));
  Batch batch;
  ASSERT_NO_FATAL_FAILURE(MakeBatch(*cpu, 2, 8, 61, 3, &batch));
  double la = 0, lb = 0;
  std::vector<double> ga, gb;
  ASSERT_NO_FATAL_FAILURE(Step(*cpu, *plain, batch, &la, &ga, nullptr, 4.0f));
  ASSERT_NO_FATAL_FAILURE(Step(*cpu, *fused, batch, &lb, &gb, nullptr, 4.0f));
  EXPECT_EQ(la, lb);
  EXPECT_LE(testing::MaxAbsDiff(gb, ga), 1e-12 * testing::Scale(ga));
  // Eval mode keeps the logits: the same as the unfused model's.
  fused->set_training(false);
  DT_ASSERT_OK(fused->Forward(batch.inputs, batch.targets));
  DT_ASSERT_OK(plain->Forward(batch.inputs, batch.targets));
  std::vector<double> lf, lp;
  DT_ASSERT_OK(Fetch(*cpu, fused->logits(), &lf));
  DT_ASSERT_OK(Fetch(*cpu, plain->logits(), &lp));
  EXPECT_EQ(lf, lp);
}

// The chunked loss (loss_chunk_tokens, models/chunked_classifier.h) against the unchunked fused classifier, fp32:
// chunks of 5 over B*T = 16 tokens and of 64 (one chunk); losses and gradients within 1e-6 relative (the head's
// gradient sums in another order), the same ready order, also for two micro-batches accumulated at scale 1/2 (told by
// set_backward_scale); an eval Forward scores as the unchunked model does; fp16 is refused.
TEST(Gpt2Cpu, ChunkedLossGivesTheUnchunkedLossesGradientsAndEvalScores) {
  auto cpu = Cpu();
  Gpt2Options o = Tiny();
  o.fused_classifier = true;
  Batch batch, batch2;
  ASSERT_NO_FATAL_FAILURE(MakeBatch(*cpu, 2, 8, 61, 3, &batch));
  ASSERT_NO_FATAL_FAILURE(MakeBatch(*cpu, 2, 8, 61, 13, &batch2));
  struct Result {
    std::vector<double> losses, g1, g2;
    std::vector<int> order;
    double eval_sum = 0;
    int64_t correct = 0, count = 0;
  };
  auto run = [&](int64_t chunk, Result* r) {
    Gpt2Options c = o;
    c.loss_chunk_tokens = chunk;
    std::unique_ptr<Gpt2> m;
    DT_ASSERT_OK(Gpt2::Create(*cpu, c, 2, 8, &m));
    DT_ASSERT_OK(m->InitParams(5));
    double loss = 0;
    ASSERT_NO_FATAL_FAILURE(Step(*cpu, *m, batch, &loss, &r->g1, &r->order));
    DT_ASSERT_OK(Fetch(*cpu, m->losses(), &r->losses));
    DT_ASSERT_OK(m->grads().SetZero(cpu->stream()));
    m->set_backward_scale(0.5f);
    for (const Batch* b : {&batch, &batch2}) {
      DT_ASSERT_OK(m->Forward(b->inputs, b->targets));
      DT_ASSERT_OK(m->Backward(0.5f, nullptr));
    }
    DT_ASSERT_OK(Fetch(*cpu, m->grads(), &r->g2));
    m->set_training(false);
    DT_ASSERT_OK(m->EvalBatch(*cpu, batch.inputs, batch.targets, 2, &r->eval_sum, &r->correct, &r->count));
  };
  Result want;
  ASSERT_NO_FATAL_FAILURE(run(0, &want));
  double gmax = 0;
  for (double g : want.g1) gmax = std::max(gmax, std::fabs(g));
  ASSERT_GT(gmax, 1e-4);  // a gradient to compare (not all zero)
  for (int64_t chunk : {5, 64}) {
    SCOPED_TRACE("chunk " + std::to_string(chunk));
    Result got;
    ASSERT_NO_FATAL_FAILURE(run(chunk, &got));
    EXPECT_EQ(got.order, want.order);
    ASSERT_EQ(got.losses.size(), want.losses.size());
    EXPECT_LE(testing::RelFrobenius(got.losses, want.losses), 1e-6);
    ASSERT_EQ(got.g1.size(), want.g1.size());
    EXPECT_LE(testing::RelFrobenius(got.g1, want.g1), 1e-6);
    EXPECT_LE(testing::RelFrobenius(got.g2, want.g2), 1e-6);
    EXPECT_EQ(got.count, want.count);
    EXPECT_EQ(got.correct, want.correct);
    EXPECT_NEAR(got.eval_sum, want.eval_sum, 1e-6 * std::abs(want.eval_sum));
  }
  std::unique_ptr<Gpt2> m;
  Gpt2Options fp16 = o;
  fp16.precision = Precision::kFp16;
  fp16.loss_chunk_tokens = 8;
  const Status s = Gpt2::Create(*cpu, fp16, 2, 8, &m);
  EXPECT_EQ(s.code(), Status::Code::kInvalidArgument);
  EXPECT_NE(s.ToString().find("loss_chunk_tokens"), std::string::npos) << s.ToString();
}

// 30 AdamW steps (lr 1e-2) on one fixed batch: the model memorizes it, so the loss falls well below ln(61) = 4.11.
TEST(Gpt2Cpu, AdamWStepsReduceTheLossOnAFixedBatch) {
  auto cpu = Cpu();
  std::unique_ptr<Gpt2> m;
  DT_ASSERT_OK(Gpt2::Create(*cpu, Tiny(), 2, 8, &m));
  DT_ASSERT_OK(m->InitParams(1));
  Batch batch;
  ASSERT_NO_FATAL_FAILURE(MakeBatch(*cpu, 2, 8, 61, 3, &batch));
  const int64_t np = m->params().numel();
  Tensor exp_avg, exp_avg_sq;
  DT_ASSERT_OK(MakeTensor(*cpu, DType::kF32, {np}, std::vector<double>(np, 0.0), &exp_avg));
  DT_ASSERT_OK(MakeTensor(*cpu, DType::kF32, {np}, std::vector<double>(np, 0.0), &exp_avg_sq));
  double first = 0, loss = 0;
  std::vector<double> grads;
  for (int step = 1; step <= 30; ++step) {
    ASSERT_NO_FATAL_FAILURE(Step(*cpu, *m, batch, &loss, &grads));
    if (step == 1) first = loss;
    ops::AdamWHyper h;
    h.lr = 1e-2;
    h.beta2 = 0.95;
    h.weight_decay = 0.0;
    h.step = step;
    DT_ASSERT_OK(ops::AdamWUpdate(*cpu, h, &m->params(), m->grads(), &exp_avg, &exp_avg_sq));
  }
  EXPECT_NEAR(first, std::log(61.0), 0.1);
  EXPECT_LT(loss, first - 1.0) << "first " << first << ", after 30 steps " << loss;
}

// ---- CUDA ------------------------------------------------------------------------------------------------------

// A GPU-sized variant of the tiny model (multiple query tiles in attention: T = 64; hs = 16).
Gpt2Options Small() {
  Gpt2Options o = Tiny();
  o.max_seq_len = 64;
  o.n_embd = 64;
  o.n_head = 4;
  return o;
}

// Loss and grads of one step of `o` on ctx, from InitParams(21) on a fixed batch [4, 64].
void RunSmall(DeviceContext& ctx, const Gpt2Options& o, double* loss, std::vector<double>* losses,
              std::vector<double>* grads, float loss_scale = 1.0f) {
  std::unique_ptr<Gpt2> m;
  DT_ASSERT_OK(Gpt2::Create(ctx, o, 4, 64, &m));
  DT_ASSERT_OK(m->InitParams(21));
  Batch batch;
  ASSERT_NO_FATAL_FAILURE(MakeBatch(ctx, 4, 64, o.vocab_size, 17, &batch));
  ASSERT_NO_FATAL_FAILURE(Step(ctx, *m, batch, loss, grads, nullptr, loss_scale));
  DT_ASSERT_OK(Fetch(ctx, m->losses(), losses));
}

// CUDA f32 vs the CPU f64 reference from the same init: per-token losses max abs err <= 1e-5 * scale; the gradient
// (fp32 GEMMs without TF32, atomics in the embedding backward) within 1e-4 relative Frobenius error.
TEST(Gpt2Cuda, F32MatchesCpu) {
  DT_SKIP_WITHOUT_CUDA();
  auto cpu = Cpu();
  std::unique_ptr<DeviceContext> gpu;
  DT_ASSERT_OK(DeviceContext::CreateCuda(0, &gpu));
  Gpt2Options ref = Small();
  ref.dtype = DType::kF64;
  double want_loss = 0, got_loss = 0;
  std::vector<double> want_losses, got_losses, want_grads, got_grads;
  ASSERT_NO_FATAL_FAILURE(RunSmall(*cpu, ref, &want_loss, &want_losses, &want_grads));
  ASSERT_NO_FATAL_FAILURE(RunSmall(*gpu, Small(), &got_loss, &got_losses, &got_grads));
  EXPECT_LE(testing::MaxAbsDiff(got_losses, want_losses), 1e-5 * testing::Scale(want_losses));
  EXPECT_LE(testing::RelFrobenius(got_grads, want_grads), 1e-4);
}

// CUDA bf16 (bf16 activations and GEMM inputs, f32 master params and grads) vs CPU f32 from the same init. bf16
// keeps 8 mantissa bits (2^-9 relative rounding per value), compounded over 2 blocks: mean loss within 1e-2,
// per-token losses within 5e-2 * scale, gradient within 5e-2 relative Frobenius error overall.
TEST(Gpt2Cuda, Bf16MatchesCpuF32) {
  DT_SKIP_WITHOUT_CUDA();
  auto cpu = Cpu();
  std::unique_ptr<DeviceContext> gpu;
  DT_ASSERT_OK(DeviceContext::CreateCuda(0, &gpu));
  double want_loss = 0;
  std::vector<double> want_losses, want_grads;
  ASSERT_NO_FATAL_FAILURE(RunSmall(*cpu, Small(), &want_loss, &want_losses, &want_grads));
  for (bool fused : {false, true}) {  // the separate cross-entropy backward, and the fused classifier
    Gpt2Options bf16 = Small();
    bf16.precision = Precision::kBf16;
    bf16.fused_classifier = fused;
    double got_loss = 0;
    std::vector<double> got_losses, got_grads;
    ASSERT_NO_FATAL_FAILURE(RunSmall(*gpu, bf16, &got_loss, &got_losses, &got_grads));
    EXPECT_NEAR(got_loss, want_loss, 1e-2) << "fused " << fused;
    EXPECT_LE(testing::MaxAbsDiff(got_losses, want_losses), 5e-2 * testing::Scale(want_losses)) << "fused " << fused;
    EXPECT_LE(testing::RelFrobenius(got_grads, want_grads), 5e-2) << "fused " << fused;
  }
}

// CUDA with the chunked loss (chunks of 100 over B*T = 256 tokens: 100, 100, 56), f32 and bf16, against the unchunked
// run of the same precision on the same device: per-token losses within 1e-6 * scale (f32) and 1e-3 * scale (16-bit:
// the same logits rows up to the GEMM's algorithm for another M), the gradient within 1e-5 (f32) and 1e-2 (16-bit:
// dwte's GEMM sums in another order) relative Frobenius error.
TEST(Gpt2Cuda, ChunkedLossMatchesUnchunked) {
  DT_SKIP_WITHOUT_CUDA();
  std::unique_ptr<DeviceContext> gpu;
  DT_ASSERT_OK(DeviceContext::CreateCuda(0, &gpu));
  for (Precision p : {Precision::kFp32, Precision::kBf16}) {
    const bool f32 = p == Precision::kFp32;
    Gpt2Options o = Small();
    o.fused_classifier = true;
    o.precision = p;
    double want_loss = 0, got_loss = 0;
    std::vector<double> want_losses, want_grads, got_losses, got_grads;
    ASSERT_NO_FATAL_FAILURE(RunSmall(*gpu, o, &want_loss, &want_losses, &want_grads));
    o.loss_chunk_tokens = 100;
    ASSERT_NO_FATAL_FAILURE(RunSmall(*gpu, o, &got_loss, &got_losses, &got_grads));
    EXPECT_LE(testing::MaxAbsDiff(got_losses, want_losses), (f32 ? 1e-6 : 1e-3) * testing::Scale(want_losses))
        << "f32 " << f32;
    EXPECT_LE(testing::RelFrobenius(got_grads, want_grads), f32 ? 1e-5 : 1e-2) << "f32 " << f32;
  }
}

// CUDA fp16 (fp16 activations and GEMM inputs, f32 master params and grads) vs CPU f32 from the same init, with a
// loss scale of 2^10 (as LossScaler would apply; a power of two, so dividing it out is exact). fp16 keeps 11
// mantissa bits (2^-11 relative rounding, 4x finer than bf16) over the same 2 blocks: half of bf16's tolerances.
TEST(Gpt2Cuda, Fp16MatchesCpuF32) {
  DT_SKIP_WITHOUT_CUDA();
  auto cpu = Cpu();
  std::unique_ptr<DeviceContext> gpu;
  DT_ASSERT_OK(DeviceContext::CreateCuda(0, &gpu));
  // Head size 64: fp16 attention runs only on the flash kernels (hs 64 or 128).
  Gpt2Options ref = Small();
  ref.n_head = 1;
  Gpt2Options fp16 = ref;
  fp16.precision = Precision::kFp16;
  double want_loss = 0, got_loss = 0;
  std::vector<double> want_losses, got_losses, want_grads, got_grads;
  ASSERT_NO_FATAL_FAILURE(RunSmall(*cpu, ref, &want_loss, &want_losses, &want_grads));
  ASSERT_NO_FATAL_FAILURE(RunSmall(*gpu, fp16, &got_loss, &got_losses, &got_grads, 1024.0f));
  EXPECT_NEAR(got_loss, want_loss, 5e-3);
  EXPECT_LE(testing::MaxAbsDiff(got_losses, want_losses), 2.5e-2 * testing::Scale(want_losses));
  EXPECT_LE(testing::RelFrobenius(got_grads, want_grads), 2.5e-2);
}

TEST(Gpt2, RejectsBadOptions) {
  auto cpu = Cpu();
  std::unique_ptr<Gpt2> m;
  Gpt2Options o = Tiny();
  o.n_head = 3;  // 16 % 3 != 0
  EXPECT_EQ(Gpt2::Create(*cpu, o, 1, 8, &m).code(), Status::Code::kInvalidArgument);
  EXPECT_EQ(Gpt2::Create(*cpu, Tiny(), 1, 9, &m).code(), Status::Code::kInvalidArgument);  // T > max_seq_len
  o = Tiny();
  o.precision = Precision::kBf16;  // CUDA only
  EXPECT_EQ(Gpt2::Create(*cpu, o, 1, 8, &m).code(), Status::Code::kInvalidArgument);
  o.precision = Precision::kFp16;  // CUDA only
  EXPECT_EQ(Gpt2::Create(*cpu, o, 1, 8, &m).code(), Status::Code::kInvalidArgument);
}

}  // namespace
}  // namespace dtrain::models
