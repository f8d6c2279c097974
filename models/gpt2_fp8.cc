#include "models/gpt2_fp8.h"

#include <sstream>

#include "core/check.h"
#include "core/nvtx.h"
#include "kernels/matmul_fp8.h"

namespace dtrain::models {

namespace {

constexpr ops::Fp8Format kAct = ops::Fp8Format::kE4M3;   // activations and weights
constexpr ops::Fp8Format kGrad = ops::Fp8Format::kE5M2;  // gradients

// "auto": the linears whose FP8 forward + dgrad + wgrad, with this file's quantization passes, beat bf16 at width
// n_embd on an H200 (B x T = 16 x 1024). Source: bench/results/2026-12-03-fp8-gemm-h200.md, "Net per layer" (separate
// quantization passes): at 768 qkv 0.96x, attn_proj 0.78x, fc 1.02x, fc_proj 1.01x; at 1024 qkv 1.07x, attn_proj
// 0.85x, fc 1.13x, fc_proj 1.14x; at 1280 attn_proj 1.01x; at 1600 attn_proj 1.06x.
Fp8LayerSet AutoLayers(int64_t n_embd) {
  Fp8LayerSet s;
  s.on[static_cast<int>(Gpt2Linear::kFc)] = true;
  s.on[static_cast<int>(Gpt2Linear::kFcProj)] = true;
  s.on[static_cast<int>(Gpt2Linear::kQkv)] = n_embd >= 1024;
  s.on[static_cast<int>(Gpt2Linear::kAttnProj)] = n_embd >= 1600;
  return s;
}

}  // namespace

const char* Gpt2LinearName(Gpt2Linear l) {
  switch (l) {
    case Gpt2Linear::kQkv:
      return "qkv";
    case Gpt2Linear::kAttnProj:
      return "attn_proj";
    case Gpt2Linear::kFc:
      return "fc";
    case Gpt2Linear::kFcProj:
      return "fc_proj";
  }
  return "?";
}

std::string Fp8LayerSet::Describe() const {
  std::string s;
  for (int i = 0; i < kGpt2Linears; ++i) {
    if (!on[i]) continue;
    if (!s.empty()) s += ", ";
    s += Gpt2LinearName(static_cast<Gpt2Linear>(i));
  }
  return s.empty() ? "none" : s;
}

Status ParseFp8Layers(const std::string& spec, int64_t n_embd, Fp8LayerSet* out) {
  *out = Fp8LayerSet();
  if (spec == "auto") {
    *out = AutoLayers(n_embd);
    return Status::OK();
  }
  if (spec == "none") return Status::OK();
  if (spec == "all") {
    out->on = {true, true, true, true};
    return Status::OK();
  }
  std::stringstream ss(spec);
  std::string item;
  while (std::getline(ss, item, ',')) {
    const size_t b = item.find_first_not_of(' '), e = item.find_last_not_of(' ');
    item = b == std::string::npos ? std::string() : item.substr(b, e - b + 1);
    bool found = false;
    for (int i = 0; i < kGpt2Linears; ++i) {
      if (item == Gpt2LinearName(static_cast<Gpt2Linear>(i))) {
        out->on[i] = true;
        found = true;
      }
    }
    if (!found) {
      return Status::InvalidArgument("model.gpt2.fp8_layers: '" + spec +
                                     "' is not auto, all, none or a comma list of " +
                                     "qkv, attn_proj, fc, fc_proj (unknown item '" + item + "')");
    }
  }
  return Status::OK();
}

int64_t Gpt2Fp8::Out(Gpt2Linear l) const {
  switch (l) {
    case Gpt2Linear::kQkv:
      return 3 * n_embd_;
    case Gpt2Linear::kFc:
      return 4 * n_embd_;
    default:
      return n_embd_;
  }
}

int64_t Gpt2Fp8::In(Gpt2Linear l) const { return l == Gpt2Linear::kFcProj ? 4 * n_embd_ : n_embd_; }

Status Gpt2Fp8::Create(DeviceContext& ctx, const Fp8LayerSet& set, int64_t n_layer, int64_t n_embd, int64_t act_sets,
                       int64_t tokens, std::unique_ptr<Gpt2Fp8>* out) {
  DT_CHECK_ARG(n_embd % 16 == 0 && tokens % 16 == 0, "Gpt2 fp8: n_embd "
                                                         << n_embd << " and batch * seq_len " << tokens
                                                         << " must be multiples of 16 (FP8 GEMM rows of 16 bytes)");
  std::unique_ptr<Gpt2Fp8> f(new Gpt2Fp8(ctx, set, n_embd, tokens));  // private constructor
  int64_t count = 0;
  for (bool b : set.on) count += b ? 1 : 0;
  DT_RETURN_IF_ERROR(ops::Fp8ScaleSlots(ctx, (n_layer + act_sets) * count + 1, &f->scale_storage_, &f->scales_));
  size_t slot = 0;
  auto alloc = [&](std::vector<int64_t> shape, Tensor* t) {
    return Tensor::Empty(shape, DType::kU8, ctx.allocator(), t);
  };
  f->weights_.resize(static_cast<size_t>(n_layer));
  f->acts_.resize(static_cast<size_t>(act_sets));
  for (int i = 0; i < kGpt2Linears; ++i) {
    if (!set.on[i]) continue;
    const auto l = static_cast<Gpt2Linear>(i);
    const int64_t n = f->Out(l), k = f->In(l);
    for (auto& w : f->weights_) {
      DT_RETURN_IF_ERROR(alloc({n, k}, &w[i].q));
      DT_RETURN_IF_ERROR(alloc({k, n}, &w[i].q_t));
      w[i].scales = &f->scales_[slot++];
    }
    for (auto& a : f->acts_) {
      DT_RETURN_IF_ERROR(alloc({tokens, k}, &a[i].q));
      DT_RETURN_IF_ERROR(alloc({k, tokens}, &a[i].q_t));
      a[i].scales = &f->scales_[slot++];
    }
  }
  if (set.any()) {
    DT_RETURN_IF_ERROR(alloc({tokens * 4 * n_embd}, &f->dy_q_));
    DT_RETURN_IF_ERROR(alloc({tokens * 4 * n_embd}, &f->dy_t_));
  }
  f->dy_scales_ = &f->scales_[slot];
  *out = std::move(f);
  return Status::OK();
}

Status Gpt2Fp8::QuantizeWeight(int layer, Gpt2Linear l, const Tensor& w) {
  DT_CHECK_ARG(on(l), "Gpt2Fp8::QuantizeWeight: " << Gpt2LinearName(l) << " is not an FP8 layer");
  Operand& o = weights_[layer][static_cast<int>(l)];
  return ops::Fp8Quantize(ctx_, w, kAct, o.scales, &o.q, &o.q_t);
}

Status Gpt2Fp8::Forward(int layer, int act_set, Gpt2Linear l, const Tensor& x, const Tensor& bias, Tensor* y,
                        Tensor* gelu_aux, const Tensor* residual, bool keep) {
  DT_NVTX_RANGE("gpt2.fp8_forward");
  DT_CHECK_ARG(on(l), "Gpt2Fp8::Forward: " << Gpt2LinearName(l) << " is not an FP8 layer");
  Operand& a = acts_[act_set][static_cast<int>(l)];
  const Operand& w = weights_[layer][static_cast<int>(l)];
  DT_RETURN_IF_ERROR(ops::Fp8Quantize(ctx_, x, kAct, a.scales, &a.q, keep ? &a.q_t : nullptr));
  ops::MatmulFp8Options opts;
  opts.fast_accum = true;  // the forward's K is the layer width; see kernels/matmul_fp8.h
  opts.bias = &bias;
  opts.gelu_aux = gelu_aux;
  opts.residual = residual;
  return ops::MatmulFp8(ctx_, a.q, kAct, a.scales->scale_inv, w.q, kAct, w.scales->scale_inv, y, opts);
}

Status Gpt2Fp8::Backward(int layer, int act_set, Gpt2Linear l, const Tensor& dy, Tensor* dw, Tensor* dx) {
  DT_NVTX_RANGE("gpt2.fp8_backward");
  DT_CHECK_ARG(on(l), "Gpt2Fp8::Backward: " << Gpt2LinearName(l) << " is not an FP8 layer");
  const Operand& a = acts_[act_set][static_cast<int>(l)];
  const Operand& w = weights_[layer][static_cast<int>(l)];
  const int64_t n = Out(l);
  DT_CHECK_ARG(dy.ndim() == 2 && dy.dim(0) == tokens_ && dy.dim(1) == n,
               "Gpt2Fp8::Backward: dy " << dy.ToString() << " must be [" << tokens_ << "," << n << "]");
  Tensor q = Tensor::Wrap(dy_q_.data(), {tokens_, n}, DType::kU8, ctx_.type());
  Tensor q_t = Tensor::Wrap(dy_t_.data(), {n, tokens_}, DType::kU8, ctx_.type());
  DT_RETURN_IF_ERROR(ops::Fp8Quantize(ctx_, dy, kGrad, dy_scales_, &q, &q_t));
  ops::MatmulFp8Options acc;
  acc.accumulate = true;  // weight gradients accumulate across micro-steps, as on the bf16 path
  DT_RETURN_IF_ERROR(
      ops::MatmulFp8(ctx_, q_t, kGrad, dy_scales_->scale_inv, a.q_t, kAct, a.scales->scale_inv, dw, acc));
  return ops::MatmulFp8(ctx_, q, kGrad, dy_scales_->scale_inv, w.q_t, kAct, w.scales->scale_inv, dx);
}

}  // namespace dtrain::models
