#pragma once
// Gpt2: a GPT-2 style decoder-only language model. Implements models::Model (see model.h for the step protocol,
// the flat parameter layout and the gradient-ready contract).
//
//   x = wte[ids] + wpe[t]                                          residual stream [B*T, C]
//   per block: x += c_proj(attn(c_attn(ln_1(x))));  x += mlp.c_proj(gelu(mlp.c_fc(ln_2(x))))
//   logits = ln_f(x) @ wte^T  (tied LM head)  [B*T, padded_vocab];  loss = cross-entropy over the first vocab_size
//   columns (padded columns never take part in the softmax or the argmax)
// Inputs: i32 token ids [B, T]; targets: i32 [B, T]; losses(): f32 (f64 in f64 mode) [B*T], one per token.
//
// Parameters, forward order, PyTorch/HF GPT-2 names: wte.weight [Vp, C], wpe.weight [max_seq_len, C], then per
// block h.<l>.{ln_1.weight, ln_1.bias, attn.c_attn.weight [3C, C], attn.c_attn.bias [3C], attn.c_proj.weight
// [C, C], attn.c_proj.bias, ln_2.weight, ln_2.bias, mlp.c_fc.weight [4C, C], mlp.c_fc.bias [4C], mlp.c_proj.weight
// [C, 4C], mlp.c_proj.bias}, then ln_f.weight, ln_f.bias. Linear weights are [out, in] (nn.Linear's layout, the
// layout our matmul uses as y = x W^T); HF's checkpoints store them as Conv1D [in, out], so an HF export/import
// transposes every *.c_attn/c_proj/c_fc weight. wte rows past vocab_size are padding (initialised like the rest;
// they receive no gradient from the loss, only weight decay).
// Backward announces parameters ready in exactly the reverse of that order; wte, used by the LM head and the
// embedding, is last.
//
// Init (GPT-2's): every weight N(0, 0.02), the residual projections (attn.c_proj, mlp.c_proj) N(0, 0.02 /
// sqrt(2 * n_layer)), biases 0, layer-norm weights 1. Drawn on the host from SplitMix64(seed) (Box-Muller), so
// every device and rank starts identical.
//
// Precision:
//   kFp32: every tensor f32 (CPU or CUDA), or f64 on the CPU (options.dtype; for gradient checks).
//   kBf16 (CUDA only): params()/grads() stay f32 (master weights, f32 gradients); Forward casts the params into a
//     bf16 copy used by the GEMMs and their fused bias epilogues (the bias rounded to bf16, as under PyTorch's
//     autocast; cuBLASLt fuses no f32 bias into a bf16 GEMM on sm_90); activations are bf16; layer norms,
//     softmax statistics and every reduction are fp32.
//   kFp16 (CUDA only): kBf16's scheme with fp16 instead of bf16 (the same code path and kernels). fp16's range
//     (max 65504) needs dynamic loss scaling: the trainer passes LossScaler's scale to Backward
//     (runtime/optim/loss_scaler.h), which keeps the activation gradients in range; grads() then hold scaled values.
//   kFp8 (CUDA, compute capability 8.9+): kBf16, with the block linears of options.fp8_layers as FP8 GEMMs
//     (models/fp8_linears.h: e4m3 activations and weights, e5m2 gradients, per-tensor current scaling, f32 weight
//     gradients); attention, layer norms and the other linears stay bf16, and so does the LM head unless
//     fp8_layers names lm_head: then its three GEMMs run in FP8 too, the output gradient's scale coming from the
//     softmax's bound (|dlogits| <= the gradient's scale; kernels/fp8.h Fp8SetAmax: no amax pass over the [B*T, Vp]
//     gradient) and the loss scale folded into dlogits. An FP8 linear's bf16 input is kept by no block (one buffer
//     for all, Gpt2SharedInputsOf): its weight gradient reads the forward's FP8 copy. Its weight has no bf16 copy
//     (Gpt2Fp8WeightNumel): the FP8 copies are cast from the f32 master.
//   On the CPU, kBf16, kFp16 and kFp8 are InvalidArgument.
// recompute: keep only each block's input; Backward re-runs a block's forward just before its backward (one
// block's activations are alive at a time). Gradients are identical to the stored-activation path.
// logits() are valid until Backward, which overwrites them in place with dlogits.
// loss_chunk_tokens (0: off): Llama's chunked LM head and loss (models/llama.h, models/chunked_classifier.h): only
// [chunk, padded_vocab] logits exist, a training Forward does the head's backward at the scale told by
// set_backward_scale, an eval Forward keeps each chunk's argmax for EvalBatch. Not with fp16 (InvalidArgument): its
// dynamic loss scale is known only after the first micro-batch's Forward.

#include <memory>
#include <string>
#include <vector>

#include "kernels/matmul.h"
#include "models/fp8_linears.h"
#include "models/model.h"
#include "models/weight_copy.h"

