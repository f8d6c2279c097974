#pragma once
// Llama: a Llama-style decoder-only language model with Hugging Face LlamaForCausalLM's semantics, so HF weights
// give the same logits. Implements models::Model (see model.h for the step protocol, the flat parameter layout and
// the gradient-ready contract).
//
//   x = embed[ids]                                                             residual stream [B*T, C]
//   per layer: x += o_proj(attn(rope(qkv_proj(rmsnorm_1(x)))));  x += down_proj(swiglu(gate_up_proj(rmsnorm_2(x))))
//   logits = rmsnorm_f(x) @ head^T  [B*T, Vp]  (head = embed_tokens when tied, else lm_head)
//   loss = cross-entropy over the first vocab_size columns (padded columns never take part in the softmax or argmax)
// RMSNorm: y = x / sqrt(mean(x^2) + eps) * w. RoPE (rotate-half, HF's layout): head dims (i, i + hs/2) of q and k at
// position t rotate by t * theta^(-2i/hs), those frequencies scaled as Llama 3.1/3.2's when rope_scaling is kLlama3
// (kernels/rope.h). Attention is causal grouped-query attention: query head h reads key/value head h / (NH / NKV).
// SwiGLU: silu(gate) * up. No biases anywhere.
// Inputs: i32 token ids [B, T]; targets: i32 [B, T]; losses(): f32 (f64 in f64 mode) [B*T], one per token.
//
// Parameters, forward order (HF's names except the two fused projections): model.embed_tokens.weight [Vp, C]; per
// layer l, model.layers.<l>.{input_layernorm.weight [C], self_attn.qkv_proj.weight [(NH + 2 NKV) hs, C] (rows
// q | k | v: HF's q_proj, k_proj, v_proj stacked), self_attn.o_proj.weight [C, NH hs], post_attention_layernorm.weight
// [C], mlp.gate_up_proj.weight [2F, C] (rows gate | up: HF's gate_proj, up_proj), mlp.down_proj.weight [C, F]};
// model.norm.weight [C]; lm_head.weight [Vp, C] only when untied. Linear weights are [out, in] (nn.Linear's layout,
// y = x W^T). Vp = vocab_size rounded up to a multiple of 128 (PaddedVocab); embed_tokens and lm_head rows past
// vocab_size are padding (initialised like the rest; they receive no gradient from the loss, only weight decay).
// Backward announces parameters ready in exactly the reverse of that order; embed_tokens (LM head when tied, and the
// embedding) is last.
//
// Init: every weight N(0, 0.02) (HF's initializer_range) except o_proj and down_proj, the residual projections,
// N(0, 0.02 / sqrt(2 * n_layer)) (GPT-2's scaling); RMSNorm weights 1. Drawn on the host from SplitMix64(seed)
// (Box-Muller), so every device and rank starts identical.
//
// Precision:
//   kFp32: every tensor f32 (CPU or CUDA), or f64 on the CPU (options.dtype; for gradient checks).
//   kBf16 (CUDA only): params()/grads() stay f32 (master weights, f32 gradients); Forward casts the params into a bf16
//     copy used by the GEMMs (of the LM head and the block linears' weights not in FP8: the RMSNorms and the embedding
//     lookup read the masters); activations are bf16; RMSNorm statistics, softmax statistics and every reduction fp32.
//     With layer_cast (model.llama.weight_cast layer) that copy holds the LM head and one layer: each layer's
//     parameters are cast into the layer part right before LayerForward and again before LayerBackward (unless it
//     still holds them: the last layer's, and a full layer's recompute), so the copy is 2 bytes a parameter smaller
//     for one more cast pass over the layers a step; the GEMMs read the same bf16 values, so the results are the same
//     bits.
//     Attention on CUDA takes head sizes up to 128; bf16 is fastest at 64 and 128 (kernels/attention.h).
//     With bf16_masters (train.master_weights bf16): params() are bf16 and are the GEMM weights themselves (no f32
//     master, no copy; the embedding lookup and the RMSNorms read them as bf16); grads() stay f32 (the weight-gradient
//     GEMMs accumulate in f32); the optimizer rounds the updated weights stochastically (kernels/optim_update.h).
//     InitParams rounds the f32 draws to nearest even. Needs kBf16. train.master_weights split runs the model the same
//     way: its params() are the high halves of fp32 masters whose low halves the optimizer keeps.
//     With bf16_grads (train.gradients bf16): grads() are bf16, with either masters. The weight-gradient GEMMs (bf16
//     and FP8) accumulate into them with beta 1 (the f32 product rounded to bf16: exactly that at the first
//     micro-step, whose C is zero), the RMSNorm and embedding backwards add their f32 sums to the widened values and
//     round once; the optimizer reads them exactly (kernels/optim_update.h). Needs kBf16 or kFp8.
//   kFp8 (CUDA, compute capability 8.9+): kBf16, with the block linears of options.fp8_layers as FP8 GEMMs
//     (models/fp8_linears.h: e4m3 activations, and weights cast from the master weights (f32, or bf16 masters), e5m2
//     gradients, per-tensor current scaling, f32 weight gradients); attention, the RMSNorms, SwiGLU and the LM head
//     stay bf16. The kernels that write an FP8 linear's input or output gradient also compute its amax (no amax pass):
//     the RMSNorms' forwards (qkv's and gate_up's x) and backwards (down's and o_proj's dy), SwiGLU's forward (down's
//     x) and backward (gate_up's dy); o_proj's x (attention's output) and qkv's dy take amax passes. bf16_masters works
//     with it. An FP8 linear's weight gradient reads the FP8 copy kept by the forward, not its bf16 input: that input
//     is one buffer for all layers (LlamaSharedActsOf), and under selective checkpointing its recompute is skipped.
//   kFp16 is not supported (InvalidArgument).
// Activation checkpointing, per layer (model.llama.activation_checkpointing; models/llama_spec.cc maps the keys):
//   full (the first full_layers layers): keep only the layer's input; Backward re-runs the layer's forward just before
//     its backward, into one set of buffers shared by all full layers (one such layer's activations are alive at a
//     time).
//   selective (the other layers, when `selective`): the two RMSNorm outputs and the SwiGLU product of every selective
//     layer live in one shared set of buffers; Backward recomputes them from the kept layer input, x_mid and gate|up
//     (RmsNormForward, SwiGluForward) just before the weight gradients that read them: per layer 2C + F fewer
//     activations kept (of 5C + (NH+2NKV)hs + 3F). The full layers' set then shares ln2 and act with it.
//   none (the other layers otherwise): every activation kept.
// Any mix gives the same gradients as none, bit for bit (the same kernels on the same inputs).
// fused_classifier: as Gpt2's (the training forward's cross-entropy writes d(mean loss)/d(logits) over the logits).
// logits() are valid until Backward, which overwrites them in place with dlogits.
// loss_chunk_tokens (0: off, the above): the LM head and the loss run over row chunks of the B*T tokens, so only
// [chunk, Vp] logits exist (logits() is that buffer: the last chunk's rows). A training Forward then does the head's
// backward too, chunk by chunk: the fused cross-entropy writes the chunk's d(mean loss)/d(logits) over its logits,
// dhead += s * dlogits^T lnf (beta 1: micro-batches accumulate) and dlnf = s * dlogits head into the Backward scratch,
// with s the scale told by set_backward_scale (model.h; Backward refuses another, FailedPrecondition, and needs a
// training-mode Forward before it). Backward starts from dlnf; the head's gradient is still announced by Backward, in
// the order above. An eval-mode Forward writes the losses and the chunks' argmax over the vocabulary, which
// EvalBatch's Predict reads. The gradients equal the unchunked ones up to the summation order of dhead.
// Graph-capturable: once the activations exist for a shape, Forward and Backward allocate nothing outside ctx's
// allocator and never synchronize the host.

