#include "models/gpt2.h"

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "core/check.h"
#include "core/nvtx.h"
#include "kernels/attention.h"
#include "kernels/bias.h"
#include "kernels/elementwise.h"
#include "kernels/embedding.h"
#include "kernels/fp8.h"
#include "kernels/gelu.h"
#include "kernels/layernorm.h"
#include "kernels/matmul.h"
#include "kernels/softmax_xent.h"
#include "models/chunked_classifier.h"
#include "models/param_init.h"

namespace dtrain::models {

namespace {

constexpr float kLnEps = 1e-5f;  // GPT-2's layer_norm_epsilon

bool EndsWith(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// model.gpt2.fp8_layers' entries: the four block linears (Gpt2Linear order), then the LM head.
constexpr size_t kBlockLinears = 4;

bool HeadOn(const Fp8LayerSet& set) { return set.on.size() > kBlockLinears && set.on[kBlockLinears]; }

// The set as the blocks' Fp8Linears takes it (the LM head's entry dropped) or as the head's (its entry alone).
Fp8LayerSet BlockSet(const Fp8LayerSet& set) {
  Fp8LayerSet b = set;
  b.names.resize(std::min(b.names.size(), kBlockLinears));
  b.on.resize(std::min(b.on.size(), kBlockLinears));
  return b;
}
Fp8LayerSet HeadSet(const Fp8LayerSet& set) {
  Fp8LayerSet h;
  h.names = {"lm_head"};
  h.on = {HeadOn(set)};
  h.grad = set.grad;
  return h;
}
std::vector<Fp8LinearShape> HeadLinear(int64_t n_embd, int64_t padded_vocab) {
  return {{"lm_head", padded_vocab, n_embd}};
}

}  // namespace

std::vector<Fp8LinearShape> Gpt2Linears(int64_t n_embd) {
  const int64_t c = n_embd;
  return {{"qkv", 3 * c, c}, {"attn_proj", c, c}, {"fc", 4 * c, c}, {"fc_proj", c, 4 * c}};
}

// "auto": the linears whose FP8 forward + dgrad + wgrad beat bf16 at width n_embd on an H200 (B x T = 16 x 1024).
// Source: bench/results/2026-12-03-fp8-gemm-h200.md, "Net per layer" (with separate quantization passes): at 768
// attn_proj 0.78x, fc 1.02x, fc_proj 1.01x; at 1024 qkv 1.07x, attn_proj 0.85x, fc 1.13x, fc_proj 1.14x; at 1280
// attn_proj 1.01x; at 1600 attn_proj 1.06x. qkv at 768 (0.96x there) gains end to end since the quantization was
// fused into other passes (bench/results/2026-12-04-gpt2-fp8-lm-head-h200.md). The LM head is not in auto: faster
// (1.02-1.07x end to end) but its loss over 2,000 steps of 124M sat above bf16's (same file); name it to use it.
Status ParseGpt2Fp8Layers(const std::string& spec, int64_t n_embd, Fp8LayerSet* out) {
  std::vector<std::string> names;
  for (const Fp8LinearShape& l : Gpt2Linears(n_embd)) names.push_back(l.name);
  names.push_back("lm_head");
  return ParseFp8LayerSet("model.gpt2.fp8_layers", spec, names, {n_embd >= 768, n_embd >= 1600, true, true, false},
                          out);
}

bool Gpt2Fp8Head(const Fp8LayerSet& set) { return HeadOn(set); }

int64_t Gpt2Fp8WeightNumel(const Fp8LayerSet& set, int64_t n_embd, int64_t padded_vocab, int64_t n_layer) {
  int64_t numel = HeadOn(set) ? padded_vocab * n_embd : 0;
  const std::vector<Fp8LinearShape> linears = Gpt2Linears(n_embd);
  for (size_t i = 0; i < linears.size() && i < set.on.size(); ++i) {
    if (set.on[i]) numel += n_layer * linears[i].out * linears[i].in;
  }
  return numel;
}

int64_t Gpt2Fp8Bytes(const MemoryPlanInputs& in, const Fp8LayerSet& set, int64_t n_embd, int64_t padded_vocab,
                     int64_t n_layer, int64_t act_sets, int64_t tokens) {
  int64_t bytes = Fp8Linears::Bytes(in, Gpt2Linears(n_embd), BlockSet(set), n_layer, act_sets, tokens);
  if (HeadOn(set)) bytes += Fp8Linears::Bytes(in, HeadLinear(n_embd, padded_vocab), HeadSet(set), 1, 1, tokens);
  return bytes;
}

Gpt2SharedInputs Gpt2SharedInputsOf(const Fp8LayerSet* fp8, bool recompute) {
  Gpt2SharedInputs out;
  if (fp8 == nullptr || recompute) return out;
  auto on = [&](Gpt2Linear l) {
    const auto i = static_cast<size_t>(l);
    return i < fp8->on.size() && fp8->on[i];
  };
  out.ln1 = on(Gpt2Linear::kQkv);
  out.ln2 = on(Gpt2Linear::kFc);
  out.fc_act = on(Gpt2Linear::kFcProj);
  return out;
}

Status Gpt2::Create(DeviceContext& ctx, const Gpt2Options& opts, int64_t batch, int64_t seq_len,
                    std::unique_ptr<Gpt2>* out) {
  DT_CHECK_ARG(
      opts.vocab_size >= 2 && opts.padded_vocab_size >= opts.vocab_size,
      "Gpt2: need 2 <= vocab_size <= padded_vocab_size, got " << opts.vocab_size << ", " << opts.padded_vocab_size);
  DT_CHECK_ARG(opts.n_layer >= 1 && opts.n_head >= 1 && opts.n_embd >= 1 && opts.n_embd % opts.n_head == 0,
               "Gpt2: n_embd " << opts.n_embd << " must be a positive multiple of n_head " << opts.n_head
                               << " (n_layer " << opts.n_layer << ")");
  DT_CHECK_ARG(batch >= 1 && seq_len >= 1 && seq_len <= opts.max_seq_len,
               "Gpt2: batch " << batch << " and seq_len " << seq_len << " must be >= 1, seq_len <= max_seq_len "
                              << opts.max_seq_len);
  DT_CHECK_ARG(opts.loss_chunk_tokens >= 0 && (opts.loss_chunk_tokens == 0 || opts.precision != Precision::kFp16),
               "Gpt2: loss_chunk_tokens " << opts.loss_chunk_tokens
                                          << " must be >= 0, and 0 with fp16 (the chunked loss runs the LM head's "
                                             "backward in Forward, before fp16's dynamic loss scale is known)");
  DT_CHECK_ARG(opts.loss_chunk_tokens == 0 || opts.precision != Precision::kFp8 || !HeadOn(opts.fp8_layers),
               "Gpt2: fp8_layers lm_head runs the whole [tokens, vocab] LM head in FP8, but loss_chunk_tokens "
                   << opts.loss_chunk_tokens
                   << " chunks it (the chunked head is bf16): leave lm_head out of model.gpt2.fp8_layers");
  if (opts.precision != Precision::kFp32) {
    const char* name = opts.precision == Precision::kBf16   ? "bf16"
                       : opts.precision == Precision::kFp16 ? "fp16"
                                                            : "fp8";
    DT_CHECK_ARG(ctx.is_cuda() && opts.dtype == DType::kF32,
                 "Gpt2: " << name << " precision needs a CUDA context and f32 master params (the CPU runs fp32 only)");
  } else {
    DT_CHECK_ARG(opts.dtype == DType::kF32 || (opts.dtype == DType::kF64 && !ctx.is_cuda()),
                 "Gpt2: fp32 runs in f32 (CPU, CUDA) or f64 (CPU only)");
  }
  std::unique_ptr<Gpt2> m(new Gpt2(ctx, opts));  // private constructor

  const int64_t c = opts.n_embd;
  int64_t offset = 0;
  auto add = [&](const std::string& name, std::vector<int64_t> shape) {
    const int64_t numel = Tensor::NumelOf(shape);
    m->infos_.push_back({name, std::move(shape), offset, numel});
    offset += numel;
  };
  add("wte.weight", {opts.padded_vocab_size, c});
  add("wpe.weight", {opts.max_seq_len, c});
  for (int64_t l = 0; l < opts.n_layer; ++l) {
    const std::string p = "h." + std::to_string(l) + ".";
    add(p + "ln_1.weight", {c});
    add(p + "ln_1.bias", {c});
    add(p + "attn.c_attn.weight", {3 * c, c});
    add(p + "attn.c_attn.bias", {3 * c});
    add(p + "attn.c_proj.weight", {c, c});
    add(p + "attn.c_proj.bias", {c});
    add(p + "ln_2.weight", {c});
    add(p + "ln_2.bias", {c});
    add(p + "mlp.c_fc.weight", {4 * c, c});
    add(p + "mlp.c_fc.bias", {4 * c});
    add(p + "mlp.c_proj.weight", {c, 4 * c});
    add(p + "mlp.c_proj.bias", {c});
  }
  add("ln_f.weight", {c});
  add("ln_f.bias", {c});

  DT_RETURN_IF_ERROR(m->Alloc({offset}, opts.dtype, &m->params_));
  DT_RETURN_IF_ERROR(m->Alloc({offset}, opts.dtype, &m->grads_));
  DT_RETURN_IF_ERROR(m->grads_.SetZero(ctx.stream()));
  // The 16-bit copy (mixed) holds what the GEMMs and their epilogues read in 16 bits: every parameter but the weights
  // that run in FP8 (their FP8 copies come from the f32 masters), packed in parameter order; copy_runs_ are its
  // contiguous stretches of params_.
  std::vector<bool> copy16(m->infos_.size(), m->mixed());
  if (opts.precision == Precision::kFp8) {
    for (int64_t l = 0; l < opts.n_layer; ++l) {
      for (size_t i = 0; i < kBlockLinears && i < opts.fp8_layers.on.size(); ++i) {
        if (opts.fp8_layers.on[i]) copy16[m->ParamIndex(static_cast<int>(l), kLinearWeight[i])] = false;
      }
    }
    if (HeadOn(opts.fp8_layers)) copy16[0] = false;  // wte: the tied head's weight (the embedding reads the master)
  }
  int64_t numel16 = 0;
  for (size_t i = 0; i < m->infos_.size(); ++i) {
    const ParamInfo& p = m->infos_[i];
    if (!copy16[i]) continue;
    AppendCopyRun(p.offset, numel16, p.numel, &m->copy_runs_);
    numel16 += p.numel;
  }
  if (m->mixed()) DT_RETURN_IF_ERROR(m->Alloc({std::max<int64_t>(1, numel16)}, m->half_dtype(), &m->params16_));
  int64_t at16 = 0;
  for (size_t i = 0; i < m->infos_.size(); ++i) {
    const ParamInfo& p = m->infos_[i];
    Tensor w, g, w16;
    DT_RETURN_IF_ERROR(m->params_.View(p.offset, p.shape, &w));
    DT_RETURN_IF_ERROR(m->grads_.View(p.offset, p.shape, &g));
    if (copy16[i]) {
      DT_RETURN_IF_ERROR(m->params16_.View(at16, p.shape, &w16));
      at16 += p.numel;
    }
    m->w_.push_back(w);
    m->g_.push_back(g);
    m->w16_.push_back(w16);  // undefined for an FP8 weight: never read
  }
  DT_RETURN_IF_ERROR(m->EnsureActivations(batch, seq_len));
  *out = std::move(m);
  return Status::OK();
}

bool Gpt2::mixed() const { return opts_.precision != Precision::kFp32; }
DType Gpt2::half_dtype() const { return opts_.precision == Precision::kFp16 ? DType::kF16 : DType::kBF16; }

std::string Gpt2::precision_summary() const {
  if (opts_.precision != Precision::kFp8) return "";
  return Fp8Summary(opts_.fp8_layers,
                    HeadOn(opts_.fp8_layers) ? "attention, layer norms" : "attention, LM head, layer norms");
}
DType Gpt2::act_dtype() const { return mixed() ? half_dtype() : opts_.dtype; }
DType Gpt2::stat_dtype() const { return opts_.dtype; }

Status Gpt2::Alloc(const std::vector<int64_t>& shape, DType dt, Tensor* t) {
  return Tensor::Empty(shape, dt, ctx_.allocator(), t);
}

Status Gpt2::InitParams(uint64_t seed) {
  // Generated on the host straight into the staging buffer, so every device and dtype starts from the same values.
  Tensor staging;
  DT_RETURN_IF_ERROR(Tensor::Empty({params_.numel()}, opts_.dtype, ctx_.host_allocator(), &staging));
  const double proj_std = 0.02 / std::sqrt(2.0 * static_cast<double>(opts_.n_layer));
  DT_RETURN_IF_ERROR(FillParamInit(
      infos_,
      [&](const ParamInfo& p) -> ParamInit {
        if (EndsWith(p.name, ".bias")) return {false, 0.0};
        if (p.name.find("ln_") != std::string::npos) return {false, 1.0};
        return {true, EndsWith(p.name, "c_proj.weight") ? proj_std : 0.02};
      },
      seed, &staging));
  DT_RETURN_IF_ERROR(params_.CopyFrom(staging, ctx_.stream()));
  // `staging` is pageable host memory: cudaMemcpyAsync from it returns only after the copy is staged.
  return ctx_.Synchronize();
}

Status Gpt2::EnsureActivations(int64_t batch, int64_t seq_len) {
  if (batch == batch_ && seq_len == seq_len_) return Status::OK();
  const int64_t n = batch * seq_len, c = opts_.n_embd, L = opts_.n_layer;
  const DType act = act_dtype(), stat = stat_dtype();
  // Position ids, built on the host once per shape.
  std::vector<int32_t> pos(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) pos[i] = static_cast<int32_t>(i % seq_len);
  DT_RETURN_IF_ERROR(Alloc({n}, DType::kI32, &pos_ids_));
  DT_RETURN_IF_ERROR(pos_ids_.CopyFrom(Tensor::Wrap(pos.data(), {n}, DType::kI32, DeviceType::kCPU), ctx_.stream()));
  DT_RETURN_IF_ERROR(ctx_.Synchronize());  // `pos` dies at return

  // One buffer for dfc_ (backward, inside a block) and the embeddings in the master dtype (forward, before the
  // first block): never live at once. [n, 4C] of act holds both [n, C] f32 embeddings (mixed: 2 bytes x 4C = 2 x 4
  // bytes x C) or the [n, C] position embedding (fp32/f64).
  const DType emb = mixed() ? DType::kF32 : act;
  const int64_t emb_bytes = n * c * static_cast<int64_t>(DTypeSize(emb));
  DT_RETURN_IF_ERROR(Alloc({n * 4 * c * static_cast<int64_t>(DTypeSize(act))}, DType::kU8, &shared_));
  auto* base = static_cast<char*>(shared_.data());
  dfc_ = Tensor::Wrap(base, {n, 4 * c}, act, ctx_.type());
  pos_emb_ = Tensor::Wrap(base, {n, c}, emb, ctx_.type());
  if (mixed()) tok_emb_ = Tensor::Wrap(base + emb_bytes, {n, c}, DType::kF32, ctx_.type());
  x_.assign(L + 1, Tensor());
  for (Tensor& x : x_) DT_RETURN_IF_ERROR(Alloc({n, c}, act, &x));
  acts_.assign(opts_.recompute ? 1 : L, BlockActs());
  // FP8 linears' inputs: one buffer for every block (Gpt2SharedInputsOf).
  const Gpt2SharedInputs shared =
      Gpt2SharedInputsOf(opts_.precision == Precision::kFp8 ? &opts_.fp8_layers : nullptr, opts_.recompute);
  Tensor shared_ln, shared_fc_act;
  if (shared.ln1 || shared.ln2) DT_RETURN_IF_ERROR(Alloc({n, c}, act, &shared_ln));
  if (shared.fc_act) DT_RETURN_IF_ERROR(Alloc({n, 4 * c}, act, &shared_fc_act));
  auto own_or_shared = [&](bool is_shared, const Tensor& buffer, int64_t width, Tensor* t) {
    if (!is_shared) return Alloc({n, width}, act, t);
    *t = buffer;
    return Status::OK();
  };
  for (BlockActs& a : acts_) {
    DT_RETURN_IF_ERROR(own_or_shared(shared.ln1, shared_ln, c, &a.ln1));
    DT_RETURN_IF_ERROR(Alloc({n}, stat, &a.ln1_mean));
    DT_RETURN_IF_ERROR(Alloc({n}, stat, &a.ln1_rstd));
    DT_RETURN_IF_ERROR(Alloc({batch, seq_len, 3 * c}, act, &a.qkv));
    DT_RETURN_IF_ERROR(Alloc({batch, seq_len, c}, act, &a.att));
    DT_RETURN_IF_ERROR(Alloc({batch, opts_.n_head, seq_len}, stat, &a.lse));
    DT_RETURN_IF_ERROR(Alloc({n, c}, act, &a.x_mid));
    DT_RETURN_IF_ERROR(own_or_shared(shared.ln2, shared_ln, c, &a.ln2));
    DT_RETURN_IF_ERROR(Alloc({n}, stat, &a.ln2_mean));
    DT_RETURN_IF_ERROR(Alloc({n}, stat, &a.ln2_rstd));
    DT_RETURN_IF_ERROR(Alloc({n, 4 * c}, act, &a.fc_pre));
    DT_RETURN_IF_ERROR(own_or_shared(shared.fc_act, shared_fc_act, 4 * c, &a.fc_act));
  }
  DT_RETURN_IF_ERROR(Alloc({n, c}, act, &lnf_));
  DT_RETURN_IF_ERROR(Alloc({n}, stat, &lnf_mean_));
  DT_RETURN_IF_ERROR(Alloc({n}, stat, &lnf_rstd_));
  // Chunked loss: [chunk, Vp] logits only (chunk = loss_chunk_tokens, at most B*T), and the eval argmax per token.
  DT_RETURN_IF_ERROR(
      Alloc({chunked() ? std::min(opts_.loss_chunk_tokens, n) : n, opts_.padded_vocab_size}, act, &logits_));
  if (chunked()) DT_RETURN_IF_ERROR(Alloc({n}, DType::kI32, &preds_));
  DT_RETURN_IF_ERROR(Alloc({n}, stat, &losses_));
  if (opts_.precision == Precision::kFp8) {
    DT_RETURN_IF_ERROR(Fp8Linears::Create(ctx_, Gpt2Linears(c), BlockSet(opts_.fp8_layers), L,
                                          static_cast<int64_t>(acts_.size()), n, &fp8_));
    if (HeadOn(opts_.fp8_layers)) {
      DT_RETURN_IF_ERROR(Fp8Linears::Create(ctx_, HeadLinear(c, opts_.padded_vocab_size), HeadSet(opts_.fp8_layers), 1,
                                            1, n, &head_fp8_));
    }
  }
  DT_RETURN_IF_ERROR(Alloc({n, c}, act, &dres_));
  DT_RETURN_IF_ERROR(Alloc({n, c}, act, &dln_));
  DT_RETURN_IF_ERROR(Alloc({batch, seq_len, 3 * c}, act, &dqkv_));
  DT_RETURN_IF_ERROR(Alloc({batch, seq_len, c}, act, &datt_));
  batch_ = batch;
  seq_len_ = seq_len;
  return Status::OK();
}

Status Gpt2::Forward(const Tensor& inputs, const Tensor& targets) {
  DT_NVTX_RANGE("gpt2.forward");
  DT_CHECK_ARG(inputs.ndim() == 2 && inputs.dtype() == DType::kI32 && inputs.device() == ctx_.type() &&
                   inputs.numel() > 0 && inputs.dim(1) <= opts_.max_seq_len,
               "Gpt2 expects token ids i32[B, T] (T <= " << opts_.max_seq_len << ") on " << DeviceName(ctx_.type())
                                                         << ", got " << inputs.ToString());
  DT_CHECK_ARG(targets.shape() == inputs.shape() && targets.dtype() == DType::kI32 && targets.device() == ctx_.type(),
               "targets " << targets.ToString() << " do not match inputs " << inputs.ToString());
  DT_RETURN_IF_ERROR(EnsureActivations(inputs.dim(0), inputs.dim(1)));
  const int64_t n = batch_ * seq_len_;
  DT_RETURN_IF_ERROR(inputs.Reshape({n}, &ids_));
  DT_RETURN_IF_ERROR(targets.Reshape({n}, &targets_));
  // The 16-bit working copy of the (just updated) master weights, but for the FP8 weights: those, both layouts, from
  // the f32 masters.
  DT_RETURN_IF_ERROR(CastCopyRuns(ctx_, params_, 0, copy_runs_, &params16_));
  for (int l = 0; fp8_ != nullptr && l < opts_.n_layer; ++l) {
    for (int i = 0; i < 4; ++i) {
      if (fp8_->on(i)) DT_RETURN_IF_ERROR(fp8_->QuantizeWeight(l, i, w_[ParamIndex(l, kLinearWeight[i])]));
    }
  }
  if (head_fp8_ != nullptr) DT_RETURN_IF_ERROR(head_fp8_->QuantizeWeight(0, 0, w_[0]));  // tied: wte

  DT_RETURN_IF_ERROR(EmbedForward(ids_));
  for (int l = 0; l < opts_.n_layer; ++l) DT_RETURN_IF_ERROR(BlockForward(l));
  const int lnf = ParamIndex(static_cast<int>(opts_.n_layer), 0);
  DT_RETURN_IF_ERROR(ops::LayerNormForward(ctx_, x_.back(), w_[lnf], w_[lnf + 1], kLnEps, &lnf_, &lnf_mean_, &lnf_rstd_,
                                           head_fp8_ != nullptr ? head_fp8_->x_amax(0, 0) : nullptr));
  if (chunked()) return ChunkedHeadForward();
  if (head_fp8_ != nullptr) {  // tied LM head
    DT_RETURN_IF_ERROR(head_fp8_->Forward(0, 0, 0, lnf_, nullptr, &logits_, nullptr, nullptr, training_, true));
  } else {
    DT_RETURN_IF_ERROR(ops::Matmul(ctx_, lnf_, false, gemm_weight(0), true, &logits_));
  }
  // Fused classifier (training): losses and d(mean loss)/d(logits), in place over the logits. Otherwise losses only;
  // Backward derives dlogits from them and the logits, over the logits (no second [N, Vp] buffer). An FP8 head's
  // GEMMs take no alpha: its dlogits carry the loss scale that set_backward_scale told.
  dlogits_in_place_ = opts_.fused_classifier && training_ && opts_.precision != Precision::kFp16;
  forward_scale_ = head_fp8_ != nullptr ? backward_scale_ : 1.f;
  return ops::SoftmaxCrossEntropy(ctx_, logits_, targets_, &losses_, dlogits_in_place_ ? &logits_ : nullptr,
                                  forward_scale_ / static_cast<float>(n), opts_.vocab_size);
}

Status Gpt2::ChunkedHeadForward() {
  head_grad_in_forward_ = training_;
  preds_ready_ = !training_;
  forward_scale_ = backward_scale_;
  ChunkedClassifierArgs a;
  a.x = &lnf_;
  a.head = &gemm_weight(0);  // tied LM head
  a.targets = &targets_;
  a.valid_cols = opts_.vocab_size;
  a.logits = &logits_;
  a.losses = &losses_;
  if (training_) {  // the LM head's half of wte's gradient; dlnf into the Backward scratch
    a.dhead = &g_[0];
    a.dx = &dln_;
    a.scale = forward_scale_;
  } else {
    a.preds = &preds_;
  }
  return ChunkedClassifierForward(ctx_, a);
}

Status Gpt2::Predict(DeviceContext& ctx, Tensor* pred) {
  if (!chunked()) return Model::Predict(ctx, pred);
  if (!preds_ready_) {
    return Status::FailedPrecondition(
        "Gpt2: with model.gpt2.loss_chunk_tokens the predictions come from an eval-mode Forward "
        "(set_training(false)), and the last Forward was not one");
  }
  return pred->CopyFrom(preds_, ctx.stream());
}

Status Gpt2::EmbedForward(const Tensor& ids) {
  // x = wte[ids] + wpe[t]: both lookups in the master dtype (a bf16/fp16 run casts the sum once).
  if (mixed()) {
    DT_RETURN_IF_ERROR(ops::EmbeddingForward(ctx_, ids, w_[0], &tok_emb_));
    DT_RETURN_IF_ERROR(ops::EmbeddingForward(ctx_, pos_ids_, w_[1], &pos_emb_));
    DT_RETURN_IF_ERROR(ops::Add(ctx_, tok_emb_, pos_emb_, &tok_emb_));
    return ops::Cast(ctx_, tok_emb_, &x_[0]);
  }
  DT_RETURN_IF_ERROR(ops::EmbeddingForward(ctx_, ids, w_[0], &x_[0]));
  DT_RETURN_IF_ERROR(ops::EmbeddingForward(ctx_, pos_ids_, w_[1], &pos_emb_));
  return ops::Add(ctx_, x_[0], pos_emb_, &x_[0]);
}

Status Gpt2::BlockForward(int layer) {
  DT_NVTX_RANGE("gpt2.block_forward");
  BlockActs& a = acts(layer);
  const Tensor& x = x_[layer];
  Tensor& y = x_[layer + 1];
  auto w = [&](int p) -> const Tensor& { return w_[ParamIndex(layer, p)]; };
  Tensor qkv2, att2;  // 2-D views [B*T, 3C] / [B*T, C] for the GEMMs
  DT_RETURN_IF_ERROR(a.qkv.Reshape({x.dim(0), 3 * opts_.n_embd}, &qkv2));
  DT_RETURN_IF_ERROR(a.att.Reshape(x.shape(), &att2));

  // Attention: x_mid = x + c_proj(attn(c_attn(ln_1(x)))).
  // An FP8 linear's input comes with its amax from the layer norm that writes it (no amax pass of its own).
  Tensor* ln1_amax = Fp8XAmax(layer, Gpt2Linear::kQkv);
  DT_RETURN_IF_ERROR(
      ops::LayerNormForward(ctx_, x, w(kLn1W), w(kLn1B), kLnEps, &a.ln1, &a.ln1_mean, &a.ln1_rstd, ln1_amax));
  DT_RETURN_IF_ERROR(
      LinearForward(layer, Gpt2Linear::kQkv, kAttnW, a.ln1, ops::Epilogue::kBias, &qkv2, nullptr, ln1_amax != nullptr));
  DT_RETURN_IF_ERROR(ops::AttentionForward(ctx_, a.qkv, opts_.n_head, &a.att, &a.lse));
  Tensor residual = x;  // a handle: the epilogue reads it
  DT_RETURN_IF_ERROR(
      LinearForward(layer, Gpt2Linear::kAttnProj, kAttnProjW, att2, ops::Epilogue::kBiasResidual, &a.x_mid, &residual));

  // MLP: y = x_mid + c_proj(gelu(c_fc(ln_2(x_mid)))). Biases, c_fc's GELU and the residual adds are fused into the
  // GEMMs' epilogues.
  Tensor* ln2_amax = Fp8XAmax(layer, Gpt2Linear::kFc);
  DT_RETURN_IF_ERROR(
      ops::LayerNormForward(ctx_, a.x_mid, w(kLn2W), w(kLn2B), kLnEps, &a.ln2, &a.ln2_mean, &a.ln2_rstd, ln2_amax));
  DT_RETURN_IF_ERROR(LinearForward(layer, Gpt2Linear::kFc, kFcW, a.ln2, ops::Epilogue::kBiasGelu, &a.fc_act, &a.fc_pre,
                                   ln2_amax != nullptr));
  residual = a.x_mid;
  return LinearForward(layer, Gpt2Linear::kFcProj, kFcProjW, a.fc_act, ops::Epilogue::kBiasResidual, &y, &residual);
}

Tensor* Gpt2::Fp8XAmax(int layer, Gpt2Linear l) {
  return fp8(l) ? fp8_->x_amax(opts_.recompute ? 0 : layer, static_cast<int>(l)) : nullptr;
}

Tensor* Gpt2::Fp8DyAmax(Gpt2Linear l) { return fp8(l) ? fp8_->dy_amax() : nullptr; }

Status Gpt2::LinearForward(int layer, Gpt2Linear l, int weight, const Tensor& x, ops::Epilogue e, Tensor* y,
                           Tensor* aux, bool x_amax_ready) {
  const Tensor& bias = gemm_weight(ParamIndex(layer, weight + 1));  // every block weight is followed by its bias
  if (fp8(l)) {
    const int set = opts_.recompute ? 0 : layer;
    return fp8_->Forward(layer, set, static_cast<int>(l), x, &bias, y, e == ops::Epilogue::kBiasGelu ? aux : nullptr,
                         e == ops::Epilogue::kBiasResidual ? aux : nullptr, training_, x_amax_ready);
  }
  return ops::MatmulEpilogue(ctx_, x, false, gemm_weight(ParamIndex(layer, weight)), true, bias, e, y, aux);
}

Status Gpt2::Backward(float loss_scale, const GradReadyFn& on_ready) {
  DT_NVTX_RANGE("gpt2.backward");
  DT_CHECK_ARG(ids_.defined(), "Backward called before Forward");
  const int64_t n = batch_ * seq_len_;
  auto ready = [&](int i) { return on_ready ? on_ready(i) : Status::OK(); };
  // dlogits = d(loss_scale * mean loss)/d(logits), in place over the logits (0 in the padded columns): from the
  // forward's losses (one pass over the logits), or already there (fused classifier: d(mean loss)/d(logits), the
  // loss scale then goes into the GEMMs' alpha).
  float alpha = 1.f;
  if (chunked()) {
    // The training Forward did the head's backward (dwte, and dlnf in dln_) at forward_scale_.
    if (!head_grad_in_forward_) {
      return Status::FailedPrecondition(
          "Gpt2: Backward with model.gpt2.loss_chunk_tokens needs a training-mode Forward first (the LM head's "
          "backward runs in it)");
    }
    head_grad_in_forward_ = false;  // consumed
    if (loss_scale != forward_scale_) {
      return Status::FailedPrecondition(
          "Gpt2: model.gpt2.loss_chunk_tokens computed the LM head's gradient in Forward at loss scale " +
          std::to_string(forward_scale_) + " (set_backward_scale), but Backward got " + std::to_string(loss_scale));
    }
  } else if (dlogits_in_place_) {
    dlogits_in_place_ = false;  // consumed: a second Backward needs a new Forward
    alpha = loss_scale;         // an FP8 head's dlogits already carry it (checked)
    if (head_fp8_ != nullptr && loss_scale != forward_scale_) {
      return Status::FailedPrecondition("Gpt2: the FP8 LM head's dlogits were computed in Forward at loss scale " +
                                        std::to_string(forward_scale_) + " (set_backward_scale), but Backward got " +
                                        std::to_string(loss_scale));
    }
  } else {
    DT_RETURN_IF_ERROR(ops::SoftmaxCrossEntropyBackward(ctx_, logits_, targets_, losses_, &logits_,
                                                        loss_scale / static_cast<float>(n), opts_.vocab_size));
  }
  // LM head: dwte += dlogits^T lnf (the first of wte's two contributions), dlnf = dlogits wte.
  if (head_fp8_ != nullptr) {
    // |dlogits| <= loss_scale / n (|softmax - onehot| <= 1): dlogits' FP8 scale from that bound, no amax pass.
    DT_RETURN_IF_ERROR(ops::Fp8SetAmax(ctx_, std::fabs(loss_scale) / static_cast<float>(n), head_fp8_->dy_amax()));
    DT_RETURN_IF_ERROR(head_fp8_->Backward(0, 0, 0, logits_, &g_[0], &dln_, nullptr, /*dy_amax_ready=*/true));
  } else if (!chunked()) {
    DT_RETURN_IF_ERROR(ops::Matmul(ctx_, logits_, true, lnf_, false, &g_[0], alpha, 1.f));
    DT_RETURN_IF_ERROR(ops::Matmul(ctx_, logits_, false, gemm_weight(0), false, &dln_, alpha));
  }
  const int lnf = ParamIndex(static_cast<int>(opts_.n_layer), 0);
  // dres_ is the last block's fc_proj output gradient: with an FP8 fc_proj its amax comes from here.
  DT_RETURN_IF_ERROR(ops::LayerNormBackward(ctx_, x_.back(), w_[lnf], lnf_mean_, lnf_rstd_, dln_, &dres_, &g_[lnf],
                                            &g_[lnf + 1], false, Fp8DyAmax(Gpt2Linear::kFcProj)));
  DT_RETURN_IF_ERROR(ready(lnf + 1));
  DT_RETURN_IF_ERROR(ready(lnf));
  for (int l = static_cast<int>(opts_.n_layer) - 1; l >= 0; --l) DT_RETURN_IF_ERROR(BlockBackward(l, on_ready));
  return EmbedBackward(on_ready);
}

Status Gpt2::BlockBackward(int layer, const GradReadyFn& on_ready) {
  DT_NVTX_RANGE("gpt2.block_backward");
  if (opts_.recompute) DT_RETURN_IF_ERROR(BlockForward(layer));  // refills the shared activations (same values)
  BlockActs& a = acts(layer);
  auto w = [&](int p) -> const Tensor& { return w_[ParamIndex(layer, p)]; };
  auto gw = [&](int p) -> const Tensor& { return gemm_weight(ParamIndex(layer, p)); };
  auto g = [&](int p) -> Tensor* { return &g_[ParamIndex(layer, p)]; };
  auto ready = [&](int p) { return on_ready ? on_ready(ParamIndex(layer, p)) : Status::OK(); };
  Tensor qkv2, att2, dqkv2, datt2;
  DT_RETURN_IF_ERROR(a.qkv.Reshape({dres_.dim(0), 3 * opts_.n_embd}, &qkv2));
  DT_RETURN_IF_ERROR(a.att.Reshape(dres_.shape(), &att2));
  DT_RETURN_IF_ERROR(dqkv_.Reshape(qkv2.shape(), &dqkv2));
  DT_RETURN_IF_ERROR(datt_.Reshape(dres_.shape(), &datt2));

  const int set = opts_.recompute ? 0 : layer;  // the FP8 activation copies of this block

  // MLP, with dres_ = dy. Weight gradients accumulate (beta = 1) across micro-steps.
  if (fp8(Gpt2Linear::kFcProj)) {
    // dW_proj += dy^T fc_act and d fc_act = dy W_proj in FP8; gelu' then runs as its own pass over dfc_ (the bf16
    // path fuses it and fc's bias gradient into the dgrad GEMM's epilogue; cuBLASLt's FP8 GEMM with the DGELU epilogue
    // made the whole step 10-12% slower on the H200, and it refuses to write the amax of a bf16 result:
    // bench/results/2026-12-05-fp8-epilogues-and-774m-torchao-h200.md). The bias gradients come from the casts of
    // dy (Fp8Linears::Backward's dbias; fc's from its own FP8 backward, else a pass here), dy's amax from the kernel
    // that wrote dy (the layer norm backward above this block: Backward's lnf or the next block's ln_1; GELU's below).
    DT_RETURN_IF_ERROR(fp8_->Backward(layer, set, static_cast<int>(Gpt2Linear::kFcProj), dres_, g(kFcProjW), &dfc_,
                                      g(kFcProjB), /*dy_amax_ready=*/true));
    DT_RETURN_IF_ERROR(ready(kFcProjB));
    DT_RETURN_IF_ERROR(ready(kFcProjW));
    DT_RETURN_IF_ERROR(ops::GeluBackward(ctx_, a.fc_pre, dfc_, &dfc_, Fp8DyAmax(Gpt2Linear::kFc)));
    if (!fp8(Gpt2Linear::kFc)) DT_RETURN_IF_ERROR(ops::BiasGrad(ctx_, dfc_, g(kFcB), /*accumulate=*/true));
  } else {
    DT_RETURN_IF_ERROR(ops::Matmul(ctx_, dres_, true, a.fc_act, false, g(kFcProjW), 1.f, 1.f));
    DT_RETURN_IF_ERROR(ops::BiasGrad(ctx_, dres_, g(kFcProjB), /*accumulate=*/true));
    DT_RETURN_IF_ERROR(ready(kFcProjB));
    DT_RETURN_IF_ERROR(ready(kFcProjW));
    // dfc_pre = (dy W_proj) * gelu'(fc_pre), and dbias_fc += its column sums, in one epilogue.
    DT_RETURN_IF_ERROR(ops::MatmulEpilogue(ctx_, dres_, false, gw(kFcProjW), false, *g(kFcB),
                                           ops::Epilogue::kDGeluBGrad, &dfc_, &a.fc_pre));
  }
  if (fp8(Gpt2Linear::kFc)) {
    DT_RETURN_IF_ERROR(fp8_->Backward(layer, set, static_cast<int>(Gpt2Linear::kFc), dfc_, g(kFcW), &dln_,
                                      fp8(Gpt2Linear::kFcProj) ? g(kFcB) : nullptr, fp8(Gpt2Linear::kFcProj)));
    DT_RETURN_IF_ERROR(ready(kFcB));
    DT_RETURN_IF_ERROR(ready(kFcW));
  } else {
    DT_RETURN_IF_ERROR(ops::Matmul(ctx_, dfc_, true, a.ln2, false, g(kFcW), 1.f, 1.f));
    DT_RETURN_IF_ERROR(ready(kFcB));
    DT_RETURN_IF_ERROR(ready(kFcW));
    DT_RETURN_IF_ERROR(ops::Matmul(ctx_, dfc_, false, gw(kFcW), false, &dln_));
  }
  DT_RETURN_IF_ERROR(ops::LayerNormBackward(ctx_, a.x_mid, w(kLn2W), a.ln2_mean, a.ln2_rstd, dln_, &dres_, g(kLn2W),
                                            g(kLn2B), /*accumulate_dx=*/true,  // the residual path plus the norm's
                                            Fp8DyAmax(Gpt2Linear::kAttnProj)));
  DT_RETURN_IF_ERROR(ready(kLn2B));
  DT_RETURN_IF_ERROR(ready(kLn2W));

  // Attention, with dres_ = d x_mid.
  if (fp8(Gpt2Linear::kAttnProj)) {
    DT_RETURN_IF_ERROR(fp8_->Backward(layer, set, static_cast<int>(Gpt2Linear::kAttnProj), dres_, g(kAttnProjW), &datt2,
                                      g(kAttnProjB), /*dy_amax_ready=*/true));
  } else {
    DT_RETURN_IF_ERROR(ops::BiasGrad(ctx_, dres_, g(kAttnProjB), /*accumulate=*/true));
    DT_RETURN_IF_ERROR(ops::Matmul(ctx_, dres_, true, att2, false, g(kAttnProjW), 1.f, 1.f));
    DT_RETURN_IF_ERROR(ops::Matmul(ctx_, dres_, false, gw(kAttnProjW), false, &datt2));
  }
  DT_RETURN_IF_ERROR(ready(kAttnProjB));
  DT_RETURN_IF_ERROR(ready(kAttnProjW));
  DT_RETURN_IF_ERROR(ops::AttentionBackward(ctx_, a.qkv, a.att, a.lse, datt_, opts_.n_head, &dqkv_));
  if (fp8(Gpt2Linear::kQkv)) {
    DT_RETURN_IF_ERROR(
        fp8_->Backward(layer, set, static_cast<int>(Gpt2Linear::kQkv), dqkv2, g(kAttnW), &dln_, g(kAttnB)));
  } else {
    DT_RETURN_IF_ERROR(ops::BiasGrad(ctx_, dqkv2, g(kAttnB), /*accumulate=*/true));
    DT_RETURN_IF_ERROR(ops::Matmul(ctx_, dqkv2, true, a.ln1, false, g(kAttnW), 1.f, 1.f));
    DT_RETURN_IF_ERROR(ops::Matmul(ctx_, dqkv2, false, gw(kAttnW), false, &dln_));
  }
  DT_RETURN_IF_ERROR(ready(kAttnB));
  DT_RETURN_IF_ERROR(ready(kAttnW));
  // dres_ = d x_[layer]: the previous block's fc_proj output gradient (its amax for an FP8 fc_proj).
  DT_RETURN_IF_ERROR(ops::LayerNormBackward(ctx_, x_[layer], w(kLn1W), a.ln1_mean, a.ln1_rstd, dln_, &dres_, g(kLn1W),
                                            g(kLn1B), /*accumulate_dx=*/true, Fp8DyAmax(Gpt2Linear::kFcProj)));
  DT_RETURN_IF_ERROR(ready(kLn1B));
  return ready(kLn1W);
}

Status Gpt2::EmbedBackward(const GradReadyFn& on_ready) {
  // dres_ = d x_[0]; both tables take it (the embedding backward accumulates in the master dtype, reading the
  // 16-bit rows of a mixed run directly: exactly as from an f32 copy).
  DT_RETURN_IF_ERROR(ops::EmbeddingBackward(ctx_, pos_ids_, dres_, &g_[1]));
  if (on_ready) DT_RETURN_IF_ERROR(on_ready(1));
  // wte last: its gradient is complete only now (LM head + token embedding).
  DT_RETURN_IF_ERROR(ops::EmbeddingBackward(ctx_, ids_, dres_, &g_[0]));
  return on_ready ? on_ready(0) : Status::OK();
}

}  // namespace dtrain::models
