#include "models/llama.h"

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "core/check.h"
#include "core/nvtx.h"
#include "kernels/attention.h"
#include "kernels/bf16_round.h"
#include "kernels/embedding.h"
#include "kernels/matmul.h"
#include "kernels/rmsnorm.h"
#include "kernels/rope.h"
#include "kernels/softmax_xent.h"
#include "kernels/swiglu.h"
#include "models/chunked_classifier.h"
#include "models/param_init.h"

namespace dtrain::models {

namespace {

bool EndsWith(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

}  // namespace

std::vector<Fp8LinearShape> LlamaLinears(int64_t hidden, int64_t n_head, int64_t n_kv_head, int64_t ffn_hidden) {
  const int64_t hs = hidden / n_head;
  return {{"qkv", (n_head + 2 * n_kv_head) * hs, hidden},
          {"o_proj", hidden, n_head * hs},
          {"gate_up", 2 * ffn_hidden, hidden},
          {"down", hidden, ffn_hidden}};
}

// "auto": GPT-2's measured per-layer table (models/gpt2.cc, bench/results/2026-12-03-fp8-gemm-h200.md) carried over
// by shape: the MLP's GEMMs (K or N = the FFN width, 2.7-4x the hidden size) gained at every width measured (1.01x
// at 768 to 1.14x at 1024); a fused qkv from hidden 1024 (1.07x there, 0.96x at 768); the square o_proj from 1600
// (0.78x at 768, 0.85x at 1024, 1.01x at 1280, 1.06x at 1600).
Status ParseLlamaFp8Layers(const std::string& spec, int64_t hidden, Fp8LayerSet* out) {
  return ParseFp8LayerSet("model.llama.fp8_layers", spec, {"qkv", "o_proj", "gate_up", "down"},
                          {hidden >= 1024, hidden >= 1600, true, true}, out);
}

LlamaSharedActs LlamaSharedActsOf(bool full_set, bool selective, const Fp8LayerSet* fp8) {
  auto on = [&](LlamaLinear l) {
    const auto i = static_cast<size_t>(l);
    return fp8 != nullptr && i < fp8->on.size() && fp8->on[i];
  };
  LlamaSharedActs out;
  const bool recomputed = selective && !full_set;
  out.ln1 = recomputed || on(LlamaLinear::kQkv);
  out.ln2 = selective || on(LlamaLinear::kGateUp);
  out.act = selective || on(LlamaLinear::kDown);
  return out;
}

Status Llama::Create(DeviceContext& ctx, const LlamaOptions& opts, int64_t batch, int64_t seq_len,
                     std::unique_ptr<Llama>* out) {
  DT_CHECK_ARG(opts.vocab_size >= 2, "Llama: vocab_size " << opts.vocab_size << " must be >= 2");
  DT_CHECK_ARG(opts.n_layer >= 1 && opts.n_head >= 1 && opts.n_kv_head >= 1 && opts.hidden >= 1 && opts.ffn_hidden >= 1,
               "Llama: n_layer " << opts.n_layer << ", n_head " << opts.n_head << ", n_kv_head " << opts.n_kv_head
                                 << ", hidden " << opts.hidden << ", ffn_hidden " << opts.ffn_hidden
                                 << " must be >= 1");
  DT_CHECK_ARG(opts.n_head % opts.n_kv_head == 0,
               "Llama: n_head " << opts.n_head << " must be a multiple of n_kv_head " << opts.n_kv_head);
  DT_CHECK_ARG(opts.hidden % opts.n_head == 0,
               "Llama: hidden " << opts.hidden << " must be a multiple of n_head " << opts.n_head);
  const int64_t hs = opts.hidden / opts.n_head;
  DT_CHECK_ARG(hs % 2 == 0, "Llama: head size hidden / n_head = " << hs << " must be even (RoPE rotates pairs)");
  DT_CHECK_ARG(opts.rope_theta > 0 && opts.rms_norm_eps > 0,
               "Llama: rope_theta " << opts.rope_theta << " and rms_norm_eps " << opts.rms_norm_eps << " must be > 0");
  DT_CHECK_ARG(opts.full_layers >= 0 && opts.full_layers <= opts.n_layer,
               "Llama: full_layers " << opts.full_layers << " must be in [0, n_layer " << opts.n_layer << "]");
  DT_CHECK_ARG(batch >= 1 && seq_len >= 1 && seq_len <= opts.max_seq_len,
               "Llama: batch " << batch << " and seq_len " << seq_len << " must be >= 1, seq_len <= max_seq_len "
                               << opts.max_seq_len);
  DT_CHECK_ARG(opts.loss_chunk_tokens >= 0,
               "Llama: loss_chunk_tokens " << opts.loss_chunk_tokens << " must be >= 0 (0: off)");
  if (opts.precision == Precision::kFp16) return Status::InvalidArgument("Llama: fp16 is not supported (bf16, fp32)");
  DT_CHECK_ARG(!opts.bf16_masters || opts.precision == Precision::kBf16 || opts.precision == Precision::kFp8,
               "Llama: train.master_weights bf16 needs train.precision bf16 or fp8 on CUDA (the CPU runs fp32 only)");
  DT_CHECK_ARG(!opts.bf16_grads || opts.precision == Precision::kBf16 || opts.precision == Precision::kFp8,
               "Llama: train.gradients bf16 needs train.precision bf16 or fp8 on CUDA (the CPU runs fp32 only)");
  DT_CHECK_ARG(!opts.layer_cast || (opts.precision != Precision::kFp32 && !opts.bf16_masters),
               "Llama: model.llama.weight_cast layer casts f32 master weights into bf16 for the GEMMs: it needs "
               "train.precision bf16 or fp8 and train.master_weights fp32");
  if (opts.precision != Precision::kFp32) {
    DT_CHECK_ARG(ctx.is_cuda() && opts.dtype == DType::kF32,
                 "Llama: bf16 and fp8 precision need a CUDA context and f32 master params (the CPU runs fp32 only)");
  } else {
    DT_CHECK_ARG(opts.dtype == DType::kF32 || (opts.dtype == DType::kF64 && !ctx.is_cuda()),
                 "Llama: fp32 runs in f32 (CPU, CUDA) or f64 (CPU only)");
  }
  std::unique_ptr<Llama> m(new Llama(ctx, opts));  // private constructor

  const int64_t c = opts.hidden, f = opts.ffn_hidden, vp = PaddedVocab(opts.vocab_size);
  int64_t offset = 0;
  auto add = [&](const std::string& name, std::vector<int64_t> shape) {
    const int64_t numel = Tensor::NumelOf(shape);
    m->infos_.push_back({name, std::move(shape), offset, numel});
    offset += numel;
  };
  add("model.embed_tokens.weight", {vp, c});
  for (int64_t l = 0; l < opts.n_layer; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".";
    add(p + "input_layernorm.weight", {c});
    add(p + "self_attn.qkv_proj.weight", {m->qkv_width(), c});
    add(p + "self_attn.o_proj.weight", {c, opts.n_head * hs});
    add(p + "post_attention_layernorm.weight", {c});
    add(p + "mlp.gate_up_proj.weight", {2 * f, c});
    add(p + "mlp.down_proj.weight", {c, f});
  }
  add("model.norm.weight", {c});
  if (!opts.tie_embeddings) add("lm_head.weight", {vp, c});

  // bf16 masters: the params are the bf16 GEMM weights (no f32 master, no copy); grads f32 unless bf16_grads.
  DT_RETURN_IF_ERROR(m->Alloc({offset}, opts.bf16_masters ? DType::kBF16 : opts.dtype, &m->params_));
  DT_RETURN_IF_ERROR(m->Alloc({offset}, opts.bf16_grads ? DType::kBF16 : opts.dtype, &m->grads_));
  DT_RETURN_IF_ERROR(m->grads_.SetZero(ctx.stream()));
  for (const ParamInfo& p : m->infos_) {
    Tensor w, g;
    DT_RETURN_IF_ERROR(m->params_.View(p.offset, p.shape, &w));
    DT_RETURN_IF_ERROR(m->grads_.View(p.offset, p.shape, &g));
    m->w_.push_back(w);
    m->g_.push_back(g);
  }
  m->w16_.resize(m->infos_.size());  // undefined where there is no copy
  if (m->mixed() && !opts.bf16_masters) DT_RETURN_IF_ERROR(m->MakeWeightCopy());
  // Made once here: RopeTable synchronizes with the device, which a step (or a graph capture) must not.
  DT_RETURN_IF_ERROR(
      ops::RopeTable(ctx, opts.max_seq_len, hs, opts.rope_theta, &m->rope_cos_, &m->rope_sin_, opts.rope_scaling));
  DT_RETURN_IF_ERROR(m->Alloc({c}, m->act_dtype(), &m->zero_bias_));
  DT_RETURN_IF_ERROR(m->zero_bias_.SetZero(ctx.stream()));
  DT_RETURN_IF_ERROR(m->EnsureActivations(batch, seq_len));
  *out = std::move(m);
  return Status::OK();
}

Status Llama::Alloc(const std::vector<int64_t>& shape, DType dt, Tensor* t) {
  return Tensor::Empty(shape, dt, ctx_.allocator(), t);
}

Status Llama::MakeWeightCopy() {
  // A block parameter the GEMMs read in bf16: a linear weight that does not run in FP8.
  auto copied = [&](int i) {
    if (i < ParamIndex(0, 0) || i >= norm_index()) return false;
    const int p = (i - 1) % kLayerParams;
    for (int j = 0; j < 4; ++j) {
      if (kLinearParam[j] == p) return !(opts_.precision == Precision::kFp8 && opts_.fp8_layers.on[j]);
    }
    return false;
  };
  std::vector<int64_t> at16(infos_.size(), -1);  // where parameter i sits in the copy (-1: not copied)
  int64_t numel16 = 0;
  auto copy = [&](int i, std::vector<CopyRun>* runs, int64_t src) {  // the next slot
    const int64_t numel = infos_[static_cast<size_t>(i)].numel;
    at16[static_cast<size_t>(i)] = numel16;
    AppendCopyRun(src, numel16, numel, runs);
    numel16 += numel;
  };
  layer_begin_ = infos_[static_cast<size_t>(ParamIndex(0, 0))].offset;
  layer_numel_ = infos_[static_cast<size_t>(ParamIndex(1, 0))].offset - layer_begin_;
  if (!opts_.layer_cast) {
    for (int i = 0; i < static_cast<int>(infos_.size()); ++i) {
      if (i == head_index() || copied(i)) copy(i, &copy_runs_, infos_[static_cast<size_t>(i)].offset);
    }
  } else {  // the head, then layer 0's part, which every layer's parameters share
    copy(head_index(), &copy_runs_, infos_[static_cast<size_t>(head_index())].offset);
    for (int p = 0; p < kLayerParams; ++p) {
      const int i = ParamIndex(0, p);
      if (copied(i)) copy(i, &layer_runs_, infos_[static_cast<size_t>(i)].offset - layer_begin_);
    }
    for (int l = 1; l < static_cast<int>(opts_.n_layer); ++l) {
      for (int p = 0; p < kLayerParams; ++p) at16[static_cast<size_t>(ParamIndex(l, p))] = at16[ParamIndex(0, p)];
    }
  }
  DT_RETURN_IF_ERROR(Alloc({numel16}, DType::kBF16, &params16_));
  for (size_t i = 0; i < infos_.size(); ++i) {
    if (at16[i] >= 0) DT_RETURN_IF_ERROR(params16_.View(at16[i], infos_[i].shape, &w16_[i]));
  }
  return Status::OK();
}

Status Llama::InitParams(uint64_t seed) {
  // Generated on the host straight into the staging buffer, so every device and dtype starts from the same values.
  Tensor staging;
  DT_RETURN_IF_ERROR(Tensor::Empty({params_.numel()}, opts_.dtype, ctx_.host_allocator(), &staging));
  const double proj_std = 0.02 / std::sqrt(2.0 * static_cast<double>(opts_.n_layer));
  DT_RETURN_IF_ERROR(FillParamInit(
      infos_,
      [&](const ParamInfo& p) -> ParamInit {
        if (EndsWith(p.name, "norm.weight")) return {false, 1.0};
        const bool is_proj = EndsWith(p.name, "o_proj.weight") || EndsWith(p.name, "down_proj.weight");
        return {true, is_proj ? proj_std : 0.02};
      },
      seed, &staging));
  if (opts_.bf16_masters) {
    // bf16 masters: the f32 draws rounded to nearest even on the host (the same values on every device).
    Tensor staging16;
    DT_RETURN_IF_ERROR(Tensor::Empty({params_.numel()}, DType::kBF16, ctx_.host_allocator(), &staging16));
    for (int64_t i = 0; i < params_.numel(); ++i) {
      staging16.data<uint16_t>()[i] = RoundBf16Rne(staging.data<float>()[i]);
    }
    DT_RETURN_IF_ERROR(params_.CopyFrom(staging16, ctx_.stream()));
    return ctx_.Synchronize();  // pageable host memory, freed on return
  }
  DT_RETURN_IF_ERROR(params_.CopyFrom(staging, ctx_.stream()));
  // `staging` is pageable host memory: cudaMemcpyAsync from it returns only after the copy is staged.
  return ctx_.Synchronize();
}

Status Llama::EnsureActivations(int64_t batch, int64_t seq_len) {
  if (batch == batch_ && seq_len == seq_len_) return Status::OK();
  const int64_t n = batch * seq_len, c = opts_.hidden, f = opts_.ffn_hidden, L = opts_.n_layer;
  const int64_t qkv = qkv_width(), vp = PaddedVocab(opts_.vocab_size);
  const DType act = act_dtype(), stat = stat_dtype();
  // (models/llama_spec.cc's LlamaMemoryPlan mirrors every allocation here and in Create: keep them in step.)
  const int64_t K = opts_.full_layers;
  x_.assign(L + 1, Tensor());
  for (Tensor& x : x_) DT_RETURN_IF_ERROR(Alloc({n, c}, act, &x));
  acts_.assign((K > 0 ? 1 : 0) + (L - K), LayerActs());
  // ln1, ln2 (one buffer: never live at once) and act shared by all sets where LlamaSharedActsOf says so.
  const bool selective = opts_.selective && K < L;
  const Fp8LayerSet* fp8_set = opts_.precision == Precision::kFp8 ? &opts_.fp8_layers : nullptr;
  Tensor shared_ln, shared_act;
  auto own_or_shared = [&](bool is_shared, const Tensor& buffer, int64_t width, Tensor* t) {
    if (!is_shared) return Alloc({n, width}, act, t);
    *t = buffer;
    return Status::OK();
  };
  for (size_t i = 0; i < acts_.size(); ++i) {
    LayerActs& a = acts_[i];
    const LlamaSharedActs shared = LlamaSharedActsOf(/*full_set=*/K > 0 && i == 0, selective, fp8_set);
    if ((shared.ln1 || shared.ln2) && !shared_ln.defined()) DT_RETURN_IF_ERROR(Alloc({n, c}, act, &shared_ln));
    if (shared.act && !shared_act.defined()) DT_RETURN_IF_ERROR(Alloc({n, f}, act, &shared_act));
    DT_RETURN_IF_ERROR(own_or_shared(shared.ln1, shared_ln, c, &a.ln1));
    DT_RETURN_IF_ERROR(own_or_shared(shared.ln2, shared_ln, c, &a.ln2));
    DT_RETURN_IF_ERROR(own_or_shared(shared.act, shared_act, f, &a.act));
    DT_RETURN_IF_ERROR(Alloc({n}, stat, &a.ln1_rstd));
    DT_RETURN_IF_ERROR(Alloc({batch, seq_len, qkv}, act, &a.qkv));
    DT_RETURN_IF_ERROR(Alloc({batch, seq_len, c}, act, &a.att));
    DT_RETURN_IF_ERROR(Alloc({batch, opts_.n_head, seq_len}, stat, &a.lse));
    DT_RETURN_IF_ERROR(Alloc({n, c}, act, &a.x_mid));
    DT_RETURN_IF_ERROR(Alloc({n}, stat, &a.ln2_rstd));
    DT_RETURN_IF_ERROR(Alloc({n, 2 * f}, act, &a.h));
  }
  DT_RETURN_IF_ERROR(Alloc({n, c}, act, &lnf_));
  DT_RETURN_IF_ERROR(Alloc({n}, stat, &lnf_rstd_));
  // Chunked loss: [chunk, Vp] logits only (chunk = loss_chunk_tokens, at most B*T), and the eval argmax per token.
  DT_RETURN_IF_ERROR(Alloc({chunked() ? std::min(opts_.loss_chunk_tokens, n) : n, vp}, act, &logits_));
  if (chunked()) DT_RETURN_IF_ERROR(Alloc({n}, DType::kI32, &preds_));
  DT_RETURN_IF_ERROR(Alloc({n}, stat, &losses_));
  if (opts_.precision == Precision::kFp8) {
    fp8_.reset();  // a new shape: its kept copies go first
    DT_RETURN_IF_ERROR(Fp8Linears::Create(ctx_, LlamaLinears(c, opts_.n_head, opts_.n_kv_head, f), opts_.fp8_layers, L,
                                          static_cast<int64_t>(acts_.size()), n, &fp8_));
  }
  DT_RETURN_IF_ERROR(Alloc({n, c}, act, &dres_));
  DT_RETURN_IF_ERROR(Alloc({n, c}, act, &dln_));
  DT_RETURN_IF_ERROR(Alloc({batch, seq_len, qkv}, act, &dqkv_));
  DT_RETURN_IF_ERROR(Alloc({batch, seq_len, c}, act, &datt_));
  DT_RETURN_IF_ERROR(Alloc({n, 2 * f}, act, &dh_));
  DT_RETURN_IF_ERROR(Alloc({n, f}, act, &dact_));
  batch_ = batch;
  seq_len_ = seq_len;
  return Status::OK();
}

Status Llama::Forward(const Tensor& inputs, const Tensor& targets) {
  DT_NVTX_RANGE("llama.forward");
  DT_CHECK_ARG(inputs.ndim() == 2 && inputs.dtype() == DType::kI32 && inputs.device() == ctx_.type() &&
                   inputs.numel() > 0 && inputs.dim(1) <= opts_.max_seq_len,
               "Llama expects token ids i32[B, T] (T <= " << opts_.max_seq_len << ") on " << DeviceName(ctx_.type())
                                                          << ", got " << inputs.ToString());
  DT_CHECK_ARG(targets.shape() == inputs.shape() && targets.dtype() == DType::kI32 && targets.device() == ctx_.type(),
               "targets " << targets.ToString() << " do not match inputs " << inputs.ToString());
  DT_RETURN_IF_ERROR(EnsureActivations(inputs.dim(0), inputs.dim(1)));
  const int64_t n = batch_ * seq_len_;
  DT_RETURN_IF_ERROR(inputs.Reshape({n}, &ids_));
  DT_RETURN_IF_ERROR(targets.Reshape({n}, &targets_));
  // The bf16 copy of the (just updated) f32 master weights (bf16 masters are the GEMM weights themselves): all of it,
  // or (layer_cast) the LM head's, each layer's following in CastLayer.
  DT_RETURN_IF_ERROR(CastCopyRuns(ctx_, params_, 0, copy_runs_, &params16_));
  cast_layer_ = -1;  // the masters changed since
  // The FP8 weights (both layouts), from the master weights (f32, or bf16 masters).
  for (int l = 0; fp8_ != nullptr && l < opts_.n_layer; ++l) {
    for (int i = 0; i < 4; ++i) {
      if (fp8_->on(i)) DT_RETURN_IF_ERROR(fp8_->QuantizeWeight(l, i, w_[ParamIndex(l, kLinearParam[i])]));
    }
  }

  // x = embed[ids]: the lookup reads the master table (f32, or bf16 masters) and writes the activation dtype (bf16
  // rows in a mixed run).
  DT_RETURN_IF_ERROR(ops::EmbeddingForward(ctx_, ids_, w_[0], &x_[0]));
  for (int l = 0; l < opts_.n_layer; ++l) DT_RETURN_IF_ERROR(LayerForward(l));
  const float eps = static_cast<float>(opts_.rms_norm_eps);
  DT_RETURN_IF_ERROR(ops::RmsNormForward(ctx_, x_.back(), w_[norm_index()], eps, &lnf_, &lnf_rstd_));
  if (chunked()) return ChunkedHeadForward();
  DT_RETURN_IF_ERROR(ops::Matmul(ctx_, lnf_, false, gemm_weight(head_index()), true, &logits_));
  // Fused classifier (training): losses and d(mean loss)/d(logits), in place over the logits. Otherwise losses only;
  // Backward derives dlogits from them and the logits, over the logits (no second [N, Vp] buffer).
  dlogits_in_place_ = opts_.fused_classifier && training_;
  return ops::SoftmaxCrossEntropy(ctx_, logits_, targets_, &losses_, dlogits_in_place_ ? &logits_ : nullptr,
                                  1.0f / static_cast<float>(n), opts_.vocab_size);
}

Status Llama::ChunkedHeadForward() {
  head_grad_in_forward_ = training_;
  preds_ready_ = !training_;
  forward_scale_ = backward_scale_;
  ChunkedClassifierArgs a;
  a.x = &lnf_;
  a.head = &gemm_weight(head_index());
  a.targets = &targets_;
  a.valid_cols = opts_.vocab_size;
  a.logits = &logits_;
  a.losses = &losses_;
  if (training_) {  // tied: the LM head's half of embed_tokens' gradient; dlnf into the Backward scratch
    a.dhead = &g_[head_index()];
    a.dx = &dln_;
    a.scale = forward_scale_;
  } else {
    a.preds = &preds_;
  }
  return ChunkedClassifierForward(ctx_, a);
}

Status Llama::Predict(DeviceContext& ctx, Tensor* pred) {
  if (!chunked()) return Model::Predict(ctx, pred);
  if (!preds_ready_) {
    return Status::FailedPrecondition(
        "Llama: with model.llama.loss_chunk_tokens the predictions come from an eval-mode Forward "
        "(set_training(false)), and the last Forward was not one");
  }
  return pred->CopyFrom(preds_, ctx.stream());
}

Status Llama::CastLayer(int layer) {
  if (!opts_.layer_cast || cast_layer_ == layer) return Status::OK();
  DT_RETURN_IF_ERROR(CastCopyRuns(ctx_, params_, layer_begin_ + layer * layer_numel_, layer_runs_, &params16_));
  cast_layer_ = layer;
  return Status::OK();
}

Status Llama::LayerForward(int layer) {
  DT_NVTX_RANGE("llama.layer_forward");
  DT_RETURN_IF_ERROR(CastLayer(layer));
  LayerActs& a = acts(layer);
  const Tensor& x = x_[layer];
  Tensor& y = x_[layer + 1];
  auto w = [&](int p) -> const Tensor& { return w_[ParamIndex(layer, p)]; };
  const float eps = static_cast<float>(opts_.rms_norm_eps);
  Tensor qkv2, att2;  // 2-D views [B*T, (NH + 2 NKV) hs] / [B*T, C] for the GEMMs
  DT_RETURN_IF_ERROR(a.qkv.Reshape({x.dim(0), qkv_width()}, &qkv2));
  DT_RETURN_IF_ERROR(a.att.Reshape(x.shape(), &att2));

  // Attention: x_mid = x + o_proj(attn(rope(qkv_proj(rmsnorm_1(x))))). RoPE rotates q and k in place, so qkv holds
  // what attention read (its backward needs exactly that). An FP8 linear's input comes with its amax from the kernel
  // that writes it (the RMSNorms, SwiGLU; not attention's output: o_proj takes an amax pass of its own).
  Tensor* ln1_amax = Fp8XAmax(layer, LlamaLinear::kQkv);
  DT_RETURN_IF_ERROR(ops::RmsNormForward(ctx_, x, w(kInNorm), eps, &a.ln1, &a.ln1_rstd, ln1_amax));
  DT_RETURN_IF_ERROR(LinearForward(layer, LlamaLinear::kQkv, a.ln1, &qkv2, nullptr, ln1_amax != nullptr));
  DT_RETURN_IF_ERROR(ops::RopeForward(ctx_, rope_cos_, rope_sin_, opts_.n_head, opts_.n_kv_head, &a.qkv));
  DT_RETURN_IF_ERROR(ops::AttentionForward(ctx_, a.qkv, opts_.n_head, opts_.n_kv_head, &a.att, &a.lse));
  // The residual add rides in the GEMM's epilogue (C = x read once).
  DT_RETURN_IF_ERROR(LinearForward(layer, LlamaLinear::kOProj, att2, &a.x_mid, &x));

  // MLP: y = x_mid + down_proj(silu(gate) * up), [gate | up] = gate_up_proj(rmsnorm_2(x_mid)).
  Tensor* ln2_amax = Fp8XAmax(layer, LlamaLinear::kGateUp);
  DT_RETURN_IF_ERROR(ops::RmsNormForward(ctx_, a.x_mid, w(kPostNorm), eps, &a.ln2, &a.ln2_rstd, ln2_amax));
  DT_RETURN_IF_ERROR(LinearForward(layer, LlamaLinear::kGateUp, a.ln2, &a.h, nullptr, ln2_amax != nullptr));
  Tensor* act_amax = Fp8XAmax(layer, LlamaLinear::kDown);
  DT_RETURN_IF_ERROR(ops::SwiGluForward(ctx_, a.h, &a.act, act_amax));
  return LinearForward(layer, LlamaLinear::kDown, a.act, &y, &a.x_mid, act_amax != nullptr);
}

Tensor* Llama::Fp8XAmax(int layer, LlamaLinear l) {
  return fp8(l) ? fp8_->x_amax(act_set(layer), static_cast<int>(l)) : nullptr;
}

Tensor* Llama::Fp8DyAmax(LlamaLinear l) { return fp8(l) ? fp8_->dy_amax() : nullptr; }

Status Llama::LinearForward(int layer, LlamaLinear l, const Tensor& x, Tensor* y, const Tensor* residual,
                            bool x_amax_ready) {
  if (fp8(l)) {
    return fp8_->Forward(layer, act_set(layer), static_cast<int>(l), x, nullptr, y, nullptr, residual, training_,
                         x_amax_ready);
  }
  const Tensor& w = gemm_weight(ParamIndex(layer, kLinearParam[static_cast<int>(l)]));
  if (residual == nullptr) return ops::Matmul(ctx_, x, false, w, true, y);
  // The epilogue comes with a bias, zero here.
  Tensor aux = *residual;  // a handle: the epilogue reads it
  return ops::MatmulEpilogue(ctx_, x, false, w, true, zero_bias_, ops::Epilogue::kBiasResidual, y, &aux);
}

Status Llama::LinearBackward(int layer, LlamaLinear l, const Tensor& dy, const Tensor& x, Tensor* dx,
                             bool dy_amax_ready) {
  const int p = ParamIndex(layer, kLinearParam[static_cast<int>(l)]);
  if (fp8(l)) {
    return fp8_->Backward(layer, act_set(layer), static_cast<int>(l), dy, &g_[p], dx, nullptr, dy_amax_ready);
  }
  DT_RETURN_IF_ERROR(ops::Matmul(ctx_, dy, true, x, false, &g_[p], 1.f, 1.f));
  return ops::Matmul(ctx_, dy, false, gemm_weight(p), false, dx);
}

std::string Llama::precision_summary() const {
  if (opts_.precision != Precision::kFp8) return "";
  return Fp8Summary(opts_.fp8_layers, "attention, LM head, RMSNorms, SwiGLU");
}

Status Llama::Backward(float loss_scale, const GradReadyFn& on_ready) {
  DT_NVTX_RANGE("llama.backward");
  DT_CHECK_ARG(ids_.defined(), "Backward called before Forward");
  const int64_t n = batch_ * seq_len_;
  auto ready = [&](int i) { return on_ready ? on_ready(i) : Status::OK(); };
  // dlogits = d(loss_scale * mean loss)/d(logits), in place over the logits (0 in the padded columns): from the
  // forward's losses (one pass over the logits), or already there (fused classifier: d(mean loss)/d(logits), the
  // loss scale then goes into the GEMMs' alpha).
  const int head = head_index(), norm = norm_index();
  float alpha = 1.f;
  if (chunked()) {
    // The training Forward did the head's backward (dhead, and dlnf in dln_) at forward_scale_.
    if (!head_grad_in_forward_) {
      return Status::FailedPrecondition(
          "Llama: Backward with model.llama.loss_chunk_tokens needs a training-mode Forward first (the LM head's "
          "backward runs in it)");
    }
    head_grad_in_forward_ = false;  // consumed
    if (loss_scale != forward_scale_) {
      return Status::FailedPrecondition(
          "Llama: model.llama.loss_chunk_tokens computed the LM head's gradient in Forward at loss scale " +
          std::to_string(forward_scale_) + " (set_backward_scale), but Backward got " + std::to_string(loss_scale));
    }
    if (!opts_.tie_embeddings) DT_RETURN_IF_ERROR(ready(head));
  } else if (dlogits_in_place_) {
    alpha = loss_scale;
    dlogits_in_place_ = false;  // consumed: a second Backward needs a new Forward
  } else {
    DT_RETURN_IF_ERROR(ops::SoftmaxCrossEntropyBackward(ctx_, logits_, targets_, losses_, &logits_,
                                                        loss_scale / static_cast<float>(n), opts_.vocab_size));
  }
  // LM head: dhead += dlogits^T lnf (tied: the first of embed_tokens' two contributions), dlnf = dlogits head.
  if (!chunked()) {
    DT_RETURN_IF_ERROR(ops::Matmul(ctx_, logits_, true, lnf_, false, &g_[head], alpha, 1.f));
    if (!opts_.tie_embeddings) DT_RETURN_IF_ERROR(ready(head));
    DT_RETURN_IF_ERROR(ops::Matmul(ctx_, logits_, false, gemm_weight(head), false, &dln_, alpha));
  }
  // dres_ is the last layer's down_proj output gradient: with an FP8 down_proj its amax comes from here.
  DT_RETURN_IF_ERROR(ops::RmsNormBackward(ctx_, x_.back(), w_[norm], lnf_rstd_, dln_, &dres_, &g_[norm],
                                          /*accumulate_dx=*/false, Fp8DyAmax(LlamaLinear::kDown)));
  DT_RETURN_IF_ERROR(ready(norm));
  for (int l = static_cast<int>(opts_.n_layer) - 1; l >= 0; --l) DT_RETURN_IF_ERROR(LayerBackward(l, on_ready));
  // dres_ = d x_[0]; the embedding backward accumulates in the master dtype (reading bf16 rows directly). Tied:
  // embed_tokens is complete only now (LM head + embedding).
  DT_RETURN_IF_ERROR(ops::EmbeddingBackward(ctx_, ids_, dres_, &g_[0]));
  return ready(0);
}

Status Llama::LayerBackward(int layer, const GradReadyFn& on_ready) {
  DT_NVTX_RANGE("llama.layer_backward");
  DT_RETURN_IF_ERROR(CastLayer(layer));
  if (full(layer)) DT_RETURN_IF_ERROR(LayerForward(layer));  // refills the shared activations (same values)
  LayerActs& a = acts(layer);
  auto w = [&](int p) -> const Tensor& { return w_[ParamIndex(layer, p)]; };
  auto g = [&](int p) -> Tensor* { return &g_[ParamIndex(layer, p)]; };
  auto ready = [&](int p) { return on_ready ? on_ready(ParamIndex(layer, p)) : Status::OK(); };
  Tensor qkv2, att2, dqkv2, datt2;
  DT_RETURN_IF_ERROR(a.qkv.Reshape({dres_.dim(0), qkv_width()}, &qkv2));
  DT_RETURN_IF_ERROR(a.att.Reshape(dres_.shape(), &att2));
  DT_RETURN_IF_ERROR(dqkv_.Reshape(qkv2.shape(), &dqkv2));
  DT_RETURN_IF_ERROR(datt_.Reshape(dres_.shape(), &datt2));

  // Selective: the SwiGLU product and the norm outputs are recomputed right before the GEMMs that read them (the same
  // kernels on the same inputs: the same values); RmsNormForward rewrites rstd with its own bits. A full layer has
  // just recomputed them all.
  const bool pointwise = opts_.selective && !full(layer);
  const float eps = static_cast<float>(opts_.rms_norm_eps);

  // MLP, with dres_ = dy. Weight gradients accumulate (beta = 1) across micro-steps. An FP8 linear's weight gradient
  // reads the FP8 copy its forward kept, so the recompute for it is skipped. An FP8 linear's dy comes with its amax in
  // fp8_->dy_amax() (one slot) from the kernel that wrote dy, and the very next FP8 backward reads it: down's from the
  // RMSNorm backward above this layer (Backward's final norm, or the next layer's input norm; a full layer's recompute
  // in between casts no dy), gate_up's from SwiGLU's backward, o_proj's from the post-attention norm's backward.
  // qkv's dy (attention's and RoPE's backward) takes an amax pass of its own.
  if (pointwise && !fp8(LlamaLinear::kDown)) DT_RETURN_IF_ERROR(ops::SwiGluForward(ctx_, a.h, &a.act));
  DT_RETURN_IF_ERROR(LinearBackward(layer, LlamaLinear::kDown, dres_, a.act, &dact_, /*dy_amax_ready=*/true));
  DT_RETURN_IF_ERROR(ready(kDown));
  DT_RETURN_IF_ERROR(ops::SwiGluBackward(ctx_, a.h, dact_, &dh_, Fp8DyAmax(LlamaLinear::kGateUp)));
  if (pointwise && !fp8(LlamaLinear::kGateUp)) {
    DT_RETURN_IF_ERROR(ops::RmsNormForward(ctx_, a.x_mid, w(kPostNorm), eps, &a.ln2, &a.ln2_rstd));
  }
  DT_RETURN_IF_ERROR(LinearBackward(layer, LlamaLinear::kGateUp, dh_, a.ln2, &dln_, /*dy_amax_ready=*/true));
  DT_RETURN_IF_ERROR(ready(kGateUp));
  DT_RETURN_IF_ERROR(ops::RmsNormBackward(ctx_, a.x_mid, w(kPostNorm), a.ln2_rstd, dln_, &dres_, g(kPostNorm),
                                          /*accumulate_dx=*/true,  // the residual path plus the norm path
                                          Fp8DyAmax(LlamaLinear::kOProj)));
  DT_RETURN_IF_ERROR(ready(kPostNorm));

  // Attention, with dres_ = d x_mid. The gradient of the rotated q, k is rotated back in place before the projection.
  DT_RETURN_IF_ERROR(LinearBackward(layer, LlamaLinear::kOProj, dres_, att2, &datt2, /*dy_amax_ready=*/true));
  DT_RETURN_IF_ERROR(ready(kOProj));
  DT_RETURN_IF_ERROR(ops::AttentionBackward(ctx_, a.qkv, a.att, a.lse, datt_, opts_.n_head, opts_.n_kv_head, &dqkv_));
  DT_RETURN_IF_ERROR(ops::RopeBackward(ctx_, rope_cos_, rope_sin_, opts_.n_head, opts_.n_kv_head, &dqkv_));
  if (pointwise && !fp8(LlamaLinear::kQkv)) {
    DT_RETURN_IF_ERROR(ops::RmsNormForward(ctx_, x_[layer], w(kInNorm), eps, &a.ln1, &a.ln1_rstd));
  }
  DT_RETURN_IF_ERROR(LinearBackward(layer, LlamaLinear::kQkv, dqkv2, a.ln1, &dln_));
  DT_RETURN_IF_ERROR(ready(kQkv));
  // dres_ = d x_[layer]: the previous layer's down_proj output gradient (its amax for an FP8 down_proj).
  DT_RETURN_IF_ERROR(ops::RmsNormBackward(ctx_, x_[layer], w(kInNorm), a.ln1_rstd, dln_, &dres_, g(kInNorm),
                                          /*accumulate_dx=*/true, layer > 0 ? Fp8DyAmax(LlamaLinear::kDown) : nullptr));
  return ready(kInNorm);
}

}  // namespace dtrain::models
