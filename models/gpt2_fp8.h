#pragma once
// Gpt2Fp8: the FP8 linear layers of Gpt2 under Precision::kFp8 (issue 35). Gpt2 keeps everything else of its bf16
// path (layer norms, attention, the classifier, the residual stream, f32 master weights and gradients); for each
// block linear chosen by Fp8LayerSet, its three GEMMs run on Hopper's FP8 tensor cores through cuBLASLt
// (kernels/matmul_fp8.h):
//   forward  y  = x W^T + b (+ GELU / + residual, in the GEMM's epilogue)   x: e4m3, W: e4m3, y bf16, fast accum
//   dgrad    dx = dy W                                                        dy: e5m2, W^T: e4m3, dx bf16
//   wgrad    dW += dy^T x                                                     dy^T: e5m2, x^T: e4m3, dW f32 (the grads)
// Scaling is per tensor and current (kernels/fp8.h: amax, power-of-two scale, cast with the transposed copy), every
// scale in device memory: nothing syncs to the host, so the whole step stays one CUDA graph. The weights are cast
// from the f32 masters (both layouts) in QuantizeWeight, once per Forward; an activation x is cast when the forward
// reads it and its FP8 copies (x and x^T) are kept for the backward; a gradient dy is cast when the backward reads it.
// e5m2 for gradients: its range (57344 vs e4m3's 448) takes the loss scale and the spread of gradient values, as in
// Transformer Engine's HYBRID recipe.
//
// Checkpoints do not change (the masters are f32), so a run resumes bf16 <-> fp8 either way.
// Not thread-safe; every call is queued on the context's stream. Valid until the Gpt2 that owns it is destroyed.

#include <array>
#include <memory>
#include <string>
#include <vector>

#include "core/device_context.h"
#include "core/status.h"
#include "core/tensor.h"
#include "kernels/fp8.h"

namespace dtrain::models {

// The four linear layers of a GPT-2 block, forward order.
enum class Gpt2Linear { kQkv, kAttnProj, kFc, kFcProj };
constexpr int kGpt2Linears = 4;
const char* Gpt2LinearName(Gpt2Linear l);  // "qkv", "attn_proj", "fc", "fc_proj"

// Which block linears run in FP8.
struct Fp8LayerSet {
  std::array<bool, kGpt2Linears> on = {false, false, false, false};
  bool any() const { return on[0] || on[1] || on[2] || on[3]; }
  std::string Describe() const;  // "qkv, fc, fc_proj" or "none"
};

// model.gpt2.fp8_layers: "auto" (the measured table for n_embd, see gpt2_fp8.cc), "all", "none", or a comma list of
// qkv, attn_proj, fc, fc_proj. Anything else is InvalidArgument naming the key and the accepted values.
Status ParseFp8Layers(const std::string& spec, int64_t n_embd, Fp8LayerSet* out);

class Gpt2Fp8 {
 public:
  // State for n_layer blocks of width n_embd, `act_sets` sets of saved activations (n_layer, or 1 under recompute)
  // and `tokens` rows per GEMM (batch * seq_len). Needs n_embd % 16 == 0 and tokens % 16 == 0 (FP8 GEMM rows).
  static Status Create(DeviceContext& ctx, const Fp8LayerSet& set, int64_t n_layer, int64_t n_embd, int64_t act_sets,
                       int64_t tokens, std::unique_ptr<Gpt2Fp8>* out);

  bool on(Gpt2Linear l) const { return set_.on[static_cast<int>(l)]; }
  const Fp8LayerSet& set() const { return set_; }

  // w: the f32 master weight [N, K] of block `layer`'s linear l (on(l) must hold): cast into e4m3 W and W^T.
  Status QuantizeWeight(int layer, Gpt2Linear l, const Tensor& w);
  // y [tokens, N] (bf16) = x [tokens, K] (bf16) W^T + bias (bf16 [N]), and with gelu_aux: aux = that, y = gelu(aux);
  // with residual: y += residual. keep: also write x^T for Backward (training).
  Status Forward(int layer, int act_set, Gpt2Linear l, const Tensor& x, const Tensor& bias, Tensor* y, Tensor* gelu_aux,
                 const Tensor* residual, bool keep);
  // dy [tokens, N] (bf16): dw [N, K] (f32) += dy^T x (x as saved by Forward with keep), dx [tokens, K] (bf16) = dy W.
  Status Backward(int layer, int act_set, Gpt2Linear l, const Tensor& dy, Tensor* dw, Tensor* dx);

 private:
  struct Operand {  // one FP8 tensor: both layouts and its scales
    Tensor q, q_t;
    ops::Fp8Scales* scales = nullptr;
  };
  Gpt2Fp8(DeviceContext& ctx, const Fp8LayerSet& set, int64_t n_embd, int64_t tokens)
      : ctx_(ctx), set_(set), n_embd_(n_embd), tokens_(tokens) {}
  int64_t Out(Gpt2Linear l) const;  // N
  int64_t In(Gpt2Linear l) const;   // K

  DeviceContext& ctx_;
  Fp8LayerSet set_;
  int64_t n_embd_, tokens_;
  Tensor scale_storage_;
  std::vector<ops::Fp8Scales> scales_;
  std::vector<std::array<Operand, kGpt2Linears>> weights_;  // per layer
  std::vector<std::array<Operand, kGpt2Linears>> acts_;     // per activation set
  Tensor dy_q_, dy_t_;                                      // [tokens * 4C] each, shaped per call
  ops::Fp8Scales* dy_scales_ = nullptr;
};

}  // namespace dtrain::models