#include <memory>
#include <string>
#include <vector>

#include "kernels/rope.h"
#include "models/fp8_linears.h"
#include "models/model.h"
#include "models/weight_copy.h"

namespace dtrain::models {

// The four linear layers of a Llama block, forward order (the index into Fp8LayerSet::on and Fp8Linears).
enum class LlamaLinear { kQkv, kOProj, kGateUp, kDown };
// Their names and shapes: qkv [(NH + 2 NKV) hs, C], o_proj [C, NH hs], gate_up [2F, C], down [C, F].
std::vector<Fp8LinearShape> LlamaLinears(int64_t hidden, int64_t n_head, int64_t n_kv_head, int64_t ffn_hidden);
// model.llama.fp8_layers: "auto" (from the measured table by hidden size, see llama.cc), "all", "none", or a comma list
// of qkv, o_proj, gate_up, down (ParseFp8LayerSet).
Status ParseLlamaFp8Layers(const std::string& spec, int64_t hidden, Fp8LayerSet* out);
// Which of a layer set's ln1, ln2 and act live in the buffers every set shares (ln1 and ln2 one [B*T, C], act one
// [B*T, F]) rather than in the set's own: a selective layer's (recomputed right before the backward reads them); an
// FP8 linear's bf16 input in any set (its weight gradient reads the FP8 copy the forward kept; qkv's input is ln1,
// gate_up's ln2, down's act); the full layers' set's ln2 and act when the other layers are selective (its recompute
// refills them right before its backward; its ln1 stays its own, as ln2 overwrites the shared buffer first).
// full_set: the full layers' set, else a set of the other layers; selective: the other layers are selective; fp8:
// the FP8 linears, null without FP8. Llama and its memory plan (models/llama_spec.cc) both follow it.
struct LlamaSharedActs {
  bool ln1 = false, ln2 = false, act = false;
};
LlamaSharedActs LlamaSharedActsOf(bool full_set, bool selective, const Fp8LayerSet* fp8);

// Mirrors proto::LlamaConfig (the spec copies it) plus the run's precision/recompute.
struct LlamaOptions {
  int64_t vocab_size = 32000;
  int64_t max_seq_len = 2048;
  int64_t n_layer = 16;
  int64_t n_head = 32;
  int64_t n_kv_head = 8;  // divides n_head
  int64_t hidden = 2048;  // C, a multiple of n_head; head size hidden / n_head, even
  int64_t ffn_hidden = 8192;
  double rope_theta = 10000.0;
  ops::RopeScaling rope_scaling;  // kNone: plain RoPE; kLlama3: Llama 3.1/3.2's (kernels/rope.h)
  double rms_norm_eps = 1e-5;
  bool tie_embeddings = true;
  Precision precision = Precision::kFp32;
  int64_t full_layers = 0;  // activation checkpointing (file comment): the first full_layers layers full, 0..n_layer
  bool selective = false;   // the other layers selective (else none)
  bool fused_classifier = false;  // see the file comment; bf16/fp32 training forwards only
  int64_t loss_chunk_tokens = 0;  // see the file comment; > 0: tokens per LM-head/loss chunk (the fused path)
  bool bf16_masters = false;      // kBf16/kFp8 only: params() are bf16 (see Precision in the file comment)
  bool layer_cast = false;        // kBf16/kFp8 with f32 masters: the bf16 copy per layer (see Precision)
  bool bf16_grads = false;        // kBf16/kFp8 only: grads() are bf16 (see Precision)
  Fp8LayerSet fp8_layers;         // kFp8 only: which block linears run in FP8
  DType dtype = DType::kF32;      // kFp32 only: kF64 on the CPU
};

class Llama final : public Model {
 public:
  // The rows of the embedding and LM head: vocab_size rounded up to a multiple of 128.
  static int64_t PaddedVocab(int64_t vocab_size) { return (vocab_size + 127) / 128 * 128; }