namespace dtrain::models {

// The four linear layers of a GPT-2 block, forward order (the index into Fp8LayerSet::on and Fp8Linears).
enum class Gpt2Linear { kQkv, kAttnProj, kFc, kFcProj };
// Their names and shapes at width n_embd: qkv [3C, C], attn_proj [C, C], fc [4C, C], fc_proj [C, 4C].
std::vector<Fp8LinearShape> Gpt2Linears(int64_t n_embd);
// model.gpt2.fp8_layers: "auto" (the measured table for n_embd, see gpt2.cc), "all", "none", or a comma list of
// qkv, attn_proj, fc, fc_proj and lm_head (ParseFp8LayerSet; the set's entries in that order).
Status ParseGpt2Fp8Layers(const std::string& spec, int64_t n_embd, Fp8LayerSet* out);
// Whether `set` (from ParseGpt2Fp8Layers) runs the LM head in FP8.
bool Gpt2Fp8Head(const Fp8LayerSet& set);
// The elements of the weights that run in FP8 under `set` (block linears of n_layer blocks, and the tied wte for
// lm_head): the 16-bit working copy leaves them out (memory plans).
int64_t Gpt2Fp8WeightNumel(const Fp8LayerSet& set, int64_t n_embd, int64_t padded_vocab, int64_t n_layer);
// The bytes of the FP8 state of a GPT-2 with `set` (from ParseGpt2Fp8Layers): the block linears' Fp8Linears and
// the LM head's, for `act_sets` sets of block activations and `tokens` rows (memory plans).
int64_t Gpt2Fp8Bytes(const MemoryPlanInputs& in, const Fp8LayerSet& set, int64_t n_embd, int64_t padded_vocab,
                     int64_t n_layer, int64_t act_sets, int64_t tokens);
// The activations of a block that no backward reads, so that every block writes them into one buffer (ln1 and ln2
// share one [B*T, C], fc_act one [B*T, 4C]): the bf16 input of an FP8 linear (its weight gradient reads the FP8 copy
// the forward kept; qkv's input is ln1, fc's ln2, fc_proj's fc_act). None without FP8 (fp8 null) or under recompute
// (one set of activations already). Gpt2 and its memory plan (models/gpt2_spec.cc) both follow it.
struct Gpt2SharedInputs {
  bool ln1 = false, ln2 = false, fc_act = false;
};
Gpt2SharedInputs Gpt2SharedInputsOf(const Fp8LayerSet* fp8, bool recompute);

// Mirrors proto::Gpt2Config (the factory copies it) plus the run's precision/recompute.
struct Gpt2Options {
  int64_t vocab_size = 50257;
  int64_t padded_vocab_size = 50304;  // >= vocab_size
  int64_t max_seq_len = 1024;
  int64_t n_layer = 12;
  int64_t n_head = 12;
  int64_t n_embd = 768;  // a multiple of n_head
  Precision precision = Precision::kFp32;
  bool recompute = false;
  // Training mode, bf16/fp32 only: the forward's cross-entropy also writes d(mean loss)/d(logits) over the logits
  // in place (llm.c's fused classifier: one read and one write of the [B*T, V] logits instead of two passes), and
  // Backward scales it by loss_scale inside the LM-head GEMMs. logits() then holds that gradient after a training
  // Forward (eval mode keeps the logits). fp16 keeps the separate backward pass: its unscaled gradients underflow.
  bool fused_classifier = false;
  DType dtype = DType::kF32;      // kFp32 only: kF64 on the CPU
  Fp8LayerSet fp8_layers;         // kFp8 only: which linears run in FP8 (ParseGpt2Fp8Layers; lm_head: not chunked)
  int64_t loss_chunk_tokens = 0;  // see the file comment; > 0: tokens per LM-head/loss chunk (not fp16)
};

class Gpt2 final : public Model {
 public:
  // Activations are allocated for [batch, seq_len] up front (a later Forward of another shape reallocates them).
  static Status Create(DeviceContext& ctx, const Gpt2Options& opts, int64_t batch, int64_t seq_len,
                       std::unique_ptr<Gpt2>* out);

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

  const Gpt2Options& options() const { return opts_; }

 protected:
  int64_t num_eval_classes() const override { return opts_.vocab_size; }  // padded columns are not classes
  Status Predict(DeviceContext& ctx, Tensor* pred) override;              // chunked: the eval Forward's argmax

 private:
  // Per block, forward order of the 12 parameters.
  enum BlockParam {
    kLn1W,
    kLn1B,
    kAttnW,
    kAttnB,
    kAttnProjW,
    kAttnProjB,
    kLn2W,
    kLn2B,
    kFcW,
    kFcB,
    kFcProjW,
    kFcProjB,
    kBlockParams
  };
  static constexpr int kLinearWeight[4] = {kAttnW, kAttnProjW, kFcW, kFcProjW};  // per Gpt2Linear
  // Activations of one block (all of them, or one reused set under recompute).
  struct BlockActs {
    Tensor ln1, ln1_mean, ln1_rstd, qkv, att, lse, x_mid, ln2, ln2_mean, ln2_rstd, fc_pre, fc_act;
  };

