#include "kernels/loss_scale.h"

#include <cmath>

#include "core/check.h"

namespace dtrain::ops {

void LossScaleStepCpu(const LossScaleHyper& h, double max_norm, const float* sum_squares, float* state, float* norm,
                      float* coef) {
  // The same f32 operations, in the same order, as LossScaleKernel in loss_scale.cu.
  const float s = state[kLossScaleScale];
  const bool found_inf = !std::isfinite(*sum_squares);
  const float nrm = std::sqrt(*sum_squares) / s;
  float clip = 1.0f;
  if (max_norm > 0.0) {
    const float c = static_cast<float>(max_norm) / (nrm + 1e-6f);
    clip = c > 1.0f ? 1.0f : c;
  }
  *norm = nrm;
  *coef = (1.0f / s) * clip;
  state[kLossScaleFoundInf] = found_inf ? 1.0f : 0.0f;
  if (found_inf) {
    state[kLossScaleScale] = s * static_cast<float>(h.backoff_factor);
    state[kLossScaleGoodSteps] = 0.0f;
    state[kLossScaleSkippedSteps] += 1.0f;
    return;
  }
  const float good = state[kLossScaleGoodSteps] + 1.0f;
  if (good >= static_cast<float>(h.growth_interval)) {
    const float grown = s * static_cast<float>(h.growth_factor);
    if (std::isfinite(grown)) state[kLossScaleScale] = grown;
    state[kLossScaleGoodSteps] = 0.0f;
  } else {
    state[kLossScaleGoodSteps] = good;
  }
}

namespace {

Status CheckScalar(const DeviceContext& ctx, const Tensor& t, int64_t numel, const char* what) {
  DT_CHECK_ARG(t.defined() && t.dtype() == DType::kF32 && t.numel() == numel && t.device() == ctx.type(),
               "LossScaleStep: " << what << " " << t.ToString() << " must be f32[" << numel << "] on "
                                 << DeviceName(ctx.type()));
  return Status::OK();
}

Status EnsureScalar(DeviceContext& ctx, Tensor* t, const char* what) {
  DT_CHECK_ARG(t != nullptr, "LossScaleStep: " << what << " is null");
  if (!t->defined()) DT_RETURN_IF_ERROR(Tensor::Empty({1}, DType::kF32, ctx.allocator(), t));
  return CheckScalar(ctx, *t, 1, what);
}

}  // namespace

Status LossScaleStep(DeviceContext& ctx, const LossScaleHyper& h, double max_norm, const Tensor& sum_squares,
                     Tensor* state, Tensor* norm, Tensor* coef) {
  DT_CHECK_ARG(h.growth_factor > 1.0 && h.backoff_factor > 0.0 && h.backoff_factor < 1.0 && h.growth_interval >= 1,
               "LossScaleStep: need growth_factor > 1, 0 < backoff_factor < 1, growth_interval >= 1, got "
                   << h.growth_factor << ", " << h.backoff_factor << ", " << h.growth_interval);
  DT_CHECK_ARG(state != nullptr, "LossScaleStep: state is null");
  DT_RETURN_IF_ERROR(CheckScalar(ctx, sum_squares, 1, "sum_squares"));
  DT_RETURN_IF_ERROR(CheckScalar(ctx, *state, kLossScaleStateSize, "state"));
  DT_RETURN_IF_ERROR(EnsureScalar(ctx, norm, "norm"));
  DT_RETURN_IF_ERROR(EnsureScalar(ctx, coef, "coef"));
  if (!ctx.is_cuda()) {
    LossScaleStepCpu(h, max_norm, sum_squares.data<float>(), state->data<float>(), norm->data<float>(),
                     coef->data<float>());
    return Status::OK();
  }
#if DT_HAVE_CUDA
  return LossScaleStepCuda(h, max_norm, sum_squares.data<float>(), state->data<float>(), norm->data<float>(),
                           coef->data<float>(), ctx.stream());
#else
  return Status::Unavailable("LossScaleStep: CUDA tensor in a build without CUDA");
#endif
}

}  // namespace dtrain::ops
