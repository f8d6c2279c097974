#include "runtime/optim/optimizer.h"

#include <cmath>

#include "core/check.h"
#include "core/nvtx.h"
#include "kernels/reduce.h"
#include "runtime/optim/loss_scaler.h"
#include "runtime/optim/offloaded_state.h"
#include "runtime/optim/staged_args.h"

namespace dtrain::runtime {

Optimizer::~Optimizer() = default;

Status Optimizer::Create(DeviceContext& ctx, const OptimizerOptions& opts, int64_t num_params,
                         std::unique_ptr<Optimizer>* out) {
  DT_CHECK_ARG(out != nullptr, "out is null");
  DT_CHECK_ARG(num_params > 0, "the optimizer needs at least one parameter, got " << num_params);
  std::unique_ptr<Optimizer> o(new Optimizer());  // private constructor: make_unique cannot reach it
  DT_RETURN_IF_ERROR(CreateOptimAlgorithm(opts, &o->spec_, &o->algo_));
  o->opts_ = opts;
  o->num_params_ = num_params;
  o->device_ = ctx.type();
  // State starts at zero (PyTorch's lazily created buffers behave identically from step 1; split masters' low halves:
  // the masters are the bf16 params as they are).
  const std::vector<DType> dtypes = OptimizerStateDTypes(*o->spec_, opts);
  if (opts.offload) {
    const int64_t keep = OffloadedState::KeepNumel(opts.offload_keep_bytes, dtypes, num_params);
    DT_RETURN_IF_ERROR(OffloadedState::Create(ctx, num_params, dtypes, opts.offload_chunk, keep, &o->offload_));
  }
  o->state_.resize(opts.offload ? 0 : dtypes.size());
  for (size_t k = 0; k < o->state_.size(); ++k) {
    DT_RETURN_IF_ERROR(Tensor::Empty({num_params}, dtypes[k], ctx.allocator(), &o->state_[k]));
    DT_RETURN_IF_ERROR(o->state_[k].SetZero(ctx.stream()));
  }
  DT_RETURN_IF_ERROR(Tensor::Empty({1}, DType::kF32, ctx.allocator(), &o->sum_squares_));
  DT_RETURN_IF_ERROR(Tensor::Empty({1}, DType::kF32, ctx.allocator(), &o->norm_));
  DT_RETURN_IF_ERROR(Tensor::Empty({1}, DType::kF32, ctx.allocator(), &o->clip_coef_));
  DT_RETURN_IF_ERROR(StagedArgs::Create(ctx, ops::kStagedArgsBytes, &o->args_));
  *out = std::move(o);
  return Status::OK();
}

Status Optimizer::CheckTensor(const DeviceContext& ctx, const Tensor& t, DType dtype, const char* what) const {
  DT_CHECK_ARG(t.dtype() == dtype && t.numel() == num_params_ && t.device() == device_,
               what << " " << t.ToString() << " must be " << DTypeName(dtype) << "[" << num_params_ << "]@"
                    << DeviceName(device_));
  DT_CHECK_ARG(ctx.type() == device_, "Step on a " << DeviceName(ctx.type()) << " context, but the optimizer lives on "
                                                   << DeviceName(device_));
  return Status::OK();
}

Status Optimizer::Step(DeviceContext& ctx, Tensor& params, Tensor& grads, double lr, LossScaler* scaler) {
  // Bad tensors fail the step before it counts.
  DT_RETURN_IF_ERROR(CheckTensor(ctx, params, opts_.param_dtype, "params"));
  DT_RETURN_IF_ERROR(CheckTensor(ctx, grads, opts_.grad_dtype, "grads"));
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
  StagedConstants constants;
  algo_->Prepare(lr, step_ + 1 - skipped, &constants);
  DT_RETURN_IF_ERROR(args_->Stage(ctx, constants.bytes, constants.size));
  ++step_;
  staged_ = true;
  return Status::OK();
}

Status Optimizer::Apply(DeviceContext& ctx, Tensor& params, Tensor& grads, LossScaler* scaler) {
  DT_NVTX_RANGE("optimizer_step");
  DT_RETURN_IF_ERROR(CheckTensor(ctx, params, opts_.param_dtype, "params"));
  DT_RETURN_IF_ERROR(CheckTensor(ctx, grads, opts_.grad_dtype, "grads"));
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
  if (offload_) {
    DT_RETURN_IF_ERROR(offload_->Update(ctx, *algo_, &params, grads, scale, skip, &args_->device(), /*offset=*/0));
  } else {
    std::vector<Tensor*> state;
    for (Tensor& t : state_) state.push_back(&t);
    DT_RETURN_IF_ERROR(algo_->Update(ctx, &params, grads, state, scale, skip, &args_->device()));
  }
  has_norm_ = true;
  return Status::OK();
}

std::vector<std::pair<std::string, Tensor*>> Optimizer::state() {
  std::vector<std::pair<std::string, Tensor*>> out;
  std::vector<Tensor>& tensors = offload_ ? offload_->host() : state_;
  for (size_t i = 0; i < spec_->state_names.size(); ++i) out.emplace_back(spec_->state_names[i], &tensors[i]);
  return out;
}

Tensor* Optimizer::master_low() {
  std::vector<Tensor>& tensors = offload_ ? offload_->host() : state_;
  return opts_.split_masters ? &tensors.back() : nullptr;
}

Status Optimizer::SettleState() { return offload_ ? offload_->Settle() : Status::OK(); }

Status Optimizer::LastGradNorm(DeviceContext& ctx, float* norm) {
  DT_CHECK_ARG(norm != nullptr, "norm is null");
  if (!has_norm_) return Status::FailedPrecondition("LastGradNorm before the first optimizer Step");
  Tensor host = Tensor::Wrap(norm, {1}, DType::kF32, DeviceType::kCPU);
  DT_RETURN_IF_ERROR(host.CopyFrom(norm_, ctx.stream()));
  // Sync point (logging only): the copy is queued behind the step's reduction on ctx.stream().
  return ctx.Synchronize();
}

}  // namespace dtrain::runtime
