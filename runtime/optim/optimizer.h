#pragma once
// Optimizer: one optimizer algorithm (runtime/optim/optim_algorithm.h: SGD, AdamW, ...) over the model's whole
// flat parameter buffer, with optional global-norm gradient clipping (torch.nn.utils.clip_grad_norm_: coef =
// min(1, clip / (norm + 1e-6))). The replicated ParameterUpdater's optimizer; Zero1Optimizer runs the same
// algorithms over a shard.
//
// Ownership: owns its state tensors (the algorithm's state names, e.g. SGD: momentum_buffer; AdamW: exp_avg,
// exp_avg_sq), allocated once in Create from ctx.allocator() in opts.state_dtype (f32, or bf16: 2 bytes per value),
// zero-initialised, on ctx's device (and with opts.split_masters the masters' low halves: master_low()) — or, with
// opts.offload, in page-locked host memory, streamed through the device
// for each update (runtime/optim/offloaded_state.h; call SettleState before reading or writing state() then). Params
// and grads belong to the caller (the model) and must be flat tensors of num_params elements on the same device: grads
// opts.grad_dtype (f32, or bf16 gradients), params opts.param_dtype (f32, or bf16 master weights).
//
// Streams: Step() queues all its work on ctx.stream() and never synchronizes the host. The global
// gradient norm is reduced on the device into a device scalar every step (one extra read of the
// grads), and the clip coefficient is read by the update kernel from device memory; only
// LastGradNorm() copies it back, for logging.
// With a LossScaler (fp16: runtime/optim/loss_scaler.h) the grads hold loss-scaled values: Step unscales them inside
// the update, clips on the unscaled norm, and skips the update on the device when the gradient is not finite. Not
// thread-safe; one optimizer per worker, used with the DeviceContext it was created with.

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "core/device_context.h"
#include "core/status.h"
#include "core/tensor.h"
#include "runtime/optim/optim_algorithm.h"
#include "runtime/optim/optimizer_options.h"

namespace dtrain::runtime {

class LossScaler;
class OffloadedState;
class StagedArgs;

class Optimizer {
 public:
  // InvalidArgument for an unknown algorithm name, out-of-range hyper-parameters or num_params <= 0.
  static Status Create(DeviceContext& ctx, const OptimizerOptions& opts, int64_t num_params,
                       std::unique_ptr<Optimizer>* out);
  ~Optimizer();

  // One update of the flat `params` from the flat `grads` (already averaged across ranks and
  // micro-steps by the caller; GradientReducer::Finalize() must have run). grads are not modified.
  // Computes the global L2 norm of grads; if grad_clip > 0 and the norm exceeds it, the gradient is
  // scaled by clip / (norm + 1e-6) inside the update. `lr` is the scheduled LR for this step
  // (LrSchedule::LrAt(step())). The algorithm's update number is step() + 1 (AdamW's bias correction). Increments
  // step().
  // With `scaler` (nullable): grads are scaled by scaler's current scale; the update uses grads / scale, the norm
  // and the clip see the unscaled gradient, a non-finite gradient makes the update a no-op (decided on the device,
  // no host sync), and the update number is step() + 1 - skipped steps (applied updates only). step()
  // still counts every call.
  Status Step(DeviceContext& ctx, Tensor& params, Tensor& grads, double lr, LossScaler* scaler = nullptr);

  // Step in two halves, for CUDA graphs (core/cuda_graph.h): Stage does the host part (the update count; this
  // update's hyper-parameters staged into device memory on ctx.stream(), runtime/optim/staged_args.h) and Apply
  // queues the device part, whose kernels read them from there — so Apply can be captured once and replayed
  // after each Stage. Step == Stage + Apply; the same `scaler` must be given to both. Apply with a LossScaler
  // still does host bookkeeping (not capturable).
  Status Stage(DeviceContext& ctx, double lr, LossScaler* scaler = nullptr);
  Status Apply(DeviceContext& ctx, Tensor& params, Tensor& grads, LossScaler* scaler = nullptr);

  // Number of Step() calls so far (plus set_step()).
  int64_t step() const { return step_; }
  // For checkpoint restore: the next Step() is update number s + 1. Negative values become 0.
  void set_step(int64_t s) { step_ = s < 0 ? 0 : s; }

  // The state to checkpoint, as named flat tensors (opts.state_dtype) of num_params elements, in the order and with the
  // names of the algorithm's spec (OptimAlgorithmSpec::state_names). Restore by copying into them. The pointers stay
  // valid for the optimizer's lifetime.
  std::vector<std::pair<std::string, Tensor*>> state();
  // opts.split_masters: the masters' low halves (raw bits in a bf16 tensor of num_params elements; kernels/bf16_round.h
  // JoinF32 with the params), in host memory with opts.offload (SettleState first, as for state()); null otherwise.
  // Not part of state(): a checkpoint holds the joined fp32 params. Valid for the optimizer's lifetime.
  Tensor* master_low();
  // Host sync point with opts.offload: waits until the last update's state is back in state()'s host tensors (a
  // checkpoint's snapshot or a restore touches them on the host). Returns at once otherwise.
  Status SettleState();
  const OffloadedState* offloaded() const { return offload_.get(); }  // null: the state is on the device

  // The global gradient norm (before clipping; unscaled with a LossScaler, then inf/NaN on a skipped step) of the
  // most recent Step(). Synchronizes ctx's stream
  // on CUDA: call only when logging. FailedPrecondition before the first Step().
  Status LastGradNorm(DeviceContext& ctx, float* norm);
  // The device scalar (f32[1]) LastGradNorm reads, written by every Apply on ctx's stream; nullptr before the first.
  const Tensor* grad_norm() const { return has_norm_ ? &norm_ : nullptr; }

  const OptimizerOptions& options() const { return opts_; }
  int64_t num_params() const { return num_params_; }

 private:
  Optimizer() = default;
  Status CheckTensor(const DeviceContext& ctx, const Tensor& t, DType dtype, const char* what) const;

  OptimizerOptions opts_;
  const OptimAlgorithmSpec* spec_ = nullptr;
  std::unique_ptr<OptimAlgorithm> algo_;  // holds the constants of the staged update (Stage)
  int64_t num_params_ = 0;
  DeviceType device_ = DeviceType::kCPU;
  int64_t step_ = 0;
  bool has_norm_ = false;
  std::vector<Tensor> state_;                // OptimizerStateDTypes' tensors (empty with offload_)
  std::unique_ptr<OffloadedState> offload_;  // opts.offload: the state in host memory
  Tensor sum_squares_, norm_, clip_coef_;    // device scalars, written every Step()
  bool staged_ = false;
  std::unique_ptr<StagedArgs> args_;  // the staged update's constants in device memory
};

}  // namespace dtrain::runtime
