#include "kernels/lion_update.h"

#include "core/check.h"
#include "kernels/optim_update.h"

namespace dtrain::ops {

static_assert(sizeof(LionKernelArgs) <= kStagedArgsBytes, "LionKernelArgs must fit a StagedArgs buffer");

LionKernelArgs StagedArgsFor(const LionHyper& h) {
  LionKernelArgs a;
  a.lr = static_cast<float>(h.lr);
  a.decay = static_cast<float>(1.0 - h.lr * h.weight_decay);
  a.beta1 = static_cast<float>(h.beta1);
  a.one_minus_b1 = static_cast<float>(1.0 - h.beta1);
  a.beta2 = static_cast<float>(h.beta2);
  a.one_minus_b2 = static_cast<float>(1.0 - h.beta2);
  a.grad_scale = static_cast<float>(h.grad_scale);
  return a;
}

// The same operations, in the same order, as the kernel in lion_update.cu.
template <typename T>
void LionUpdateCpu(T* params, const T* grads, T* exp_avg, int64_t n, const LionHyper& h, const T* scale,
                   const T* skip) {
  if (skip != nullptr && *skip != T(0)) return;
  const T s = static_cast<T>(h.grad_scale) * (scale != nullptr ? *scale : T(1));
  const T lr = static_cast<T>(h.lr);
  const T decay = static_cast<T>(1.0 - h.lr * h.weight_decay);
  const T b1 = static_cast<T>(h.beta1), omb1 = static_cast<T>(1.0 - h.beta1);
  const T b2 = static_cast<T>(h.beta2), omb2 = static_cast<T>(1.0 - h.beta2);
  for (int64_t i = 0; i < n; ++i) {
    const T g = grads[i] * s;
    const T m = exp_avg[i];
    const T c = b1 * m + omb1 * g;
    const T sign = c > T(0) ? T(1) : (c < T(0) ? T(-1) : c);  // +-0 and NaN stay
    params[i] = params[i] * decay - lr * sign;
    exp_avg[i] = b2 * m + omb2 * g;
  }
}

template void LionUpdateCpu<float>(float*, const float*, float*, int64_t, const LionHyper&, const float*, const float*);
template void LionUpdateCpu<double>(double*, const double*, double*, int64_t, const LionHyper&, const double*,
                                    const double*);

namespace {

template <typename T>
const T* OrNull(const Tensor* t) {
  return t != nullptr ? t->data<T>() : nullptr;
}

}  // namespace

Status LionUpdate(DeviceContext& ctx, const LionHyper& h, Tensor* params, const Tensor& grads, Tensor* exp_avg,
                  const Tensor* scale, const Tensor* skip, const Tensor* staged) {
  DT_RETURN_IF_ERROR(CheckUpdateTensors(ctx, params, grads, {{"exp_avg", exp_avg}}, scale, skip, staged));
  const int64_t n = params->numel();
  if (params->device() == DeviceType::kCPU) {
    if (params->dtype() == DType::kF64) {
      LionUpdateCpu(params->data<double>(), grads.data<double>(), exp_avg->data<double>(), n, h, OrNull<double>(scale),
                    OrNull<double>(skip));
    } else {
      LionUpdateCpu(params->data<float>(), grads.data<float>(), exp_avg->data<float>(), n, h, OrNull<float>(scale),
                    OrNull<float>(skip));
    }
    return Status::OK();
  }
#if DT_HAVE_CUDA
  return LionUpdateCuda(params->data<float>(), grads.data<float>(), exp_avg->data<float>(), n, h, OrNull<float>(scale),
                        ctx.stream(), OrNull<float>(skip),
                        staged != nullptr ? static_cast<const LionKernelArgs*>(staged->data()) : nullptr);
#else
  return Status::Unavailable("LionUpdate on CUDA tensors, but dtrain was built without CUDA");
#endif
}

}  // namespace dtrain::ops
