// Tests of models/llama: the parameter layout (names, shapes, forward order, the derived padded vocabulary, tied and
// untied heads), the init, the loss at init (padded columns masked), finite-difference gradients of the whole model
// (CPU f64; grouped-query and multi-head attention, tied and untied), recompute and the fused classifier giving the
// same gradients, the chunked loss (loss_chunk_tokens) giving the unchunked losses, gradients and eval scores and
// refusing what it cannot serve, the reverse-layout ready order, AdamW steps reducing the loss; on a GPU, CUDA f32 and
// bf16 against the CPU, chunked against unchunked, the per-layer weight cast against the step's, and a CUDA-graph
// replay of the step (unchunked and chunked) against the eager step. The spec and the HF semantics: llama_spec_test.cc.
#include "models/llama.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "core/check.h"
#include "core/device_context.h"
#include "kernels/bf16_round.h"
#include "kernels/matmul_fp8.h"
#include "kernels/optim_update.h"
#include "models/memory_plan.h"
#include "tests/testing/grad_check.h"
#if DT_HAVE_CUDA
#include "core/cuda_graph.h"
#endif

namespace dtrain::models {
namespace {

using testing::Fetch;
using testing::MakeTensor;

// 2 layers, 4 query heads over 2 KV heads (head size 4), C = 16, F = 24, T = 8, vocab 61 (padded to 128).
LlamaOptions Tiny() {
  LlamaOptions o;
  o.vocab_size = 61;
  o.max_seq_len = 8;
  o.n_layer = 2;
  o.n_head = 4;
  o.n_kv_head = 2;
  o.hidden = 16;
  o.ffn_hidden = 24;
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

double MaxAbs(const std::vector<double>& v) {
  double m = 0;
  for (double e : v) m = std::max(m, std::fabs(e));
  return m;
}

// One Forward/Backward (with `loss_scale`, divided out of the returned grads) from zeroed grads; returns the mean
// loss, the grads and the ready order.
void Step(DeviceContext& ctx, Llama& m, const Batch& batch, double* loss, std::vector<double>* grads,
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

TEST(Llama, ParamLayoutUsesHfNamesInForwardOrderWithAPaddedVocabulary) {
  auto cpu = Cpu();
  for (bool tied : {true, false}) {
    LlamaOptions o = Tiny();
    o.tie_embeddings = tied;
    std::unique_ptr<Llama> m;
    DT_ASSERT_OK(Llama::Create(*cpu, o, 2, 8, &m));
    const auto& p = m->param_infos();
    ASSERT_EQ(p.size(), 1u + 6u * 2u + 1u + (tied ? 0u : 1u));
    EXPECT_EQ(p[0].name, "model.embed_tokens.weight");
    EXPECT_EQ(p[0].shape, (std::vector<int64_t>{128, 16}));  // 61 rounded up to a multiple of 128
    EXPECT_EQ(p[1].name, "model.layers.0.input_layernorm.weight");
    EXPECT_EQ(p[1].shape, (std::vector<int64_t>{16}));
    EXPECT_EQ(p[2].name, "model.layers.0.self_attn.qkv_proj.weight");
    EXPECT_EQ(p[2].shape, (std::vector<int64_t>{(4 + 2 * 2) * 4, 16}));  // q | k | v rows
    EXPECT_EQ(p[3].name, "model.layers.0.self_attn.o_proj.weight");
    EXPECT_EQ(p[3].shape, (std::vector<int64_t>{16, 16}));
    EXPECT_EQ(p[4].name, "model.layers.0.post_attention_layernorm.weight");
    EXPECT_EQ(p[5].name, "model.layers.0.mlp.gate_up_proj.weight");
    EXPECT_EQ(p[5].shape, (std::vector<int64_t>{48, 16}));  // gate | up rows
    EXPECT_EQ(p[6].name, "model.layers.0.mlp.down_proj.weight");
    EXPECT_EQ(p[6].shape, (std::vector<int64_t>{16, 24}));
    EXPECT_EQ(p[7].name, "model.layers.1.input_layernorm.weight");
    EXPECT_EQ(p[13].name, "model.norm.weight");
    if (!tied) {
      EXPECT_EQ(p[14].name, "lm_head.weight");
      EXPECT_EQ(p[14].shape, (std::vector<int64_t>{128, 16}));
    }
    int64_t offset = 0;
    for (const ParamInfo& info : p) {
      EXPECT_EQ(info.offset, offset) << info.name;
      EXPECT_EQ(info.numel, Tensor::NumelOf(info.shape)) << info.name;
      offset += info.numel;
    }
    EXPECT_EQ(m->params().numel(), offset);
    const int64_t layer = 16 + 32 * 16 + 16 * 16 + 16 + 48 * 16 + 16 * 24;
    EXPECT_EQ(offset, 128 * 16 * (tied ? 1 : 2) + 2 * layer + 16) << "tied " << tied;
  }
  EXPECT_EQ(Llama::PaddedVocab(256), 256);
  EXPECT_EQ(Llama::PaddedVocab(49152), 49152);
  EXPECT_EQ(Llama::PaddedVocab(128256), 128256);
  EXPECT_EQ(Llama::PaddedVocab(50257), 50304);
}

// N(0, 0.02) weights, o_proj/down_proj N(0, 0.02 / sqrt(2 L)), norms 1; same seed, same values.
TEST(Llama, InitIsNormalWithScaledResidualProjectionsAndDeterministic) {
  auto cpu = Cpu();
  LlamaOptions o = Tiny();
  o.hidden = 64;
  o.ffn_hidden = 128;
  std::unique_ptr<Llama> a, b;
  DT_ASSERT_OK(Llama::Create(*cpu, o, 1, 8, &a));
  DT_ASSERT_OK(Llama::Create(*cpu, o, 1, 8, &b));
  DT_ASSERT_OK(a->InitParams(7));
  DT_ASSERT_OK(b->InitParams(7));
  ASSERT_EQ(std::memcmp(a->params().data(), b->params().data(), a->params().nbytes()), 0);
  const float* w = a->params().data<float>();
  for (const ParamInfo& p : a->param_infos()) {
    if (p.name.find("norm") != std::string::npos) {
      for (int64_t k = 0; k < p.numel; ++k) ASSERT_EQ(w[p.offset + k], 1.0f) << p.name;
      continue;
    }
    ASSERT_GE(p.numel, 4096) << p.name;  // enough samples for a 10% check of the standard deviation
    double s = 0, s2 = 0;
    for (int64_t k = 0; k < p.numel; ++k) {
      s += w[p.offset + k];
      s2 += static_cast<double>(w[p.offset + k]) * w[p.offset + k];
    }
    const double sd = std::sqrt(s2 / p.numel);
    EXPECT_NEAR(s / p.numel, 0.0, 0.1 * sd) << p.name;
    const bool proj = p.name.find("o_proj") != std::string::npos || p.name.find("down_proj") != std::string::npos;
    const double want = proj ? 0.02 / 2.0 : 0.02;  // sqrt(2 * 2 layers)
    EXPECT_NEAR(sd, want, 0.1 * want) << p.name;
  }
}

// At init the logits are ~0, so the loss is ~ln(vocab); and it is the cross-entropy over the first 61 columns only.
TEST(LlamaCpu, InitialLossIsLogVocabWithPaddedColumnsMasked) {
  auto cpu = Cpu();
  std::unique_ptr<Llama> m;
  DT_ASSERT_OK(Llama::Create(*cpu, Tiny(), 4, 8, &m));
  DT_ASSERT_OK(m->InitParams(1234));
  Batch batch;
  ASSERT_NO_FATAL_FAILURE(MakeBatch(*cpu, 4, 8, 61, 1, &batch));
  m->set_training(false);  // eval mode keeps the logits
  DT_ASSERT_OK(m->Forward(batch.inputs, batch.targets));
  std::vector<double> losses, logits, targets;
  DT_ASSERT_OK(Fetch(*cpu, m->losses(), &losses));
  DT_ASSERT_OK(Fetch(*cpu, m->logits(), &logits));
  DT_ASSERT_OK(Fetch(*cpu, batch.targets, &targets));
  ASSERT_EQ(losses.size(), 32u);
  ASSERT_EQ(logits.size(), 32u * 128u);
  EXPECT_NEAR(Mean(losses), std::log(61.0), 0.1);
  for (size_t i = 0; i < losses.size(); ++i) {
    double mx = -INFINITY, sum = 0;
    for (int j = 0; j < 61; ++j) mx = std::max(mx, logits[i * 128 + j]);
    for (int j = 0; j < 61; ++j) sum += std::exp(logits[i * 128 + j] - mx);
    const double want = std::log(sum) + mx - logits[i * 128 + static_cast<int>(targets[i])];
    EXPECT_NEAR(losses[i], want, 1e-5) << "token " << i;
  }
}

// The whole model in f64: d(mean loss)/d(params) against central differences, at random (not init) parameters so
// attention, SwiGLU, RoPE and RMSNorm are well away from linear (norm weights around 1). Up to 12 elements of every
// parameter tensor are checked, for grouped-query (NKV 2 < NH 4) and multi-head (NKV = NH) attention, tied and
// untied heads.
TEST(LlamaCpu, GradientMatchesFiniteDifferences) {
  auto cpu = Cpu();
  struct Case {
    int64_t n_kv_head;
    bool tied;
  };
  for (const Case& c : {Case{2, true}, Case{4, true}, Case{2, false}}) {
    SCOPED_TRACE("n_kv_head " + std::to_string(c.n_kv_head) + (c.tied ? ", tied" : ", untied"));
    LlamaOptions o = Tiny();
    o.n_kv_head = c.n_kv_head;
    o.tie_embeddings = c.tied;
    o.dtype = DType::kF64;
    std::unique_ptr<Llama> m;
    DT_ASSERT_OK(Llama::Create(*cpu, o, 2, 8, &m));
    const int64_t np = m->params().numel();
    std::vector<double> base = testing::RandomVector(np, 3, -0.3, 0.3);
    for (const ParamInfo& p : m->param_infos()) {
      if (p.name.find("norm") == std::string::npos) continue;
      for (int64_t k = 0; k < p.numel; ++k) base[p.offset + k] += 1.0;
    }
    double* params = m->params().data<double>();
    std::memcpy(params, base.data(), np * sizeof(double));
    Batch batch;
    ASSERT_NO_FATAL_FAILURE(MakeBatch(*cpu, 2, 8, 61, 5, &batch));
    double loss0 = 0;
    std::vector<double> grads;
    ASSERT_NO_FATAL_FAILURE(Step(*cpu, *m, batch, &loss0, &grads));

    std::vector<int64_t> idx;
    for (const ParamInfo& p : m->param_infos()) {
      const int64_t stride = std::max<int64_t>(1, p.numel / 12);
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
}

// Activation checkpointing: full layers re-run their forward in backward, selective ones their RMSNorm outputs and
// SwiGLU product: the same arithmetic, so bit-identical gradients for every policy and per-layer mix (full on the first
// layer only, the other none or selective; full everywhere, selective everywhere), also with gradients accumulated
// over two micro-batches; every variant announces every parameter exactly once, in reverse layout order (embed_tokens
// last; lm_head first when untied).
TEST(LlamaCpu, RecomputeGivesBitIdenticalGradsAndReverseReadyOrder) {
  auto cpu = Cpu();
  for (bool tied : {true, false}) {
    LlamaOptions o = Tiny();
    o.tie_embeddings = tied;
    std::unique_ptr<Llama> plain;
    DT_ASSERT_OK(Llama::Create(*cpu, o, 2, 8, &plain));
    DT_ASSERT_OK(plain->InitParams(11));
    Batch batch, batch2;
    ASSERT_NO_FATAL_FAILURE(MakeBatch(*cpu, 2, 8, 61, 9, &batch));
    ASSERT_NO_FATAL_FAILURE(MakeBatch(*cpu, 2, 8, 61, 19, &batch2));
    double la = 0;
    std::vector<double> ga, ga2;
    std::vector<int> oa;
    ASSERT_NO_FATAL_FAILURE(Step(*cpu, *plain, batch, &la, &ga, &oa));
    const int np = static_cast<int>(plain->param_infos().size());
    ASSERT_EQ(static_cast<int>(oa.size()), np);
    for (int k = 0; k < np; ++k) EXPECT_EQ(oa[k], np - 1 - k) << "position " << k << " tied " << tied;
    // Two accumulated micro-batches (Step zeroes first; the second Backward adds).
    DT_ASSERT_OK(plain->Forward(batch2.inputs, batch2.targets));
    DT_ASSERT_OK(plain->Backward(1.0f, nullptr));
    DT_ASSERT_OK(Fetch(*cpu, plain->grads(), &ga2));
    const std::pair<int64_t, bool> variants[] = {{2, false}, {0, true}, {2, true}, {1, false}, {1, true}};
    for (const auto& [full_layers, selective] : variants) {
      SCOPED_TRACE("full_layers " + std::to_string(full_layers) + ", selective " + std::to_string(selective) +
                   (tied ? ", tied" : ", untied"));
      LlamaOptions r = o;
      r.full_layers = full_layers;
      r.selective = selective;
      std::unique_ptr<Llama> m;
      DT_ASSERT_OK(Llama::Create(*cpu, r, 2, 8, &m));
      DT_ASSERT_OK(m->InitParams(11));
      double lb = 0;
      std::vector<double> gb, gb2;
      std::vector<int> ob;
      ASSERT_NO_FATAL_FAILURE(Step(*cpu, *m, batch, &lb, &gb, &ob));
      EXPECT_EQ(la, lb);
      EXPECT_EQ(oa, ob);
      ASSERT_EQ(ga.size(), gb.size());
      for (size_t i = 0; i < ga.size(); ++i) ASSERT_EQ(ga[i], gb[i]) << "flat index " << i;
      DT_ASSERT_OK(m->Forward(batch2.inputs, batch2.targets));
      DT_ASSERT_OK(m->Backward(1.0f, nullptr));
      DT_ASSERT_OK(Fetch(*cpu, m->grads(), &gb2));
      for (size_t i = 0; i < ga2.size(); ++i) ASSERT_EQ(ga2[i], gb2[i]) << "accumulated, flat index " << i;
    }
  }
}

// The fused classifier (the forward writes d(mean loss)/d(logits) over the logits; the loss scale goes into the
// LM-head GEMMs) computes the same gradient as the separate backward pass: f64, loss scale 4 (exact to divide out).
TEST(LlamaCpu, FusedClassifierGivesTheTwoPassGradients) {
  auto cpu = Cpu();
  LlamaOptions o = Tiny();
  o.dtype = DType::kF64;
  std::unique_ptr<Llama> plain, fused;
  DT_ASSERT_OK(Llama::Create(*cpu, o, 2, 8, &plain));
  o.fused_classifier = true;
  DT_ASSERT_OK(Llama::Create(*cpu, o, 2, 8, &fused));
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
}

// The chunked loss (loss_chunk_tokens: the LM head, the fused cross-entropy and the head's backward in the training
// forward, over row chunks of the B*T = 16 tokens) against the unchunked fused classifier, fp32: per-token losses
// and the gradient equal within 1e-6 relative (only the summation order of the head's gradient may change; the CPU
// GEMM adds row by row straight into C, so here it does not, and the values print equal), the same ready order; tied
// and untied; chunks of 5 (not dividing 16: 5, 5, 5, 1), 16 and 64 (> B*T: one chunk); one step at scale 1, then two
// micro-batches accumulated at scale 1/2 each (told by set_backward_scale, as RunStepBody does).
TEST(LlamaCpu, ChunkedLossGivesTheUnchunkedLossesAndGradients) {
  auto cpu = Cpu();
  Batch batch, batch2;
  ASSERT_NO_FATAL_FAILURE(MakeBatch(*cpu, 2, 8, 61, 9, &batch));
  ASSERT_NO_FATAL_FAILURE(MakeBatch(*cpu, 2, 8, 61, 19, &batch2));
  // One step, then `a` and `b` accumulated at scale 1/2: losses of the step, grads of the step and of the pair.
  auto run = [&](Llama& m, std::vector<double>* losses, std::vector<double>* g1, std::vector<double>* g2,
                 std::vector<int>* order) {
    double loss = 0;
    ASSERT_NO_FATAL_FAILURE(Step(*cpu, m, batch, &loss, g1, order));
    DT_ASSERT_OK(Fetch(*cpu, m.losses(), losses));
    DT_ASSERT_OK(m.grads().SetZero(cpu->stream()));
    m.set_backward_scale(0.5f);
    for (const Batch* b : {&batch, &batch2}) {
      DT_ASSERT_OK(m.Forward(b->inputs, b->targets));
      DT_ASSERT_OK(m.Backward(0.5f, nullptr));
    }
    m.set_backward_scale(1.0f);
    DT_ASSERT_OK(Fetch(*cpu, m.grads(), g2));
  };
  for (bool tied : {true, false}) {
    LlamaOptions o = Tiny();
    o.tie_embeddings = tied;
    o.fused_classifier = true;
    std::unique_ptr<Llama> plain;
    DT_ASSERT_OK(Llama::Create(*cpu, o, 2, 8, &plain));
    DT_ASSERT_OK(plain->InitParams(13));
    std::vector<double> want_losses, want_g1, want_g2;
    std::vector<int> want_order;
    ASSERT_NO_FATAL_FAILURE(run(*plain, &want_losses, &want_g1, &want_g2, &want_order));
    ASSERT_GT(MaxAbs(want_g1), 1e-4);  // a gradient to compare (not all zero)
    ASSERT_GT(MaxAbs(want_g2), 1e-4);
    for (int64_t chunk : {5, 16, 64}) {
      SCOPED_TRACE("chunk " + std::to_string(chunk) + (tied ? ", tied" : ", untied"));
      LlamaOptions c = o;
      c.loss_chunk_tokens = chunk;
      std::unique_ptr<Llama> m;
      DT_ASSERT_OK(Llama::Create(*cpu, c, 2, 8, &m));
      DT_ASSERT_OK(m->InitParams(13));
      EXPECT_EQ(m->logits().dim(0), std::min<int64_t>(chunk, 16));  // only [chunk, Vp] logits exist
      std::vector<double> losses, g1, g2;
      std::vector<int> order;
      ASSERT_NO_FATAL_FAILURE(run(*m, &losses, &g1, &g2, &order));
      EXPECT_EQ(order, want_order);
      ASSERT_EQ(losses.size(), want_losses.size());
      EXPECT_LE(testing::MaxAbsDiff(losses, want_losses), 1e-6 * MaxAbs(want_losses));
      ASSERT_EQ(g1.size(), want_g1.size());
      EXPECT_LE(testing::MaxAbsDiff(g1, want_g1), 1e-6 * MaxAbs(want_g1));
      EXPECT_LE(testing::MaxAbsDiff(g2, want_g2), 1e-6 * MaxAbs(want_g2));
      std::printf(
          "chunk %lld %s: max |dloss| %.3g of %.3g, max |dgrad| %.3g of %.3g (step), %.3g of %.3g (2 micro-batches)\n",
          static_cast<long long>(chunk), tied ? "tied" : "untied", testing::MaxAbsDiff(losses, want_losses),
          MaxAbs(want_losses), testing::MaxAbsDiff(g1, want_g1), MaxAbs(want_g1), testing::MaxAbsDiff(g2, want_g2),
          MaxAbs(want_g2));
    }
  }
}

// The chunked loss's eval: EvalBatch scores the chunks' argmax (the whole logits never exist) as the unchunked model
// scores its logits' argmax: the same loss sum, correct count and count, over the real samples only.
TEST(LlamaCpu, ChunkedLossEvalScoresLikeTheUnchunkedModel) {
  auto cpu = Cpu();
  LlamaOptions o = Tiny();
  std::unique_ptr<Llama> plain, chunked;
  DT_ASSERT_OK(Llama::Create(*cpu, o, 3, 8, &plain));
  o.loss_chunk_tokens = 7;
  DT_ASSERT_OK(Llama::Create(*cpu, o, 3, 8, &chunked));
  DT_ASSERT_OK(plain->InitParams(3));
  DT_ASSERT_OK(chunked->InitParams(3));
  // Targets: the unchunked model's prediction at even tokens, random ones at odd tokens, so the correct count is
  // neither 0 nor all by construction.
  Batch batch;
  ASSERT_NO_FATAL_FAILURE(MakeBatch(*cpu, 3, 8, 61, 41, &batch));
  plain->set_training(false);
  DT_ASSERT_OK(plain->Forward(batch.inputs, batch.targets));
  std::vector<double> logits, targets;
  DT_ASSERT_OK(Fetch(*cpu, plain->logits(), &logits));
  DT_ASSERT_OK(Fetch(*cpu, batch.targets, &targets));
  const int64_t vp = plain->logits().dim(1);
  for (int64_t i = 0; i < 24; i += 2) {
    const auto row = logits.begin() + i * vp;
    targets[i] = static_cast<double>(std::max_element(row, row + 61) - row);
  }
  DT_ASSERT_OK(MakeTensor(*cpu, DType::kI32, {3, 8}, targets, &batch.targets));
  double want_sum = 0, got_sum = 0;
  int64_t want_correct = 0, got_correct = 0, want_count = 0, got_count = 0;
  for (int round = 0; round < 2; ++round) {  // the second round after a training step on the chunked model
    plain->set_training(false);
    chunked->set_training(false);
    DT_ASSERT_OK(plain->EvalBatch(*cpu, batch.inputs, batch.targets, 2, &want_sum, &want_correct, &want_count));
    DT_ASSERT_OK(chunked->EvalBatch(*cpu, batch.inputs, batch.targets, 2, &got_sum, &got_correct, &got_count));
    EXPECT_EQ(got_count, want_count);
    EXPECT_EQ(got_correct, want_correct);
    EXPECT_NEAR(got_sum, want_sum, 1e-6 * std::abs(want_sum));
    // An eval Forward leaves no head gradient: Backward refuses (the head's backward runs in a training Forward).
    EXPECT_EQ(chunked->Backward(1.0f, nullptr).code(), Status::Code::kFailedPrecondition);
    chunked->set_training(true);
    plain->set_training(true);
    double loss = 0;
    std::vector<double> g;
    ASSERT_NO_FATAL_FAILURE(Step(*cpu, *chunked, batch, &loss, &g));
    ASSERT_NO_FATAL_FAILURE(Step(*cpu, *plain, batch, &loss, &g));
  }
  EXPECT_EQ(want_count, 2 * 2 * 8);
  EXPECT_GE(want_correct, 8);  // the first round's even tokens of the 2 real samples at least
  EXPECT_LT(want_correct, want_count);
}

// The chunked loss applies the loss scale in Forward: a Backward at another scale than set_backward_scale told, or a
// second Backward for one Forward, is refused (FailedPrecondition) rather than giving a wrongly scaled head gradient.
TEST(LlamaCpu, ChunkedLossRefusesABackwardItCannotServe) {
  auto cpu = Cpu();
  LlamaOptions o = Tiny();
  o.loss_chunk_tokens = 4;
  std::unique_ptr<Llama> m;
  DT_ASSERT_OK(Llama::Create(*cpu, o, 2, 8, &m));
  DT_ASSERT_OK(m->InitParams(1));
  Batch batch;
  ASSERT_NO_FATAL_FAILURE(MakeBatch(*cpu, 2, 8, 61, 3, &batch));
  EXPECT_EQ(m->Backward(1.0f, nullptr).code(), Status::Code::kInvalidArgument);  // before any Forward (as unchunked)
  DT_ASSERT_OK(m->Forward(batch.inputs, batch.targets));                         // at the default scale, 1
  const Status wrong = m->Backward(0.5f, nullptr);
  EXPECT_EQ(wrong.code(), Status::Code::kFailedPrecondition);
  EXPECT_NE(wrong.ToString().find("model.llama.loss_chunk_tokens"), std::string::npos) << wrong.ToString();
  m->set_backward_scale(0.5f);
  DT_ASSERT_OK(m->Forward(batch.inputs, batch.targets));
  DT_ASSERT_OK(m->Backward(0.5f, nullptr));
  EXPECT_EQ(m->Backward(0.5f, nullptr).code(), Status::Code::kFailedPrecondition);  // one Backward per Forward
  o.loss_chunk_tokens = -1;
  EXPECT_EQ(Llama::Create(*cpu, o, 2, 8, &m).code(), Status::Code::kInvalidArgument);
}

// 40 AdamW steps (lr 1e-2) on one fixed batch: the model memorizes it, so the loss falls well below ln(61) = 4.11.
TEST(LlamaCpu, AdamWStepsReduceTheLossOnAFixedBatch) {
  auto cpu = Cpu();
  std::unique_ptr<Llama> m;
  DT_ASSERT_OK(Llama::Create(*cpu, Tiny(), 2, 8, &m));
  DT_ASSERT_OK(m->InitParams(1));
  Batch batch;
  ASSERT_NO_FATAL_FAILURE(MakeBatch(*cpu, 2, 8, 61, 3, &batch));
  const int64_t np = m->params().numel();
  Tensor exp_avg, exp_avg_sq;
  DT_ASSERT_OK(MakeTensor(*cpu, DType::kF32, {np}, std::vector<double>(np, 0.0), &exp_avg));
  DT_ASSERT_OK(MakeTensor(*cpu, DType::kF32, {np}, std::vector<double>(np, 0.0), &exp_avg_sq));
  double first = 0, loss = 0;
  std::vector<double> grads;
  for (int step = 1; step <= 40; ++step) {
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
  EXPECT_LT(loss, first - 1.0) << "first " << first << ", after 40 steps " << loss;
}

TEST(Llama, CreateRejectsBadOptions) {
  auto cpu = Cpu();
  std::unique_ptr<Llama> m;
  auto code = [&](const LlamaOptions& o, int64_t t = 8) { return Llama::Create(*cpu, o, 1, t, &m).code(); };
  LlamaOptions o = Tiny();
  o.n_kv_head = 3;  // 4 % 3 != 0
  EXPECT_EQ(code(o), Status::Code::kInvalidArgument);
  o = Tiny();
  o.n_head = 3;  // 16 % 3 != 0
  o.n_kv_head = 1;
  EXPECT_EQ(code(o), Status::Code::kInvalidArgument);
  o = Tiny();
  o.hidden = 12;  // head size 3: odd
  EXPECT_EQ(code(o), Status::Code::kInvalidArgument);
  EXPECT_EQ(code(Tiny(), 9), Status::Code::kInvalidArgument);  // T > max_seq_len
  o = Tiny();
  o.precision = Precision::kBf16;  // CUDA only
  EXPECT_EQ(code(o), Status::Code::kInvalidArgument);
  o.precision = Precision::kFp16;  // not supported
  EXPECT_EQ(code(o), Status::Code::kInvalidArgument);
}

// ---- CUDA ------------------------------------------------------------------------------------------------------

// A GPU-sized variant: head size 64 (the bf16 attention kernels run 64 and 128), 4 heads over 2 KV heads, T = 128.
LlamaOptions Small() {
  LlamaOptions o = Tiny();
  o.vocab_size = 200;
  o.max_seq_len = 128;
  o.hidden = 256;
  o.n_head = 4;
  o.n_kv_head = 2;
  o.ffn_hidden = 512;
  return o;
}

// Loss and grads of one step of `o` on ctx, from InitParams(21) on a fixed batch [2, 128].
void RunSmall(DeviceContext& ctx, const LlamaOptions& o, double* loss, std::vector<double>* losses,
              std::vector<double>* grads) {
  std::unique_ptr<Llama> m;
  DT_ASSERT_OK(Llama::Create(ctx, o, 2, 128, &m));
  DT_ASSERT_OK(m->InitParams(21));
  Batch batch;
  ASSERT_NO_FATAL_FAILURE(MakeBatch(ctx, 2, 128, o.vocab_size, 17, &batch));
  ASSERT_NO_FATAL_FAILURE(Step(ctx, *m, batch, loss, grads));
  DT_ASSERT_OK(Fetch(ctx, m->losses(), losses));
}

// CUDA f32 vs the CPU f64 reference from the same init: per-token losses within 1e-5 * scale, the gradient within
// 1e-4 relative Frobenius error (fp32 GEMMs without TF32).
TEST(LlamaCuda, F32MatchesCpu) {
  DT_SKIP_WITHOUT_CUDA();
  auto cpu = Cpu();
  std::unique_ptr<DeviceContext> gpu;
  DT_ASSERT_OK(DeviceContext::CreateCuda(0, &gpu));
  LlamaOptions ref = Small();
  ref.dtype = DType::kF64;
  double want_loss = 0, got_loss = 0;
  std::vector<double> want_losses, got_losses, want_grads, got_grads;
  ASSERT_NO_FATAL_FAILURE(RunSmall(*cpu, ref, &want_loss, &want_losses, &want_grads));
  ASSERT_NO_FATAL_FAILURE(RunSmall(*gpu, Small(), &got_loss, &got_losses, &got_grads));
  EXPECT_LE(testing::MaxAbsDiff(got_losses, want_losses), 1e-5 * testing::Scale(want_losses));
  EXPECT_LE(testing::RelFrobenius(got_grads, want_grads), 1e-4);
}

// CUDA with the chunked loss (chunks of 100 over B*T = 256 tokens: 100, 100, 56), f32 and bf16, against the
// unchunked run of the same precision on the same device: per-token losses within 1e-6 * scale (f32) and 1e-3 *
// scale (bf16: the same bf16 logits rows; the fused kernel's row loop is the same), the gradient within 1e-5 (f32)
// and 1e-2 (bf16: dhead's bf16-input GEMM sums in another order) relative Frobenius error.
TEST(LlamaCuda, ChunkedLossMatchesUnchunked) {
  DT_SKIP_WITHOUT_CUDA();
  std::unique_ptr<DeviceContext> gpu;
  DT_ASSERT_OK(DeviceContext::CreateCuda(0, &gpu));
  for (bool bf16 : {false, true}) {
    LlamaOptions o = Small();
    o.fused_classifier = true;
    if (bf16) o.precision = Precision::kBf16;
    double want_loss = 0, got_loss = 0;
    std::vector<double> want_losses, want_grads, got_losses, got_grads;
    ASSERT_NO_FATAL_FAILURE(RunSmall(*gpu, o, &want_loss, &want_losses, &want_grads));
    o.loss_chunk_tokens = 100;
    ASSERT_NO_FATAL_FAILURE(RunSmall(*gpu, o, &got_loss, &got_losses, &got_grads));
    EXPECT_LE(testing::MaxAbsDiff(got_losses, want_losses), (bf16 ? 1e-3 : 1e-6) * testing::Scale(want_losses))
        << "bf16 " << bf16;
    EXPECT_LE(testing::RelFrobenius(got_grads, want_grads), bf16 ? 1e-2 : 1e-5) << "bf16 " << bf16;
  }
}

// CUDA bf16 (bf16 activations and GEMM inputs, f32 master params and grads) vs CPU f32 from the same init, with the
// separate cross-entropy backward, with the fused classifier, and with a mixed activation-checkpointing policy. Gpt2's
// bf16 tolerances (2 layers): mean loss within 1e-2, per-token losses within 5e-2 * scale, gradient within 5e-2
// relative Frobenius error.
TEST(LlamaCuda, Bf16MatchesCpuF32) {
  DT_SKIP_WITHOUT_CUDA();
  auto cpu = Cpu();
  std::unique_ptr<DeviceContext> gpu;
  DT_ASSERT_OK(DeviceContext::CreateCuda(0, &gpu));
  double want_loss = 0;
  std::vector<double> want_losses, want_grads;
  ASSERT_NO_FATAL_FAILURE(RunSmall(*cpu, Small(), &want_loss, &want_losses, &want_grads));
  for (int variant = 0; variant < 3; ++variant) {
    // 0, 1: none, with the separate and the fused classifier; 2: fused, the first layer full and the other selective
    // (activation checkpointing's shared sets on the GPU).
    const bool fused = variant > 0;
    SCOPED_TRACE("fused " + std::to_string(fused) + (variant == 2 ? ", full on layer 0, selective on layer 1" : ""));
    LlamaOptions bf16 = Small();
    bf16.precision = Precision::kBf16;
    bf16.fused_classifier = fused;
    if (variant == 2) {
      bf16.full_layers = 1;
      bf16.selective = true;
    }
    double got_loss = 0;
    std::vector<double> got_losses, got_grads;
    ASSERT_NO_FATAL_FAILURE(RunSmall(*gpu, bf16, &got_loss, &got_losses, &got_grads));
    EXPECT_NEAR(got_loss, want_loss, 1e-2);
    EXPECT_LE(testing::MaxAbsDiff(got_losses, want_losses), 5e-2 * testing::Scale(want_losses));
    EXPECT_LE(testing::RelFrobenius(got_grads, want_grads), 5e-2);
  }
}

// `steps` steps of `o` on ctx from InitParams(21) on RunSmall's batch, each followed by an AdamW update (lr 1e-2,
// beta2 0.95, f32 state, stochastic-rounding seed 5); the mean loss and the grads of every step go to each_step. The
// model stays in *out.
void AdamWSteps(DeviceContext& ctx, const LlamaOptions& o, int steps,
                const std::function<void(int step, double loss, const std::vector<double>& grads)>& each_step,
                std::unique_ptr<Llama>* out) {
  DT_ASSERT_OK(Llama::Create(ctx, o, 2, 128, out));
  Llama& m = **out;
  DT_ASSERT_OK(m.InitParams(21));
  Batch batch;
  ASSERT_NO_FATAL_FAILURE(MakeBatch(ctx, 2, 128, o.vocab_size, 17, &batch));
  const int64_t np = m.params().numel();
  Tensor exp_avg, exp_avg_sq;
  DT_ASSERT_OK(MakeTensor(ctx, DType::kF32, {np}, std::vector<double>(np, 0.0), &exp_avg));
  DT_ASSERT_OK(MakeTensor(ctx, DType::kF32, {np}, std::vector<double>(np, 0.0), &exp_avg_sq));
  for (int step = 1; step <= steps; ++step) {
    double loss = 0;
    std::vector<double> grads;
    ASSERT_NO_FATAL_FAILURE(Step(ctx, m, batch, &loss, &grads));
    each_step(step, loss, grads);
    ops::AdamWHyper h;
    h.lr = 1e-2;
    h.beta2 = 0.95;
    h.step = step;
    h.sr_seed = 5;
    DT_ASSERT_OK(ops::AdamWUpdate(ctx, h, &m.params(), m.grads(), &exp_avg, &exp_avg_sq));
  }
}

// AdamWSteps' first and last losses and the first step's gradients.
struct StepsSummary {
  double first = 0, last = 0;
  std::vector<double> first_grads, losses;  // losses: every step's
};
void SummarizeAdamWSteps(DeviceContext& ctx, const LlamaOptions& o, int steps, StepsSummary* out,
                         std::unique_ptr<Llama>* m) {
  ASSERT_NO_FATAL_FAILURE(AdamWSteps(
      ctx, o, steps,
      [&](int step, double loss, const std::vector<double>& grads) {
        if (step == 1) {
          out->first = loss;
          out->first_grads = grads;
        }
        out->last = loss;
        out->losses.push_back(loss);
      },
      m));
}

// bf16 master weights (train.master_weights bf16): the params are the bf16 GEMM weights, the grads f32. From the same
// init, the first step equals the f32-master bf16 step bit for bit (the f32 masters' bf16 copy is the same RNE rounding
// of the same draws; the RMSNorm weights start at 1, exact in bf16, and the embedding rows are the same bf16 values).
// Then 20 AdamW steps each (f32 state; the bf16 masters rounded stochastically) on one fixed batch: both memorize it,
// and the bf16-master loss stays within 0.1 of the f32-master loss.
TEST(LlamaCuda, Bf16MastersStepMatchesF32MastersAndTrains) {
  DT_SKIP_WITHOUT_CUDA();
  std::unique_ptr<DeviceContext> gpu;
  DT_ASSERT_OK(DeviceContext::CreateCuda(0, &gpu));
  StepsSummary runs[2];  // [bf16 masters]
  for (int masters16 = 0; masters16 < 2; ++masters16) {
    LlamaOptions o = Small();
    o.precision = Precision::kBf16;
    o.bf16_masters = masters16 == 1;
    std::unique_ptr<Llama> m;
    ASSERT_NO_FATAL_FAILURE(SummarizeAdamWSteps(*gpu, o, 20, &runs[masters16], &m));
    EXPECT_EQ(m->params().dtype(), masters16 ? DType::kBF16 : DType::kF32);
    EXPECT_EQ(m->grads().dtype(), DType::kF32);
  }
  EXPECT_EQ(runs[1].first, runs[0].first);
  EXPECT_EQ(runs[1].first_grads, runs[0].first_grads);
  EXPECT_LT(runs[0].last, runs[0].first - 1.0);
  EXPECT_NEAR(runs[1].last, runs[0].last, 0.1) << "first " << runs[0].first;
}

// bf16 gradients (train.gradients bf16): from the same init, the first step's losses are the f32-gradient run's bit for
// bit (the forward does not read the gradients); each parameter's gradient is that run's within 2^-8 relative
// (Frobenius; one rounding is at most 2^-9 an element, the tied embedding and a chunked LM head take more than one),
// and the RMSNorm weights' are the f32 sums rounded to nearest, bit for bit. Then 20 AdamW steps each on one fixed
// batch: the first 3 losses within 1e-2 of each other, and both memorize it (at lr 1e-2 the two trajectories part
// later: an earlier version of this test saw one run's step-20 loss 0.1 from the other's). Over bf16 with f32
// masters, bf16 masters, and fp8 (every block linear; full layer 0, selective layer 1; untied, chunked loss).
TEST(LlamaCuda, Bf16GradsAreTheF32GradsRoundedAndTrain) {
  DT_SKIP_WITHOUT_CUDA();
  std::unique_ptr<DeviceContext> gpu;
  DT_ASSERT_OK(DeviceContext::CreateCuda(0, &gpu));
  const bool fp8_gpu = ops::CheckFp8Device(*gpu, "test").ok();
  struct Variant {
    const char* name;
    bool masters16, fp8;
  };
  for (const Variant& v : {Variant{"bf16", false, false}, Variant{"bf16 masters", true, false},
                           Variant{"fp8 all, full + selective, untied, chunked", false, true}}) {
    if (v.fp8 && !fp8_gpu) continue;
    SCOPED_TRACE(v.name);
    StepsSummary runs[2];  // [bf16 grads]
    std::vector<ParamInfo> infos;
    for (int grads16 = 0; grads16 < 2; ++grads16) {
      LlamaOptions o = Small();
      o.precision = v.fp8 ? Precision::kFp8 : Precision::kBf16;
      o.bf16_masters = v.masters16;
      o.bf16_grads = grads16 == 1;
      if (v.fp8) {
        DT_ASSERT_OK(ParseLlamaFp8Layers("all", o.hidden, &o.fp8_layers));
        o.full_layers = 1;
        o.selective = true;
        o.tie_embeddings = false;
        o.fused_classifier = true;
        o.loss_chunk_tokens = 100;
      }
      std::unique_ptr<Llama> m;
      ASSERT_NO_FATAL_FAILURE(SummarizeAdamWSteps(*gpu, o, 20, &runs[grads16], &m));
      EXPECT_EQ(m->grads().dtype(), grads16 ? DType::kBF16 : DType::kF32);
      infos = m->param_infos();
    }
    EXPECT_EQ(runs[1].first, runs[0].first);
    ASSERT_EQ(runs[1].first_grads.size(), runs[0].first_grads.size());
    for (const ParamInfo& p : infos) {
      double err2 = 0, norm2 = 0;
      int64_t exact = 0;
      for (int64_t i = p.offset; i < p.offset + p.numel; ++i) {
        const double want = runs[0].first_grads[static_cast<size_t>(i)];
        const double got = runs[1].first_grads[static_cast<size_t>(i)];
        err2 += (got - want) * (got - want);
        norm2 += want * want;
        exact += got == static_cast<double>(Bf16BitsToF32(RoundBf16Rne(static_cast<float>(want))));
      }
      const double rel = std::sqrt(err2 / std::max(norm2, 1e-300));
      const bool norm = p.name.find("norm.weight") != std::string::npos;
      std::printf("%s: %-40s rel. error %.2e, %.4f the f32 value rounded\n", v.name, p.name.c_str(), rel,
                  static_cast<double>(exact) / static_cast<double>(p.numel));
      EXPECT_LE(rel, 0x1p-8) << p.name;
      if (norm) {
        EXPECT_EQ(exact, p.numel) << p.name;
      }
    }
    std::printf("%s: loss f32 gradients %.6f -> %.6f, bf16 gradients %.6f -> %.6f\n", v.name, runs[0].first,
                runs[0].last, runs[1].first, runs[1].last);
    for (int i = 0; i < 3; ++i) EXPECT_NEAR(runs[1].losses[i], runs[0].losses[i], 1e-2) << "step " << i + 1;
    EXPECT_LT(runs[0].last, runs[0].first - 1.0);
    EXPECT_LT(runs[1].last, runs[1].first - 1.0);
  }
}

// train.precision fp8 with every block linear in FP8 (models/fp8_linears.h) against the CPU's f32 from the same init,
// with GPT-2 fp8's tolerances (gpt2_fp8_test.cc: e4m3/e5m2 keep 3/2 mantissa bits): mean loss within 3e-2, the
// gradient within 0.15 relative Frobenius error. Also: full on layer 0 and selective on layer 1 gives the same
// gradients bit for bit (the recompute re-quantizes the same values; selective skips what the FP8 linears do not
// read), bf16 masters run, fp8_layers none is bf16 bit for bit and all is not (the FP8 GEMMs ran).
TEST(LlamaCuda, Fp8MatchesCpuF32AndBf16) {
  DT_SKIP_WITHOUT_CUDA();
  std::unique_ptr<DeviceContext> gpu;
  DT_ASSERT_OK(DeviceContext::CreateCuda(0, &gpu));
  if (!ops::CheckFp8Device(*gpu, "test").ok()) GTEST_SKIP() << "needs a GPU with FP8 tensor cores (compute 8.9+)";
  auto cpu = Cpu();
  struct Run {
    double loss = 0;
    std::vector<double> losses, grads;
  } ref, bf16, fp8, fp8_ckpt, fp8_masters, none;
  ASSERT_NO_FATAL_FAILURE(RunSmall(*cpu, Small(), &ref.loss, &ref.losses, &ref.grads));
  LlamaOptions o = Small();
  o.fused_classifier = true;
  o.precision = Precision::kBf16;
  ASSERT_NO_FATAL_FAILURE(RunSmall(*gpu, o, &bf16.loss, &bf16.losses, &bf16.grads));
  o.precision = Precision::kFp8;
  DT_ASSERT_OK(ParseLlamaFp8Layers("all", o.hidden, &o.fp8_layers));
  ASSERT_NO_FATAL_FAILURE(RunSmall(*gpu, o, &fp8.loss, &fp8.losses, &fp8.grads));
  o.full_layers = 1;
  o.selective = true;
  ASSERT_NO_FATAL_FAILURE(RunSmall(*gpu, o, &fp8_ckpt.loss, &fp8_ckpt.losses, &fp8_ckpt.grads));
  o.full_layers = 0;
  o.selective = false;
  o.bf16_masters = true;
  ASSERT_NO_FATAL_FAILURE(RunSmall(*gpu, o, &fp8_masters.loss, &fp8_masters.losses, &fp8_masters.grads));
  o.bf16_masters = false;
  DT_ASSERT_OK(ParseLlamaFp8Layers("none", o.hidden, &o.fp8_layers));
  ASSERT_NO_FATAL_FAILURE(RunSmall(*gpu, o, &none.loss, &none.losses, &none.grads));
  const double bf16_grad = testing::RelFrobenius(bf16.grads, ref.grads);
  const double fp8_grad = testing::RelFrobenius(fp8.grads, ref.grads);
  std::cout << "[fp8] loss cpu f32 " << ref.loss << ", bf16 " << bf16.loss << ", fp8 " << fp8.loss
            << ", fp8 bf16 masters " << fp8_masters.loss << "; grad rel. Frobenius error vs f32: bf16 " << bf16_grad
            << ", fp8 " << fp8_grad << ", fp8 bf16 masters " << testing::RelFrobenius(fp8_masters.grads, ref.grads)
            << "\n";
  EXPECT_NEAR(fp8.loss, ref.loss, 3e-2);
  EXPECT_LE(fp8_grad, 0.15);
  EXPECT_NEAR(fp8_masters.loss, ref.loss, 3e-2);
  EXPECT_LE(testing::RelFrobenius(fp8_masters.grads, ref.grads), 0.15);
  EXPECT_EQ(fp8_ckpt.grads, fp8.grads);
  EXPECT_EQ(fp8_ckpt.losses, fp8.losses);
  EXPECT_EQ(none.grads, bf16.grads);
  EXPECT_NE(fp8.grads, bf16.grads);
}

// The FP8 linears' inputs live in buffers all layers share (LlamaSharedActsOf), the other activations per layer: with
// some linears in FP8 and 3 layers, no checkpointing, full checkpointing (one set refilled right before each layer's
// backward) and a full first layer with selective ones after all give the same bits, so no backward read a shared
// buffer that another layer had overwritten.
TEST(LlamaCuda, Fp8SharedInputsGiveTheBitsOfCheckpointing) {
  DT_SKIP_WITHOUT_CUDA();
  std::unique_ptr<DeviceContext> gpu;
  DT_ASSERT_OK(DeviceContext::CreateCuda(0, &gpu));
  if (!ops::CheckFp8Device(*gpu, "test").ok()) GTEST_SKIP() << "needs a GPU with FP8 tensor cores (compute 8.9+)";
  LlamaOptions o = Small();
  o.n_layer = 3;
  o.fused_classifier = true;
  o.precision = Precision::kFp8;
  struct Policy {
    int64_t full_layers;
    bool selective;
  };
  for (const char* layers : {"qkv,down", "o_proj,gate_up", "all"}) {
    DT_ASSERT_OK(ParseLlamaFp8Layers(layers, o.hidden, &o.fp8_layers));
    double loss = 0;
    std::vector<double> want_losses, want_grads;
    for (const Policy p : {Policy{0, false}, Policy{3, false}, Policy{1, true}, Policy{1, false}}) {
      SCOPED_TRACE(std::string(layers) + ", full layers " + std::to_string(p.full_layers) + ", selective " +
                   std::to_string(p.selective));
      o.full_layers = p.full_layers;
      o.selective = p.selective;
      std::vector<double> losses, grads;
      ASSERT_NO_FATAL_FAILURE(RunSmall(*gpu, o, &loss, &losses, &grads));
      if (want_grads.empty()) {
        want_losses = losses;
        want_grads = grads;
        continue;
      }
      EXPECT_EQ(losses, want_losses);
      EXPECT_EQ(grads, want_grads);
    }
  }
}

// model.llama.weight_cast layer (LlamaOptions::layer_cast): the bf16 copy holds the LM head and one layer, each layer
// cast right before its forward and its backward. Two steps with an AdamW update between (so the second step's casts
// must read the updated masters, the last layer's included) give the step cast's losses and gradients bit for bit:
// bf16 with no checkpointing, a full first layer with selective ones after, full everywhere, an untied head with the
// chunked loss, and fp8 (every block linear, its e4m3 weights from the f32 masters either way). First, that the option
// takes effect: Create allocates less by the copy of all layers but one (the caching allocator's count).
TEST(LlamaCuda, LayerCastGivesTheBitsOfTheStepCast) {
  DT_SKIP_WITHOUT_CUDA();
  std::unique_ptr<DeviceContext> gpu;
  DT_ASSERT_OK(DeviceContext::CreateCuda(0, &gpu));
  const bool fp8_gpu = ops::CheckFp8Device(*gpu, "test").ok();
  struct Variant {
    const char* name;
    int64_t full_layers;
    bool selective, tied;
    int64_t chunk;
    bool fp8;
  };
  {  // The option takes effect: the layer-cast model's copy holds the head and one layer, not every layer.
    int64_t used[2] = {};
    for (int layer_cast = 0; layer_cast < 2; ++layer_cast) {
      LlamaOptions o = Small();
      o.n_layer = 3;
      o.precision = Precision::kBf16;
      o.layer_cast = layer_cast == 1;
      const int64_t before = gpu->memory_stats().bytes_in_use;
      std::unique_ptr<Llama> m;
      DT_ASSERT_OK(Llama::Create(*gpu, o, 2, 128, &m));
      used[layer_cast] = gpu->memory_stats().bytes_in_use - before;
    }
    const LlamaOptions o = Small();
    const int64_t c = o.hidden, f = o.ffn_hidden, hs = c / o.n_head, head = Llama::PaddedVocab(o.vocab_size) * c;
    const int64_t layer = (o.n_head + 2 * o.n_kv_head) * hs * c + c * c + 3 * f * c;  // qkv, o, gate|up, down
    MemoryPlanInputs in;
    in.cuda = true;  // the caching allocator's rounding
    EXPECT_EQ(used[0] - used[1], in.Bytes(head + 3 * layer, DType::kBF16) - in.Bytes(head + layer, DType::kBF16));
  }
  const Variant variants[] = {{"none", 0, false, true, 0, false},
                              {"full layer 0, selective", 1, true, true, 0, false},
                              {"full", 3, false, true, 0, false},
                              {"untied, chunked loss", 0, false, false, 100, false},
                              {"fp8 all, full layer 0, selective", 1, true, true, 0, true}};
  for (const Variant& v : variants) {
    if (v.fp8 && !fp8_gpu) continue;
    SCOPED_TRACE(v.name);
    std::vector<double> losses[2], grads[2];
    for (int layer_cast = 0; layer_cast < 2; ++layer_cast) {
      LlamaOptions o = Small();
      o.n_layer = 3;
      o.precision = v.fp8 ? Precision::kFp8 : Precision::kBf16;
      if (v.fp8) DT_ASSERT_OK(ParseLlamaFp8Layers("all", o.hidden, &o.fp8_layers));
      o.fused_classifier = true;
      o.full_layers = v.full_layers;
      o.selective = v.selective;
      o.tie_embeddings = v.tied;
      o.loss_chunk_tokens = v.chunk;
      o.layer_cast = layer_cast == 1;
      std::unique_ptr<Llama> m;
      ASSERT_NO_FATAL_FAILURE(AdamWSteps(
          *gpu, o, 2, [&](int, double, const std::vector<double>& g) { grads[layer_cast] = g; }, &m));
      DT_ASSERT_OK(Fetch(*gpu, m->losses(), &losses[layer_cast]));
    }
    EXPECT_EQ(losses[1], losses[0]);
    EXPECT_EQ(grads[1], grads[0]);
  }
}

// bf16 masters, bf16 gradients and the per-layer weight cast are mixed-precision options: refused on the CPU (fp32),
// named.
TEST(Llama, Bf16MastersGradsAndLayerCastNeedBf16OnCuda) {
  auto cpu = Cpu();
  for (int which = 0; which < 3; ++which) {
    std::unique_ptr<Llama> m;
    LlamaOptions o = Tiny();
    o.bf16_masters = which == 0;
    o.layer_cast = which == 1;
    o.bf16_grads = which == 2;
    const Status st = Llama::Create(*cpu, o, 1, 8, &m);
    EXPECT_EQ(st.code(), Status::Code::kInvalidArgument);
    const char* want = which == 0   ? "train.master_weights bf16 needs train.precision bf16"
                       : which == 1 ? "model.llama.weight_cast layer"
                                    : "train.gradients bf16 needs train.precision bf16";
    EXPECT_NE(st.message().find(want), std::string::npos) << st.ToString();
  }
}

#if DT_HAVE_CUDA
// The bf16 step (zero grads, forward, fused classifier, backward; also fp8's) captured once as a CUDA graph and
// replayed gives the eager step's loss and gradients bit for bit: nothing in Forward/Backward syncs the host or
// allocates outside the caching allocator once warm, and every kernel argument stays fixed. Attention runs dtrain's
// deterministic flash kernels (DTRAIN_ATTENTION=flash, set before the process's first attention call) so eager steps
// repeat exactly.
TEST(LlamaCuda, GraphedStepEqualsEagerStep) {
  DT_SKIP_WITHOUT_CUDA();
  std::unique_ptr<DeviceContext> gpu;
  DT_ASSERT_OK(DeviceContext::CreateCuda(0, &gpu));
  const bool fp8_gpu = ops::CheckFp8Device(*gpu, "test").ok();
  // bf16 unchunked and with the chunked loss (100, 100, 56 tokens); fp8 (every block linear) on an FP8 GPU.
  // The last: bf16 with the per-layer weight cast (layer_cast).
  const std::vector<std::pair<Precision, int64_t>> variants = {
      {Precision::kBf16, 0}, {Precision::kBf16, 100}, {Precision::kFp8, 0}, {Precision::kBf16, -1}};
  for (auto [precision, chunk] : variants) {
    if (precision == Precision::kFp8 && !fp8_gpu) continue;
    SCOPED_TRACE("fp8 " + std::to_string(precision == Precision::kFp8) + ", loss_chunk_tokens " +
                 std::to_string(chunk));
    LlamaOptions o = Small();
    o.layer_cast = chunk < 0;
    chunk = std::max<int64_t>(chunk, 0);
    o.precision = precision;
    if (precision == Precision::kFp8) DT_ASSERT_OK(ParseLlamaFp8Layers("all", o.hidden, &o.fp8_layers));
    o.fused_classifier = true;
    o.loss_chunk_tokens = chunk;
    std::unique_ptr<Llama> m;
    DT_ASSERT_OK(Llama::Create(*gpu, o, 2, 128, &m));
    DT_ASSERT_OK(m->InitParams(21));
    Batch batch;
    ASSERT_NO_FATAL_FAILURE(MakeBatch(*gpu, 2, 128, o.vocab_size, 17, &batch));
    auto step = [&]() -> Status {
      DT_RETURN_IF_ERROR(m->grads().SetZero(gpu->stream()));
      DT_RETURN_IF_ERROR(m->Forward(batch.inputs, batch.targets));
      return m->Backward(1.0f, nullptr);
    };
    std::vector<double> eager_grads, eager_losses, graph_grads, graph_losses;
    for (int i = 0; i < 2; ++i) DT_ASSERT_OK(step());  // warm: plans, workspaces, the allocator's cache
    DT_ASSERT_OK(Fetch(*gpu, m->grads(), &eager_grads));
    DT_ASSERT_OK(Fetch(*gpu, m->losses(), &eager_losses));
    auto pool = std::make_shared<CudaGraphPool>(gpu->device_allocator());
    std::unique_ptr<CudaGraph> graph;
    DT_ASSERT_OK(CudaGraph::Capture(gpu->stream(), pool, step, &graph));
    DT_ASSERT_OK(m->grads().SetZero(gpu->stream()));
    DT_ASSERT_OK(graph->Launch(gpu->stream()));
    DT_ASSERT_OK(graph->Launch(gpu->stream()));  // a replay zeroes the grads itself: the second equals the first
    DT_ASSERT_OK(Fetch(*gpu, m->grads(), &graph_grads));
    DT_ASSERT_OK(Fetch(*gpu, m->losses(), &graph_losses));
    EXPECT_EQ(graph_losses, eager_losses);
    ASSERT_EQ(graph_grads.size(), eager_grads.size());
    size_t differ = 0;
    for (size_t i = 0; i < graph_grads.size(); ++i) differ += graph_grads[i] != eager_grads[i];
    EXPECT_EQ(differ, 0u) << "of " << graph_grads.size() << " gradient elements";
  }
}
#endif

// Deterministic attention for this binary's CUDA tests (the graph test compares bit for bit); a user's setting wins.
const bool kFlashAttention = setenv("DTRAIN_ATTENTION", "flash", /*overwrite=*/0) == 0;

}  // namespace
}  // namespace dtrain::models