  // Activations are allocated for [batch, seq_len] up front (a later Forward of another shape reallocates them).
  // InvalidArgument for options the model cannot run (named).
  static Status Create(DeviceContext& ctx, const LlamaOptions& opts, int64_t batch, int64_t seq_len,
                       std::unique_ptr<Llama>* out);

  const std::vector<ParamInfo>& param_infos() const override { return infos_; }
  Tensor& params() override { return params_; }
  Tensor& grads() override { return grads_; }
  Status InitParams(uint64_t seed) override;
  Status Forward(const Tensor& inputs, const Tensor& targets) override;
  const Tensor& losses() const override { return losses_; }
  const Tensor& logits() const override { return logits_; }
  Status Backward(float loss_scale, const GradReadyFn& on_ready) override;
  void set_training(bool training) override { training_ = training; }
  void set_backward_scale(float loss_scale) override { backward_scale_ = loss_scale; }
  std::string precision_summary() const override;

  const LlamaOptions& options() const { return opts_; }

 protected:
  int64_t num_eval_classes() const override { return opts_.vocab_size; }  // padded columns are not classes
  Status Predict(DeviceContext& ctx, Tensor* pred) override;              // chunked: the eval Forward's argmax

 private:
  // Per layer, forward order of the 6 parameters.
  enum LayerParam { kInNorm, kQkv, kOProj, kPostNorm, kGateUp, kDown, kLayerParams };
  // The weight of each LlamaLinear, in its order.
  static constexpr int kLinearParam[] = {kQkv, kOProj, kGateUp, kDown};
  // Activations of one layer (all of them, or the one set the full layers share; ln1, ln2 and act may be views of
  // the buffers all sets share, LlamaSharedActsOf).
  struct LayerActs {
    Tensor ln1, ln1_rstd, qkv, att, lse, x_mid, ln2, ln2_rstd, h, act;
  };

