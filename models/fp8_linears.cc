#include "models/fp8_linears.h"

#include <algorithm>
#include <sstream>

#include "core/check.h"
#include "core/nvtx.h"
#include "kernels/matmul_fp8.h"

namespace dtrain::models {

namespace {

constexpr ops::Fp8Format kAct = ops::Fp8Format::kE4M3;  // activations and weights (gradients: set_.grad)

// Scale slots Create makes: one per (layer, FP8 linear), one per (activation set, FP8 linear), one for dy.
int64_t CountOn(const Fp8LayerSet& set) { return std::count(set.on.begin(), set.on.end(), true); }

// The largest in and out features over the FP8 linears (the scratch sizes).
void MaxDims(const std::vector<Fp8LinearShape>& linears, const Fp8LayerSet& set, int64_t* in, int64_t* out) {
  *in = *out = 0;
  for (size_t i = 0; i < linears.size(); ++i) {
    if (!set.on[i]) continue;
    *in = std::max(*in, linears[i].in);
    *out = std::max(*out, linears[i].out);
  }
}

}  // namespace

bool Fp8LayerSet::any() const { return std::find(on.begin(), on.end(), true) != on.end(); }

std::string Fp8LayerSet::Describe() const {
  std::string s;
  for (size_t i = 0; i < on.size(); ++i) {
    if (!on[i]) continue;
    if (!s.empty()) s += ", ";
    s += names[i];
  }
  return s.empty() ? "none" : s;
}

Status ParseFp8Gradients(const std::string& precision, const std::string& value, Fp8LayerSet* set) {
  const std::string v = value.empty() ? "e5m2" : value;  // a Config built in code has "" for the schema's default
  if (v != "e5m2" && v != "e4m3") {
    return Status::InvalidArgument("train.fp8_gradients: '" + v + "' is not e5m2 or e4m3");
  }
  if (precision != "fp8" && v != "e5m2") {
    return Status::InvalidArgument("train.fp8_gradients: '" + v + "' is set but train.precision is " + precision +
                                   " (it applies to fp8 only)");
  }
  set->grad = v == "e4m3" ? ops::Fp8Format::kE4M3 : ops::Fp8Format::kE5M2;
  return Status::OK();
}

std::string Fp8Summary(const Fp8LayerSet& set, const std::string& rest) {
  return std::string("fp8: FP8 GEMMs (e4m3 x e4m3 forward, ") + ops::Fp8FormatName(set.grad) +
         " gradients) for the linears " + set.Describe() + "; bf16 for the rest (" + rest + ")";
}

Status ParseFp8LayerSet(const std::string& key, const std::string& spec, const std::vector<std::string>& names,
                        const std::vector<bool>& auto_on, Fp8LayerSet* out) {
  out->names = names;
  out->on.assign(names.size(), false);
  if (spec == "auto") {
    out->on = auto_on;
    return Status::OK();
  }
  if (spec == "none") return Status::OK();
  if (spec == "all") {
    out->on.assign(names.size(), true);
    return Status::OK();
  }
  std::stringstream ss(spec);
  std::string item;
  while (std::getline(ss, item, ',')) {
    const size_t b = item.find_first_not_of(' '), e = item.find_last_not_of(' ');
    item = b == std::string::npos ? std::string() : item.substr(b, e - b + 1);
    const auto it = std::find(names.begin(), names.end(), item);
    if (it == names.end()) {
      std::string list;
      for (const std::string& n : names) list += (list.empty() ? "" : ", ") + n;
      return Status::InvalidArgument(key + ": '" + spec + "' is not auto, all, none or a comma list of " + list +
                                     " (unknown item '" + item + "')");
    }
    out->on[static_cast<size_t>(it - names.begin())] = true;
  }
  return Status::OK();
}

int64_t Fp8Linears::Bytes(const MemoryPlanInputs& in, const std::vector<Fp8LinearShape>& linears,
                          const Fp8LayerSet& set, int64_t n_layer, int64_t act_sets, int64_t tokens) {
  // Fp8ScaleSlots: 3 floats at a 16-byte stride per slot.
  int64_t bytes = in.Round(4 * std::max<int64_t>(1, 12 * ((n_layer + act_sets) * CountOn(set) + 1)));
  if (!set.any()) return bytes;
  for (size_t i = 0; i < linears.size(); ++i) {
    if (!set.on[i]) continue;
    bytes += n_layer * 2 * in.Round(linears[i].out * linears[i].in);  // W and W^T per layer
    bytes += act_sets * in.Round(tokens * linears[i].in);             // x^T per activation set
  }
  int64_t max_in, max_out;
  MaxDims(linears, set, &max_in, &max_out);
  return bytes + in.Round(tokens * max_in) + 2 * in.Round(tokens * max_out);  // the scratch
}

Status Fp8Linears::Create(DeviceContext& ctx, const std::vector<Fp8LinearShape>& linears, const Fp8LayerSet& set,
                          int64_t n_layer, int64_t act_sets, int64_t tokens, std::unique_ptr<Fp8Linears>* out) {
  DT_CHECK_ARG(set.on.size() == linears.size(),
               "Fp8Linears: " << set.on.size() << " choices for " << linears.size() << " linears");
  DT_CHECK_ARG(tokens % 16 == 0,
               "fp8: batch * seq_len = " << tokens << " must be a multiple of 16 (FP8 GEMM rows of 16 bytes)");
  for (size_t i = 0; i < linears.size(); ++i) {
    DT_CHECK_ARG(!set.on[i] || (linears[i].in % 16 == 0 && linears[i].out % 16 == 0),
                 "fp8: linear " << linears[i].name << " [" << linears[i].out << ", " << linears[i].in
                                << "] needs in and out features that are multiples of 16 (FP8 GEMM rows of 16 "
                                   "bytes); leave it out of the fp8 layers");
  }
  std::unique_ptr<Fp8Linears> f(new Fp8Linears(ctx, linears, set, tokens));  // private constructor
  DT_RETURN_IF_ERROR(ops::Fp8ScaleSlots(ctx, (n_layer + act_sets) * CountOn(set) + 1, &f->scale_storage_, &f->scales_));
  size_t slot = 0;
  auto alloc = [&](std::vector<int64_t> shape, Tensor* t) {
    return Tensor::Empty(shape, DType::kU8, ctx.allocator(), t);
  };
  f->weights_.assign(static_cast<size_t>(n_layer), std::vector<Operand>(linears.size()));
  f->acts_.assign(static_cast<size_t>(act_sets), std::vector<Operand>(linears.size()));
  for (size_t i = 0; i < linears.size(); ++i) {
    if (!set.on[i]) continue;
    const int64_t n = linears[i].out, k = linears[i].in;
    for (auto& w : f->weights_) {
      DT_RETURN_IF_ERROR(alloc({n, k}, &w[i].q));
      DT_RETURN_IF_ERROR(alloc({k, n}, &w[i].q_t));
      w[i].scales = &f->scales_[slot++];
    }
    for (auto& a : f->acts_) {
      DT_RETURN_IF_ERROR(alloc({k, tokens}, &a[i].q_t));
      a[i].scales = &f->scales_[slot++];
    }
  }
  if (set.any()) {
    int64_t max_in, max_out;
    MaxDims(linears, set, &max_in, &max_out);
    DT_RETURN_IF_ERROR(alloc({tokens * max_in}, &f->x_q_));
    DT_RETURN_IF_ERROR(alloc({tokens * max_out}, &f->dy_q_));
    DT_RETURN_IF_ERROR(alloc({tokens * max_out}, &f->dy_t_));
  }
  f->dy_scales_ = &f->scales_[slot];
  *out = std::move(f);
  return Status::OK();
}

Status Fp8Linears::Check(const char* what, int linear) const {
  DT_CHECK_ARG(linear >= 0 && static_cast<size_t>(linear) < linears_.size() && on(linear),
               "Fp8Linears::" << what << ": linear " << linear << " is not an FP8 layer (" << set_.Describe() << ")");
  return Status::OK();
}

Status Fp8Linears::QuantizeWeight(int layer, int linear, const Tensor& w) {
  DT_RETURN_IF_ERROR(Check("QuantizeWeight", linear));
  Operand& o = weights_[layer][linear];
  return ops::Fp8Quantize(ctx_, w, kAct, o.scales, &o.q, &o.q_t);
}

Status Fp8Linears::Forward(int layer, int act_set, int linear, const Tensor& x, const Tensor* bias, Tensor* y,
                           Tensor* gelu_aux, const Tensor* residual, bool keep, bool x_amax_ready) {
  DT_NVTX_RANGE("fp8.linear_forward");
  DT_RETURN_IF_ERROR(Check("Forward", linear));
  Operand& a = acts_[act_set][linear];
  const Operand& w = weights_[layer][linear];
  Tensor q = Tensor::Wrap(x_q_.data(), {tokens_, linears_[linear].in}, DType::kU8, ctx_.type());
  ops::Fp8QuantizeOptions qo;
  qo.amax_ready = x_amax_ready;
  DT_RETURN_IF_ERROR(ops::Fp8Quantize(ctx_, x, kAct, a.scales, &q, keep ? &a.q_t : nullptr, qo));
  ops::MatmulFp8Options opts;
  opts.fast_accum = true;  // the forward's K is the layer width; see kernels/matmul_fp8.h
  opts.bias = bias;
  opts.gelu_aux = gelu_aux;
  opts.residual = residual;
  return ops::MatmulFp8(ctx_, q, kAct, a.scales->scale_inv, w.q, kAct, w.scales->scale_inv, y, opts);
}

Status Fp8Linears::Backward(int layer, int act_set, int linear, const Tensor& dy, Tensor* dw, Tensor* dx, Tensor* dbias,
                            bool dy_amax_ready) {
  DT_NVTX_RANGE("fp8.linear_backward");
  DT_RETURN_IF_ERROR(Check("Backward", linear));
  const Operand& a = acts_[act_set][linear];
  const Operand& w = weights_[layer][linear];
  const int64_t n = linears_[linear].out;
  DT_CHECK_ARG(dy.ndim() == 2 && dy.dim(0) == tokens_ && dy.dim(1) == n,
               "Fp8Linears::Backward: dy " << dy.ToString() << " must be [" << tokens_ << "," << n << "] ("
                                           << linears_[linear].name << ")");
  Tensor q = Tensor::Wrap(dy_q_.data(), {tokens_, n}, DType::kU8, ctx_.type());
  Tensor q_t = Tensor::Wrap(dy_t_.data(), {n, tokens_}, DType::kU8, ctx_.type());
  ops::Fp8QuantizeOptions qo;
  qo.amax_ready = dy_amax_ready;
  qo.dbias = dbias;
  DT_RETURN_IF_ERROR(ops::Fp8Quantize(ctx_, dy, set_.grad, dy_scales_, &q, &q_t, qo));
  ops::MatmulFp8Options acc;
  acc.accumulate = true;  // weight gradients accumulate across micro-steps, as on the bf16 path
  DT_RETURN_IF_ERROR(
      ops::MatmulFp8(ctx_, q_t, set_.grad, dy_scales_->scale_inv, a.q_t, kAct, a.scales->scale_inv, dw, acc));
  return ops::MatmulFp8(ctx_, q, set_.grad, dy_scales_->scale_inv, w.q_t, kAct, w.scales->scale_inv, dx);
}

}  // namespace dtrain::models
