#include "models/mlp.h"

#include <cmath>
#include <vector>

#include "core/check.h"
#include "core/nvtx.h"
#include "core/random.h"
#include "kernels/bias.h"
#include "kernels/gelu.h"
#include "kernels/matmul.h"
#include "kernels/reduce.h"
#include "kernels/relu.h"
#include "kernels/softmax_xent.h"

namespace dtrain::models {

Status Mlp::Create(DeviceContext& ctx, const MlpOptions& opts, std::unique_ptr<Mlp>* out) {
  DT_CHECK_ARG(opts.input_dim > 0 && opts.num_classes > 1, "input_dim and num_classes must be positive");
  for (int64_t h : opts.hidden) DT_CHECK_ARG(h > 0, "hidden widths must be positive");
  DT_CHECK_ARG(opts.dtype == DType::kF32 || (opts.dtype == DType::kF64 && !ctx.is_cuda()),
               "Mlp supports f32 (CPU, CUDA) and f64 (CPU only)");
  std::unique_ptr<Mlp> m(new Mlp(ctx, opts));  // private constructor

  std::vector<int64_t> widths = {opts.input_dim};
  widths.insert(widths.end(), opts.hidden.begin(), opts.hidden.end());
  widths.push_back(opts.num_classes);
  int64_t offset = 0;
  for (int l = 0; l + 1 < static_cast<int>(widths.size()); ++l) {
    const int64_t in = widths[l], outw = widths[l + 1];
    const std::string prefix = "fc" + std::to_string(l);
    m->infos_.push_back({prefix + ".weight", {outw, in}, offset, outw * in});
    offset += outw * in;
    m->infos_.push_back({prefix + ".bias", {outw}, offset, outw});
    offset += outw;
  }
  DT_RETURN_IF_ERROR(Tensor::Empty({offset}, opts.dtype, ctx.allocator(), &m->params_));
  DT_RETURN_IF_ERROR(Tensor::Empty({offset}, opts.dtype, ctx.allocator(), &m->grads_));
  DT_RETURN_IF_ERROR(m->grads_.SetZero(ctx.stream()));
  for (size_t i = 0; i < m->infos_.size(); ++i) {
    const ParamInfo& p = m->infos_[i];
    Tensor pv, gv;
    DT_RETURN_IF_ERROR(m->params_.View(p.offset, p.shape, &pv));
    DT_RETURN_IF_ERROR(m->grads_.View(p.offset, p.shape, &gv));
    (i % 2 == 0 ? m->w_ : m->b_).push_back(pv);
    (i % 2 == 0 ? m->dw_ : m->db_).push_back(gv);
  }
  *out = std::move(m);
  return Status::OK();
}

Status Mlp::InitParams(uint64_t seed) {
  // Generated on the host in f64 so that every device and dtype starts from the same values.
  std::vector<double> host(params_.numel());
  SplitMix64 rng(seed);
  for (size_t i = 0; i < infos_.size(); ++i) {
    const ParamInfo& p = infos_[i];
    const int64_t fan_in = infos_[i - i % 2].shape[1];  // a bias uses its layer's weight fan-in
    const double bound = 1.0 / std::sqrt(static_cast<double>(fan_in));
    for (int64_t k = 0; k < p.numel; ++k) host[p.offset + k] = (2.0 * rng.Uniform() - 1.0) * bound;
  }
  Tensor staging;
  DT_RETURN_IF_ERROR(Tensor::Empty({params_.numel()}, opts_.dtype, ctx_.host_allocator(), &staging));
  if (opts_.dtype == DType::kF64) {
    for (int64_t i = 0; i < params_.numel(); ++i) staging.data<double>()[i] = host[i];
  } else {
    for (int64_t i = 0; i < params_.numel(); ++i) staging.data<float>()[i] = static_cast<float>(host[i]);
  }
  DT_RETURN_IF_ERROR(params_.CopyFrom(staging, ctx_.stream()));
  // `staging` is pageable host memory: cudaMemcpyAsync from it returns only after the copy is staged.
  return ctx_.Synchronize();
}

Status Mlp::EnsureActivations(int64_t batch) {
  if (batch == batch_) return Status::OK();
  const int layers = num_layers();
  a_.assign(layers, Tensor());
  z_.assign(layers, Tensor());
  dz_.assign(layers, Tensor());
  da_.assign(layers, Tensor());
  for (int l = 0; l < layers; ++l) {
    const int64_t outw = w_[l].dim(0), in = w_[l].dim(1);
    DT_RETURN_IF_ERROR(Tensor::Empty({batch, outw}, opts_.dtype, ctx_.allocator(), &z_[l]));
    DT_RETURN_IF_ERROR(Tensor::Empty({batch, outw}, opts_.dtype, ctx_.allocator(), &dz_[l]));
    if (l > 0) {
      DT_RETURN_IF_ERROR(Tensor::Empty({batch, in}, opts_.dtype, ctx_.allocator(), &a_[l]));
      DT_RETURN_IF_ERROR(Tensor::Empty({batch, in}, opts_.dtype, ctx_.allocator(), &da_[l]));
    }
  }
  DT_RETURN_IF_ERROR(Tensor::Empty({batch}, opts_.dtype, ctx_.allocator(), &losses_));
  batch_ = batch;
  return Status::OK();
}

Status Mlp::Forward(const Tensor& inputs, const Tensor& targets) {
  DT_NVTX_RANGE("mlp.forward");
  DT_CHECK_ARG(inputs.ndim() == 2 && inputs.dim(1) == opts_.input_dim,
               "Mlp expects inputs [B, " << opts_.input_dim << "], got " << inputs.ToString());
  DT_CHECK_ARG(targets.ndim() == 1 && targets.dim(0) == inputs.dim(0),
               "targets " << targets.ToString() << " do not match inputs " << inputs.ToString());
  const int64_t batch = inputs.dim(0);
  DT_RETURN_IF_ERROR(EnsureActivations(batch));
  a_[0] = inputs;
  const int layers = num_layers();
  for (int l = 0; l < layers; ++l) {
    // z = a @ W^T + b
    DT_RETURN_IF_ERROR(ops::Matmul(ctx_, a_[l], false, w_[l], true, &z_[l]));
    DT_RETURN_IF_ERROR(ops::BiasAdd(ctx_, b_[l], &z_[l]));
    if (l + 1 < layers) {
      DT_RETURN_IF_ERROR(opts_.gelu ? ops::GeluForward(ctx_, z_[l], &a_[l + 1])
                                    : ops::ReluForward(ctx_, z_[l], &a_[l + 1]));
    }
  }
  // Fused softmax cross-entropy: per-example losses and d(mean loss)/d(logits) in one pass.
  return ops::SoftmaxCrossEntropy(ctx_, z_.back(), targets, &losses_, &dz_.back(), 1.0f / static_cast<float>(batch));
}

Status Mlp::Backward(float loss_scale, const GradReadyFn& on_ready) {
  DT_NVTX_RANGE("mlp.backward");
  DT_CHECK_ARG(batch_ > 0 && a_[0].defined(), "Backward called before Forward");
  if (loss_scale != 1.0f) DT_RETURN_IF_ERROR(ops::Scale(ctx_, &dz_.back(), loss_scale));
  for (int l = num_layers() - 1; l >= 0; --l) {
    // dW += dz^T @ a ; db += colsum(dz): accumulate, so micro-steps add up.
    DT_RETURN_IF_ERROR(ops::Matmul(ctx_, dz_[l], true, a_[l], false, &dw_[l], 1.0f, 1.0f));
    DT_RETURN_IF_ERROR(ops::BiasGrad(ctx_, dz_[l], &db_[l], /*accumulate=*/true));
    // Bias first: reverse of the forward layout, so ready gradients form a suffix of grads().
    if (on_ready) {
      DT_RETURN_IF_ERROR(on_ready(2 * l + 1));
      DT_RETURN_IF_ERROR(on_ready(2 * l));
    }
    if (l == 0) break;
    // da = dz @ W ; dz_prev = act'(.) * da
    DT_RETURN_IF_ERROR(ops::Matmul(ctx_, dz_[l], false, w_[l], false, &da_[l]));
    DT_RETURN_IF_ERROR(opts_.gelu ? ops::GeluBackward(ctx_, z_[l - 1], da_[l], &dz_[l - 1])
                                  : ops::ReluBackward(ctx_, a_[l], da_[l], &dz_[l - 1]));
  }
  return Status::OK();
}

Status Mlp::InputsFromBatch(const Tensor& batch_inputs, Tensor* x) const {
  const int64_t rows = batch_inputs.dim(0), per_row = rows > 0 ? batch_inputs.numel() / rows : 0;
  if (per_row != opts_.input_dim) {
    return Status::InvalidArgument("model.mlp.input_dim is " + std::to_string(opts_.input_dim) +
                                   " but the dataset's samples have " + std::to_string(per_row) + " values");
  }
  return batch_inputs.Reshape({rows, per_row}, x);
}

}  // namespace dtrain::models
