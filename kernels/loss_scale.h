#pragma once
// The device half of dynamic loss scaling (fp16 training; runtime/optim/loss_scaler.h drives it): one tiny kernel per
// optimizer step that turns the sum of squares of the SCALED gradient into the unscale/clip multiplier for the
// update kernels, the "skip this step" flag, and the next loss scale. PyTorch's torch.cuda.amp.GradScaler
// semantics (_amp_update_scale_), with the overflow check folded into the grad-norm reduction.
//
// State: one f32[kLossScaleStateSize] tensor on the device, fields at the kLossScale* indices below. Counts are
// held as f32 (exact up to 2^24). Per call, with S = state[kLossScaleScale] (the scale Backward used):
//   found_inf = !isfinite(sum_squares)                  (some gradient is inf/NaN; or the scaled sum of squares
//                                                        overflows f32, i.e. an unscaled norm > ~1.8e19 / S)
//   norm      = sqrt(sum_squares) / S                   (the global L2 norm of the unscaled gradient)
//   coef      = (1 / S) * clip,  clip = min(1, max_norm / (norm + 1e-6)) when max_norm > 0, else 1
//   if found_inf:  S *= backoff_factor;  good_steps = 0;  skipped_steps += 1;  (norm, coef: NaN/inf, unused)
//   else:          good_steps += 1;  if good_steps == growth_interval: good_steps = 0, and S *= growth_factor when
//                  the product is finite.
// The update kernels read `coef` as their device `scale` and state[kLossScaleFoundInf] as their `skip` flag
// (kernels/optim_update.h), so a step is unscaled, clipped and skipped without a host sync.
// CPU (reference) and CUDA (one thread) do the same f32 arithmetic. Queued on ctx.stream().

#include <cstdint>

#include "core/cuda_fwd.h"
#include "core/device_context.h"
#include "core/status.h"
#include "core/tensor.h"

namespace dtrain::ops {

constexpr int64_t kLossScaleScale = 0;         // the current loss scale S
constexpr int64_t kLossScaleGoodSteps = 1;     // consecutive finite steps since the last growth or overflow
constexpr int64_t kLossScaleSkippedSteps = 2;  // steps skipped (non-finite gradient) since the start of the run
constexpr int64_t kLossScaleFoundInf = 3;      // 1 when the last step's gradient was non-finite, else 0
constexpr int64_t kLossScaleStateSize = 4;

struct LossScaleHyper {
  double growth_factor = 2.0;
  double backoff_factor = 0.5;
  int64_t growth_interval = 2000;
};

// CPU reference on host pointers: state [kLossScaleStateSize], the other three are scalars.
void LossScaleStepCpu(const LossScaleHyper& h, double max_norm, const float* sum_squares, float* state, float* norm,
                      float* coef);
#if DT_HAVE_CUDA
// Device pointers; one single-thread kernel on `stream`.
Status LossScaleStepCuda(const LossScaleHyper& h, double max_norm, const float* sum_squares, float* state, float* norm,
                         float* coef, cudaStream_t stream);
#endif

// sum_squares: f32[1] (from ops::SumSquares of the scaled f32 gradient); state: f32[kLossScaleStateSize]; norm, coef:
// f32[1] (allocated from ctx.allocator() when undefined). All on ctx's device. InvalidArgument for other shapes,
// dtypes or devices, or hyper-parameters outside growth_factor > 1, 0 < backoff_factor < 1, growth_interval >= 1.
Status LossScaleStep(DeviceContext& ctx, const LossScaleHyper& h, double max_norm, const Tensor& sum_squares,
                     Tensor* state, Tensor* norm, Tensor* coef);

}  // namespace dtrain::ops
