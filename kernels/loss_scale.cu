// The dynamic loss-scaling step of kernels/loss_scale.h: one thread, a handful of f32 operations, in the same
// order as LossScaleStepCpu.
#include "core/cuda_check.h"
#include "core/nvtx.h"
#include "kernels/loss_scale.h"

namespace dtrain::ops {
namespace {

__global__ void LossScaleKernel(const float* __restrict__ sum_squares, float* __restrict__ state,
                                float* __restrict__ norm, float* __restrict__ coef, float max_norm, bool clip_on,
                                float growth, float backoff, float interval) {
  const float s = state[kLossScaleScale];
  const bool found_inf = !isfinite(*sum_squares);
  const float nrm = sqrtf(*sum_squares) / s;
  float clip = 1.0f;
  if (clip_on) {
    const float c = max_norm / (nrm + 1e-6f);
    clip = c > 1.0f ? 1.0f : c;
  }
  *norm = nrm;
  *coef = (1.0f / s) * clip;
  state[kLossScaleFoundInf] = found_inf ? 1.0f : 0.0f;
  if (found_inf) {
    state[kLossScaleScale] = s * backoff;
    state[kLossScaleGoodSteps] = 0.0f;
    state[kLossScaleSkippedSteps] += 1.0f;
    return;
  }
  const float good = state[kLossScaleGoodSteps] + 1.0f;
  if (good >= interval) {
    const float grown = s * growth;
    if (isfinite(grown)) state[kLossScaleScale] = grown;
    state[kLossScaleGoodSteps] = 0.0f;
  } else {
    state[kLossScaleGoodSteps] = good;
  }
}

}  // namespace

Status LossScaleStepCuda(const LossScaleHyper& h, double max_norm, const float* sum_squares, float* state, float* norm,
                         float* coef, cudaStream_t stream) {
  DT_NVTX_FN();
  LossScaleKernel<<<1, 1, 0, stream>>>(sum_squares, state, norm, coef, static_cast<float>(max_norm), max_norm > 0.0,
                                       static_cast<float>(h.growth_factor), static_cast<float>(h.backoff_factor),
                                       static_cast<float>(h.growth_interval));
  DT_CUDA_CHECK_LAUNCH();
  return Status::OK();
}

}  // namespace dtrain::ops