  Gpt2(DeviceContext& ctx, const Gpt2Options& opts) : ctx_(ctx), opts_(opts) {}
  int ParamIndex(int layer, int p) const { return 2 + layer * kBlockParams + p; }
  bool mixed() const;        // kBf16 or kFp16: f32 master params, 16-bit GEMM weights and activations
  DType half_dtype() const;  // the 16-bit type of a mixed run: kBF16 or kF16
  DType act_dtype() const;   // activations: f32/f64, or half_dtype()
  DType stat_dtype() const;  // layer-norm statistics, losses: f32 (f64 in f64 mode)
  Status Alloc(const std::vector<int64_t>& shape, DType dt, Tensor* t);
  Status EnsureActivations(int64_t batch, int64_t seq_len);
  BlockActs& acts(int layer) { return acts_[opts_.recompute ? 0 : layer]; }
  // Weight `i` as used by the GEMMs: a view of params_, or of the 16-bit copy (not for an FP8 weight: undefined).
  const Tensor& gemm_weight(int i) const { return mixed() ? w16_[i] : w_[i]; }

  bool chunked() const { return opts_.loss_chunk_tokens > 0; }
  Status ChunkedHeadForward();  // lnf_ -> losses_ (training: + dwte, dlnf; eval: preds_), chunk by chunk
  Status EmbedForward(const Tensor& ids);
  Status BlockForward(int layer);  // x_[layer] -> x_[layer + 1]
  // One block linear of the forward: FP8 (fp8_) or bf16/fp32 (ops::MatmulEpilogue with epilogue e; aux as there).
  // x_amax_ready: an FP8 linear's x came with its amax (Fp8XAmax).
  Status LinearForward(int layer, Gpt2Linear l, int weight, const Tensor& x, ops::Epilogue e, Tensor* y, Tensor* aux,
                       bool x_amax_ready = false);
  // Where the producer of FP8 linear l's input in `layer` writes its amax, or null when l is not an FP8 linear.
  Tensor* Fp8XAmax(int layer, Gpt2Linear l);
  // Where the producer of an FP8 linear l's output gradient writes its amax, or null when l is not an FP8 linear.
  Tensor* Fp8DyAmax(Gpt2Linear l);
  Status BlockBackward(int layer, const GradReadyFn& on_ready);  // d x_[layer + 1] in dres_ -> d x_[layer]
  Status EmbedBackward(const GradReadyFn& on_ready);

  DeviceContext& ctx_;
  Gpt2Options opts_;
  std::vector<ParamInfo> infos_;
  Tensor params_, grads_, params16_;  // params16_: the 16-bit copy (mixed), without the FP8 weights
  std::vector<Tensor> w_, g_, w16_;   // views per parameter (w16_: undefined for an FP8 weight)
  std::vector<CopyRun> copy_runs_;    // mixed: what Forward casts into params16_ (models/weight_copy.h)
  int64_t batch_ = -1, seq_len_ = -1;
  Tensor ids_, targets_, pos_ids_;  // the last Forward's inputs; pos_ids_[b*T + t] = t
  Tensor tok_emb_, pos_emb_;        // f32 embeddings before the cast (mixed), or the pos part (kFp32)
  std::vector<Tensor> x_;           // x_[l]: residual stream entering block l; x_[n_layer]: after the last block
  std::vector<BlockActs> acts_;
  Tensor lnf_, lnf_mean_, lnf_rstd_, logits_, losses_;
  bool training_ = true;
  bool dlogits_in_place_ = false;  // the last Forward left d(mean loss)/d(logits) in logits_ (fused_classifier)
  // Chunked loss, as Llama's: the eval argmax, whether the last Forward did the head's backward and at what scale.
  Tensor preds_;
  bool head_grad_in_forward_ = false, preds_ready_ = false;
  float backward_scale_ = 1.f, forward_scale_ = 1.f;
  // Backward scratch: dres_ is d(loss)/d(residual stream) at the current block boundary.
  Tensor dres_, dln_, dqkv_, datt_, dfc_;
  Tensor shared_;                         // owns dfc_, tok_emb_ and pos_emb_ (views: see EnsureActivations)
  std::unique_ptr<Fp8Linears> fp8_;       // kFp8 only: the block linears
  std::unique_ptr<Fp8Linears> head_fp8_;  // kFp8 with lm_head only: the LM head (one linear [Vp, C])
  bool fp8(Gpt2Linear l) const { return fp8_ != nullptr && fp8_->on(static_cast<int>(l)); }
};

}  // namespace dtrain::models
