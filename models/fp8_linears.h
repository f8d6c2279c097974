#pragma once
// Fp8Linears: the FP8 linear layers of a transformer's blocks under Precision::kFp8 (issue 35), shared by every model
// that has them (Gpt2, Llama). A model lists its block linears (name, out and in features, forward order) and which of
// them run in FP8 (Fp8LayerSet); it keeps everything else of its bf16 path (norms, attention, the classifier, the
// residual stream, master weights and gradients). For each chosen linear, its three GEMMs run on Hopper's FP8 tensor
// cores through cuBLASLt (kernels/matmul_fp8.h):
//   forward  y  = x W^T (+ bias, + GELU / + residual, in the GEMM's epilogue)  x: e4m3, W: e4m3, y bf16, fast accum
//   dgrad    dx = dy W                                                          dy: e5m2*, W^T: e4m3, dx bf16
//   wgrad    dW += dy^T x                                                       dy^T: e5m2*, x^T: e4m3, dW f32
// Scaling is per tensor and current (kernels/fp8.h: amax, power-of-two scale, cast with the transposed copy), every
// scale in device memory: nothing syncs to the host, so the whole step stays one CUDA graph. The scale is computed
// inside the cast kernel; a model whose kernel writes x or dy can compute its amax there too (x_amax / dy_amax, then
// x_amax_ready / dy_amax_ready: no amax pass), and a linear's bias gradient comes from the loads of dy's cast
// (Backward's dbias: no bias-gradient pass). Both leave the FP8 bytes and scales bit for bit what they were. The
// weights are cast from the GEMM weights the model hands over (f32 masters or the bf16 copy; both layouts) in
// QuantizeWeight, once per Forward; an activation x is cast when the forward reads it, into one row-layout scratch
// shared by every linear (the forward GEMM is its only reader), and with `keep` its transposed copy (wgrad's operand)
// is kept per activation set for the backward; a gradient dy is cast when the backward reads it, into scratch.
// * e5m2 by default (Fp8LayerSet::grad, train.fp8_gradients): its range (57344 vs e4m3's 448) takes the spread of
// gradient values, as in Transformer Engine's HYBRID recipe; e4m3 trades that range for a mantissa bit (GPT-2 124M
// over 2,000 steps: both within the bf16 seed spread, 0.017 apart; measured in
// bench/results/2026-12-04-fp8-loss-10k-grad-format-and-llama-amax-h200.md).
//
// Checkpoints do not change (the masters stay what they were), so a run resumes bf16 <-> fp8 either way.
// Not thread-safe; every call is queued on the context's stream. Valid until the model that owns it is destroyed.

#include <memory>
#include <string>
#include <vector>

#include "core/device_context.h"
#include "core/status.h"
#include "core/tensor.h"
#include "kernels/fp8.h"
#include "models/memory_plan.h"

namespace dtrain::models {

// One linear of a block: y [tokens, out] = x [tokens, in] W^T, W [out, in].
struct Fp8LinearShape {
  std::string name;
  int64_t out = 0, in = 0;
};

// Which of a model's block linears run in FP8: on[i] for the model's linear i (its forward order); and the format of
// their gradients (dy) in the backward GEMMs (train.fp8_gradients).
struct Fp8LayerSet {
  std::vector<std::string> names;
  std::vector<bool> on;
  ops::Fp8Format grad = ops::Fp8Format::kE5M2;
  bool any() const;
  std::string Describe() const;  // the names that are on, comma-separated ("qkv, fc, fc_proj"), or "none"
};

// A config key's value (e.g. model.gpt2.fp8_layers) over the linears `names`: "auto" (auto_on: the model's measured
// table), "all", "none", or a comma list of names. Anything else is InvalidArgument naming `key`, the value and the
// accepted names.
Status ParseFp8LayerSet(const std::string& key, const std::string& spec, const std::vector<std::string>& names,
                        const std::vector<bool>& auto_on, Fp8LayerSet* out);

// train.fp8_gradients' value ("" = the default e5m2) into set->grad; a value other than the default under another
// `precision` than fp8 is InvalidArgument naming the key (it applies to fp8 only).
Status ParseFp8Gradients(const std::string& precision, const std::string& value, Fp8LayerSet* set);

// The log's line for an fp8 run: "fp8: FP8 GEMMs (...) for the linears <set>; bf16 for the rest (<rest>)".
std::string Fp8Summary(const Fp8LayerSet& set, const std::string& rest);

class Fp8Linears {
 public:
  // State for n_layer blocks of `linears` (set.on chooses), `act_sets` sets of kept activations (the model's sets of
  // saved activations) and `tokens` rows per GEMM (batch * seq_len). Every FP8 linear needs in and out features
  // that are multiples of 16, and tokens % 16 == 0 (FP8 GEMM rows of 16 bytes; InvalidArgument naming the linear
  // otherwise).
  static Status Create(DeviceContext& ctx, const std::vector<Fp8LinearShape>& linears, const Fp8LayerSet& set,
                       int64_t n_layer, int64_t act_sets, int64_t tokens, std::unique_ptr<Fp8Linears>* out);
  // The bytes Create allocates for these arguments, each tensor rounded as in.Round (memory plans).
  static int64_t Bytes(const MemoryPlanInputs& in, const std::vector<Fp8LinearShape>& linears, const Fp8LayerSet& set,
                       int64_t n_layer, int64_t act_sets, int64_t tokens);