  Llama(DeviceContext& ctx, const LlamaOptions& opts) : ctx_(ctx), opts_(opts) {}
  int ParamIndex(int layer, int p) const { return 1 + layer * kLayerParams + p; }
  int norm_index() const { return ParamIndex(static_cast<int>(opts_.n_layer), 0); }
  int head_index() const { return opts_.tie_embeddings ? 0 : norm_index() + 1; }
  int64_t head_size() const { return opts_.hidden / opts_.n_head; }
  int64_t qkv_width() const { return (opts_.n_head + 2 * opts_.n_kv_head) * head_size(); }
  bool mixed() const { return opts_.precision != Precision::kFp32; }
  DType act_dtype() const { return mixed() ? DType::kBF16 : opts_.dtype; }
  DType stat_dtype() const { return opts_.dtype; }  // RMSNorm statistics, losses: f32 (f64 in f64 mode)
  Status Alloc(const std::vector<int64_t>& shape, DType dt, Tensor* t);
  Status EnsureActivations(int64_t batch, int64_t seq_len);
  bool full(int layer) const { return layer < opts_.full_layers; }
  // acts_: [the full layers' shared set, if any] then one set per other layer.
  int act_set(int layer) const {
    const int64_t first_own = opts_.full_layers > 0 ? 1 : 0;
    return full(layer) ? 0 : static_cast<int>(first_own + layer - opts_.full_layers);
  }
  LayerActs& acts(int layer) { return acts_[static_cast<size_t>(act_set(layer))]; }
  bool fp8(LlamaLinear l) const { return fp8_ != nullptr && fp8_->on(static_cast<int>(l)); }
  // Weight `i` as used by the GEMMs: a view of params_ (fp32, or bf16 masters), or of the bf16 copy (layer_cast: a
  // block weight's view is valid after CastLayer of its layer).
  const Tensor& gemm_weight(int i) const { return mixed() && !opts_.bf16_masters ? w16_[i] : w_[i]; }
  // The bf16 copy: which stretches of params_ go where in params16_ (copy_runs_, cast by Forward; layer_cast:
  // layer_runs_, layer 0's, sources relative to layer 0's first parameter: layer l's are at layer_begin_ + l x
  // layer_numel_), its allocation, w16_'s views (sized by Create).
  Status MakeWeightCopy();
  // layer_cast: `layer`'s parameters into the copy's layer part, unless it holds them already (cast_layer_).
  Status CastLayer(int layer);

