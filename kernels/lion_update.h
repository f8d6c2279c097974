#pragma once
// Fused Lion update over flat buffers (Chen et al. 2023, "Symbolic Discovery of Optimization Algorithms",
// Algorithm 2, with decoupled weight decay as in lion-pytorch and optax.lion): one pass reads params, grads and
// exp_avg and writes the new params and exp_avg. Per element:
//   g = grad * grad_scale * (*scale)
//   c = beta1 * m + (1 - beta1) * g                      (the interpolation whose sign is the step)
//   p = p * (1 - lr * weight_decay) - lr * sign(c)       (sign(+-0) = +-0, sign(NaN) = NaN, as torch.sign)
//   m = beta2 * m + (1 - beta2) * g                      (m, "exp_avg", starts at 0)
// The paper's defaults are beta1 = 0.9, beta2 = 0.99. Every step moves each parameter by exactly lr (before the
// decay), so Lion's usual LR is 3-10x smaller than AdamW's and its weight decay 3-10x larger.
//
// `scale`, `skip` and `staged` mean what they mean in kernels/optim_update.h: an optional device multiplier of
// the gradient, an optional device flag that turns the whole update into a no-op, and an optional device copy of
// StagedArgsFor(h) that the CUDA kernel reads its constants from (CUDA graphs). The CUDA kernel does not contract
// into FMAs: its f32 results are bitwise the CPU reference's (the sign of c decides a whole lr-sized step).
// Device work is queued on ctx.stream(); nothing here synchronizes the host.

#include <cstdint>

#include "core/cuda_fwd.h"
#include "core/device_context.h"
#include "core/status.h"
#include "core/tensor.h"

namespace dtrain::ops {

struct LionHyper {
  double lr = 0.0;
  double beta1 = 0.9;
  double beta2 = 0.99;
  double weight_decay = 0.0;
  double grad_scale = 1.0;
};

// The kernel's f32 constants, computed once on the host in f64 (the CPU reference uses the same values).
struct LionKernelArgs {
  float lr, decay, beta1, one_minus_b1, beta2, one_minus_b2, grad_scale;
};
LionKernelArgs StagedArgsFor(const LionHyper& h);

// CPU reference (T = float, double). `scale`, `skip` may be null (= 1, never skip).
template <typename T>
void LionUpdateCpu(T* params, const T* grads, T* exp_avg, int64_t n, const LionHyper& h, const T* scale,
                   const T* skip = nullptr);

#if DT_HAVE_CUDA
// f32, defined in lion_update.cu. `scale`, `skip`, `staged`: device pointers or null.
Status LionUpdateCuda(float* params, const float* grads, float* exp_avg, int64_t n, const LionHyper& h,
                      const float* scale, cudaStream_t stream, const float* skip = nullptr,
                      const LionKernelArgs* staged = nullptr);
#endif

// Tensor level: the checks of ops::CheckUpdateTensors (kernels/optim_update.h), then CPU f32/f64 or CUDA f32.
Status LionUpdate(DeviceContext& ctx, const LionHyper& h, Tensor* params, const Tensor& grads, Tensor* exp_avg,
                  const Tensor* scale = nullptr, const Tensor* skip = nullptr, const Tensor* staged = nullptr);

}  // namespace dtrain::ops
