#pragma once
// LossScaler: dynamic loss scaling for fp16 training (train.precision fp16), PyTorch GradScaler semantics with its
// defaults (there is no config field for them): the scale starts at kInitScale = 2^16, is multiplied by
// kBackoffFactor = 0.5 after every step whose gradient has an inf/NaN (that step is skipped), and by
// kGrowthFactor = 2 after kGrowthInterval = 2000 consecutive finite steps.
//
// Protocol, per optimizer step (runtime/train/trainer.cc):
//   1. Scale(&s): the scale of this step. Backward(s / accum) on every micro-step: the gradient holds s * the true
//      (averaged) gradient, in f32 (fp16 activation gradients stay in range, f32 master gradients never overflow).
//   2. The gradient all-reduce (GradientReducer::Finalize): afterwards every rank holds the SAME gradient.
//   3. Optimizer::Step(..., scaler): the global sum of squares of the gradient (the reduction grad clipping already
//      does) feeds ops::LossScaleStep (kernels/loss_scale.h) on the device: found_inf = it is not finite; the
//      update multiplier = clip coefficient of the unscaled norm / s; the update kernels are a no-op when found_inf
//      (params and optimizer state unchanged); the scale and counters are updated on the device.
// Ranks agree without an extra collective: the check reads the all-reduced gradient, identical on every rank, so
// every rank skips the same steps and keeps the same scale (bitwise: the reduction is deterministic).
// Under ZeRO-1 (Zero1Optimizer::Step(..., scaler)) step 3 runs on this rank's reduce-scattered shard: the sum of
// squares over the shard is all-reduced (the global norm) before LossScaleStep, so an inf/NaN on any rank's shard
// is found on every rank, and the update kernels skip every shard alike.
//
// Host syncs: none in the step itself. The host needs the new scale before the next Backward, so each Update
// queues a 16-byte device-to-host copy of the state into pinned memory and records an event; Scale() (and state())
// wait for that event. Called after the next step's first Forward was queued, that wait overlaps with the forward
// on the GPU: the device never idles for it. On the CPU everything is synchronous.
//
// AdamW bias correction counts applied updates only (like torch, where a skipped optimizer.step() does not advance
// Adam's step): Optimizer::Step uses step() - skipped_steps() (known on the host once the previous update landed).
// Checkpoints store the state (proto::LossScalerState in the manifest) and restore it with Restore().
// Not thread-safe; one scaler per worker, used with the DeviceContext it was created with.

#include <cstdint>
#include <memory>

#include "core/device_context.h"
#include "core/status.h"
#include "core/tensor.h"
#include "kernels/loss_scale.h"
#include "proto/checkpoint.pb.h"

namespace dtrain {
class CudaEvent;
}

namespace dtrain::runtime {

// PyTorch torch.cuda.amp.GradScaler defaults.
constexpr double kInitScale = 65536.0;
constexpr double kGrowthFactor = 2.0;
constexpr double kBackoffFactor = 0.5;
constexpr int64_t kGrowthInterval = 2000;

struct LossScalerState {
  double scale = kInitScale;
  int64_t good_steps = 0;     // consecutive finite steps since the last growth or overflow
  int64_t skipped_steps = 0;  // steps skipped for a non-finite gradient, since the start of the run
  bool last_found_inf = false;
};

class LossScaler {
 public:
  // `hyper` defaults to the constants above (tests use a short growth interval).
  static Status Create(DeviceContext& ctx, std::unique_ptr<LossScaler>* out,
                       const ops::LossScaleHyper& hyper = DefaultHyper());
  ~LossScaler();
  LossScaler(const LossScaler&) = delete;
  LossScaler& operator=(const LossScaler&) = delete;

  // The scale for this step's Backward (see the protocol). Waits for the previous Update's state copy.
  Status Scale(float* scale);
  // The host view of the state after the last Update (waits like Scale).
  Status state(LossScalerState* out);

  // Step 3 of the protocol, called by Optimizer::Step: from the sum of squares of the SCALED gradient (f32[1] on
  // ctx's device), writes the unscaled global norm into *norm and the update multiplier into *coef (f32[1],
  // allocated when undefined) and updates the state, all on ctx.stream(). The update kernels must then take
  // `coef` as their scale and found_inf() as their skip flag.
  Status Update(DeviceContext& ctx, const Tensor& sum_squares, double max_norm, Tensor* norm, Tensor* coef);
  // f32[1] on the device: 1 when the last Update found a non-finite gradient (its step is skipped), else 0.
  const Tensor& found_inf() const { return found_inf_; }

  // Checkpoint state, and its restore (before the first step of a resumed run; queued on ctx.stream()).
  Status Save(proto::LossScalerState* out);
  Status Restore(DeviceContext& ctx, const proto::LossScalerState& in);

  static ops::LossScaleHyper DefaultHyper();

 private:
  LossScaler() = default;
  Status Sync();  // waits for the pending state copy, if any, and refreshes host_

  ops::LossScaleHyper hyper_;
  Tensor state_;      // f32[ops::kLossScaleStateSize] on the device (see kernels/loss_scale.h)
  Tensor found_inf_;  // view of state_[kLossScaleFoundInf]
  Tensor staging_;    // pinned host copy of state_ (CUDA), written by the last Update
#if DT_HAVE_CUDA
  std::unique_ptr<CudaEvent> done_;  // recorded after that copy
#endif
  bool pending_ = false;  // a copy was queued and not yet waited for
  LossScalerState host_;
};

}  // namespace dtrain::runtime