  bool chunked() const { return opts_.loss_chunk_tokens > 0; }
  Status ChunkedHeadForward();     // lnf_ -> losses_ (training: + dhead, dlnf; eval: preds_), chunk by chunk
  Status LayerForward(int layer);  // x_[layer] -> x_[layer + 1]
  // y = x W^T of block `layer`'s linear l (+ residual): FP8 (fp8_) or the bf16/fp32 GEMM. x_amax_ready: an FP8
  // linear's x came with its amax (Fp8XAmax).
  Status LinearForward(int layer, LlamaLinear l, const Tensor& x, Tensor* y, const Tensor* residual,
                       bool x_amax_ready = false);
  // dW += dy^T x, dx = dy W of block `layer`'s linear l; x: the forward's input (unread by an FP8 linear).
  // dy_amax_ready: an FP8 linear's dy came with its amax (Fp8DyAmax).
  Status LinearBackward(int layer, LlamaLinear l, const Tensor& dy, const Tensor& x, Tensor* dx,
                        bool dy_amax_ready = false);
  // Where the producer of FP8 linear l's input in `layer` writes its amax, or null when l is not an FP8 linear.
  Tensor* Fp8XAmax(int layer, LlamaLinear l);
  // Where the producer of FP8 linear l's output gradient writes its amax, or null when l is not an FP8 linear.
  Tensor* Fp8DyAmax(LlamaLinear l);
  Status LayerBackward(int layer, const GradReadyFn& on_ready);  // d x_[layer + 1] in dres_ -> d x_[layer]

  DeviceContext& ctx_;
  LlamaOptions opts_;
  std::vector<ParamInfo> infos_;
  Tensor params_, grads_, params16_;  // params16_: the bf16 copy (mixed with f32 masters; MakeWeightCopy)
  std::vector<CopyRun> copy_runs_, layer_runs_;
  int64_t layer_begin_ = 0, layer_numel_ = 0;  // layer 0's first parameter's offset; a layer's parameters
  int cast_layer_ = -1;                        // layer_cast: the layer whose parameters params16_'s layer part holds
  std::vector<Tensor> w_, g_, w16_;            // views per parameter
  Tensor rope_cos_, rope_sin_;                 // RoPE tables [max_seq_len, hs / 2], made once
  Tensor zero_bias_;  // [C] zeros of the activation dtype: the residual GEMMs' (bias-free) epilogue
  int64_t batch_ = -1, seq_len_ = -1;
  Tensor ids_, targets_;   // the last Forward's inputs, flat [B*T]
  std::vector<Tensor> x_;  // x_[l]: residual stream entering layer l; x_[n_layer]: after the last layer
  std::vector<LayerActs> acts_;
  Tensor lnf_, lnf_rstd_, logits_, losses_;
  bool training_ = true;
  bool dlogits_in_place_ = false;  // the last Forward left d(mean loss)/d(logits) in logits_ (fused_classifier)
  // Chunked loss: preds_ i32 [B*T], the last eval Forward's argmax (preds_ready_ until a training Forward);
  // head_grad_in_forward_: the last Forward added the head's gradient and left dlnf in dln_, at scale forward_scale_
  // (backward_scale_ when it ran), not yet consumed by Backward.
  Tensor preds_;
  bool head_grad_in_forward_ = false, preds_ready_ = false;
  float backward_scale_ = 1.f, forward_scale_ = 1.f;
  // Backward scratch: dres_ is d(loss)/d(residual stream) at the current layer boundary.
  Tensor dres_, dln_, dqkv_, datt_, dh_, dact_;
  std::unique_ptr<Fp8Linears> fp8_;  // kFp8 only
};

}  // namespace dtrain::models
