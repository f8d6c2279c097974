#include "runtime/optim/optimizer.h"

#include <cmath>

#include "core/check.h"
#include "core/nvtx.h"
#include "kernels/optim_update.h"
#include "kernels/reduce.h"
#include "runtime/optim/loss_scaler.h"
#include "runtime/optim/staged_args.h"

namespace dtrain::runtime {

ops::SgdHyper SgdHyperFor(const OptimizerOptions& opts, double lr) {
  ops::SgdHyper h;
  h.lr = lr;
  h.momentum = opts.momentum;
  h.weight_decay = opts.weight_decay;
  h.nesterov = opts.nesterov;
  return h;
}

ops::AdamWHyper AdamWHyperFor(const OptimizerOptions& opts, double lr, int64_t step) {
  ops::AdamWHyper h;
  h.lr = lr;
  h.beta1 = opts.beta1;
  h.beta2 = opts.beta2;
  h.eps = opts.eps;
  h.weight_decay = opts.weight_decay;
  h.step = step;
  return h;
}

Optimizer::~Optimizer() = default;

Status Optimizer::Create(DeviceContext& ctx, const OptimizerOptions& opts, int64_t num_params,
                         std::unique_ptr<Optimizer>* out) {
  DT_CHECK_ARG(out != nullptr, "out is null");
  DT_CHECK_ARG(num_params > 0, "the optimizer needs at least one parameter, got " << num_params);
  DT_CHECK_ARG(std::isfinite(opts.lr) && opts.lr >= 0.0, "lr must be finite and >= 0, got " << opts.lr);
  DT_CHECK_ARG(opts.weight_decay >= 0.0, "weight_decay must be >= 0, got " << opts.weight_decay);
  DT_CHECK_ARG(std::isfinite(opts.grad_clip) && opts.grad_clip >= 0.0,
               "grad_clip must be finite and >= 0 (0 = off), got " << opts.grad_clip);
  std::unique_ptr<Optimizer> o(new Optimizer());  // private constructor: make_unique cannot reach it
  if (opts.name == "sgd") {
    o->kind_ = Kind::kSgd;
    DT_CHECK_ARG(opts.momentum >= 0.0 && opts.momentum <= 1.0, "sgd momentum must be in [0, 1], got " << opts.momentum);
    DT_CHECK_ARG(!opts.nesterov || opts.momentum > 0.0, "nesterov needs momentum > 0");
  } else if (opts.name == "adamw") {
    o->kind_ = Kind::kAdamW;
    DT_CHECK_ARG(opts.beta1 >= 0.0 && opts.beta1 < 1.0, "adamw beta1 must be in [0, 1), got " << opts.beta1);
    DT_CHECK_ARG(opts.beta2 >= 0.0 && opts.beta2 < 1.0, "adamw beta2 must be in [0, 1), got " << opts.beta2);
    DT_CHECK_ARG(opts.eps >= 0.0, "adamw eps must be >= 0, got " << opts.eps);
  } else {
    return Status::InvalidArgument("unknown optimizer '" + opts.name + "' (expected sgd|adamw)");
  }
  o->opts_ = opts;
  o->num_params_ = num_params;
  o->device_ = ctx.type();
  // State starts at zero (PyTorch's lazily created buffers behave identically from step 1).
  DT_RETURN_IF_ERROR(Tensor::Empty({num_params}, DType::kF32, ctx.allocator(), &o->state0_));
  DT_RETURN_IF_ERROR(o->state0_.SetZero(ctx.stream()));
  if (o->kind_ == Kind::kAdamW) {
    DT_RETURN_IF_ERROR(Tensor::Empty({num_params}, DType::kF32, ctx.allocator(), &o->state1_));
    DT_RETURN_IF_ERROR(o->state1_.SetZero(ctx.stream()));
  }
  DT_RETURN_IF_ERROR(Tensor::Empty({1}, DType::kF32, ctx.allocator(), &o->sum_squares_));
  DT_RETURN_IF_ERROR(Tensor::Empty({1}, DType::kF32, ctx.allocator(), &o->norm_));
  DT_RETURN_IF_ERROR(Tensor::Empty({1}, DType::kF32, ctx.allocator(), &o->clip_coef_));
  DT_RETURN_IF_ERROR(StagedArgs::Create(ctx, ops::kStagedArgsBytes, &o->args_));
  *out = std::move(o);
  return Status::OK();
}

Status Optimizer::CheckTensor(const DeviceContext& ctx, const Tensor& t, const char* what) const {
  DT_CHECK_ARG(t.dtype() == DType::kF32 && t.numel() == num_params_ && t.device() == device_,
               what << " " << t.ToString() << " must be f32[" << num_params_ << "]@" << DeviceName(device_));
  DT_CHECK_ARG(ctx.type() == device_, "Step on a " << DeviceName(ctx.type()) << " context, but the optimizer lives on "
                                                   << DeviceName(device_));
  return Status::OK();
}

Status Optimizer::Step(DeviceContext& ctx, Tensor& params, Tensor& grads, double lr, LossScaler* scaler) {
  // Bad tensors fail the step before it counts.
  DT_RETURN_IF_ERROR(CheckTensor(ctx, params, "params"));
  DT_RETURN_IF_ERROR(CheckTensor(ctx, grads, "grads"));
  DT_RETURN_IF_ERROR(Stage(ctx, lr, scaler));
  return Apply(ctx, params, grads, scaler);
}

Status Optimizer::Stage(DeviceContext& ctx, double lr, LossScaler* scaler) {
  DT_CHECK_ARG(std::isfinite(lr) && lr >= 0.0, "lr must be finite and >= 0, got " << lr);
  DT_CHECK_ARG(ctx.type() == device_, "Stage on a " << DeviceName(ctx.type()) << " context, but the optimizer lives on "
                                                    << DeviceName(device_));
  int64_t skipped = 0;
  if (scaler != nullptr) {
    LossScalerState before;
    DT_RETURN_IF_ERROR(scaler->state(&before));  // skips up to the previous step (see loss_scaler.h: no stall)
    skipped = before.skipped_steps;
  }
  if (kind_ == Kind::kSgd) {
    sgd_ = SgdHyperFor(opts_, lr);
    const ops::SgdKernelArgs a = ops::StagedArgsFor(sgd_);
    DT_RETURN_IF_ERROR(args_->Stage(ctx, &a, sizeof(a)));
  } else {
    adamw_ = AdamWHyperFor(opts_, lr, step_ + 1 - skipped);
    const ops::AdamWKernelArgs a = ops::StagedArgsFor(adamw_);
    DT_RETURN_IF_ERROR(args_->Stage(ctx, &a, sizeof(a)));
  }
  ++step_;
  staged_ = true;
  return Status::OK();
}

Status Optimizer::Apply(DeviceContext& ctx, Tensor& params, Tensor& grads, LossScaler* scaler) {
  DT_NVTX_RANGE("optimizer_step");
  DT_RETURN_IF_ERROR(CheckTensor(ctx, params, "params"));
  DT_RETURN_IF_ERROR(CheckTensor(ctx, grads, "grads"));
  if (!staged_) return Status::FailedPrecondition("Optimizer::Apply before Stage");

  // Global norm into a device scalar; the update kernel reads the clip coefficient from device
  // memory, so nothing here waits for the reduction.
  DT_RETURN_IF_ERROR(ops::SumSquares(ctx, grads, &sum_squares_));
  const Tensor* scale = nullptr;
  const Tensor* skip = nullptr;
  if (scaler != nullptr) {
    // The multiplier (1 / loss scale, times the clip coefficient of the unscaled norm) and the skip flag.
    DT_RETURN_IF_ERROR(scaler->Update(ctx, sum_squares_, opts_.grad_clip, &norm_, &clip_coef_));
    scale = &clip_coef_;
    skip = &scaler->found_inf();
  } else {
    DT_RETURN_IF_ERROR(ops::GradClipCoef(ctx, sum_squares_, opts_.grad_clip, &norm_, &clip_coef_));
    if (opts_.grad_clip > 0.0) scale = &clip_coef_;
  }

  // The kernels read this update's constants from the staged buffer (the CPU path takes them from the host).
  const Tensor* staged = &args_->device();
  if (kind_ == Kind::kSgd) {
    DT_RETURN_IF_ERROR(ops::SgdUpdate(ctx, sgd_, &params, grads, &state0_, scale, skip, staged));
  } else {
    DT_RETURN_IF_ERROR(ops::AdamWUpdate(ctx, adamw_, &params, grads, &state0_, &state1_, scale, skip, staged));
  }
  has_norm_ = true;
  return Status::OK();
}

std::vector<std::pair<std::string, Tensor*>> Optimizer::state() {
  if (kind_ == Kind::kSgd) return {{"momentum_buffer", &state0_}};
  return {{"exp_avg", &state0_}, {"exp_avg_sq", &state1_}};
}

Status Optimizer::LastGradNorm(DeviceContext& ctx, float* norm) {
  DT_CHECK_ARG(norm != nullptr, "norm is null");
  if (!has_norm_) return Status::FailedPrecondition("LastGradNorm before the first optimizer Step");
  Tensor host = Tensor::Wrap(norm, {1}, DType::kF32, DeviceType::kCPU);
  DT_RETURN_IF_ERROR(host.CopyFrom(norm_, ctx.stream()));
  // Sync point (logging only): the copy is queued behind the step's reduction on ctx.stream().
  return ctx.Synchronize();
}

}  // namespace dtrain::runtime