  bool on(int linear) const { return set_.on[static_cast<size_t>(linear)]; }

  // w: block `layer`'s weight [out, in] of `linear` (on(linear) must hold), f32 or bf16: cast into e4m3 W and W^T.
  Status QuantizeWeight(int layer, int linear, const Tensor& w);
  // y [tokens, out] (bf16) = x [tokens, in] (bf16) W^T (+ bias, bf16 [out]); with gelu_aux (needs bias): aux = that,
  // y = gelu(aux); with residual: y += residual. keep: also keep x^T in activation set act_set for Backward.
  // x_amax_ready: x_amax(act_set, linear) already holds amax(x) (the kernel that wrote x computed it).
  Status Forward(int layer, int act_set, int linear, const Tensor& x, const Tensor* bias, Tensor* y, Tensor* gelu_aux,
                 const Tensor* residual, bool keep, bool x_amax_ready = false);
  // Where a producer of Forward's x for (act_set, linear) writes its amax (one-element f32 device tensor).
  Tensor* x_amax(int act_set, int linear) { return &acts_[act_set][linear].scales->amax; }
  // dy [tokens, out] (bf16): dw [out, in] (f32, or bf16 gradients) += dy^T x (x as kept by Forward in act_set), dx
  // [tokens, in] (bf16) = dy W; with dbias (f32 [out]) also dbias += the column sums of dy, from the loads of dy's cast
  // (no separate pass). dy_amax_ready: dy_amax() already holds amax(dy) (the kernel that wrote dy computed it).
  Status Backward(int layer, int act_set, int linear, const Tensor& dy, Tensor* dw, Tensor* dx, Tensor* dbias = nullptr,
                  bool dy_amax_ready = false);
  // Where a producer of the next Backward's dy writes its amax (a one-element f32 device tensor), to pass
  // dy_amax_ready.
  Tensor* dy_amax() { return &dy_scales_->amax; }

 private:
  struct Operand {  // one FP8 tensor: its layouts (q_t only for an activation) and its scales
    Tensor q, q_t;
    ops::Fp8Scales* scales = nullptr;
  };
  Fp8Linears(DeviceContext& ctx, const std::vector<Fp8LinearShape>& linears, const Fp8LayerSet& set, int64_t tokens)
      : ctx_(ctx), linears_(linears), set_(set), tokens_(tokens) {}
  Status Check(const char* what, int linear) const;

  DeviceContext& ctx_;
  std::vector<Fp8LinearShape> linears_;
  Fp8LayerSet set_;
  int64_t tokens_;
  Tensor scale_storage_;
  std::vector<ops::Fp8Scales> scales_;
  std::vector<std::vector<Operand>> weights_;  // [layer][linear]
  std::vector<std::vector<Operand>> acts_;     // [act_set][linear]: q_t and scales
  Tensor x_q_, dy_q_, dy_t_;  // scratch: [tokens * max in] and [tokens * max out] (x2), shaped per call
  ops::Fp8Scales* dy_scales_ = nullptr;
};

}  // namespace dtrain::models
