#pragma once
// Layer normalization over the last dimension C of x (x[N,C], or any x[..., C] with N = numel / C rows):
//   forward:  mean[n] = (1/C) sum_c x,  var[n] = (1/C) sum_c (x - mean)^2  (biased),  rstd[n] = 1/sqrt(var + eps)
//             y = (x - mean) * rstd * gamma + beta;  mean and rstd (shape x.shape[:-1]) are saved for backward.
//   backward: xhat = (x - mean) * rstd,  g = dy * gamma
//             dx = rstd * (g - mean_c(g) - xhat * mean_c(g * xhat))       (SET)
//             dgamma += sum_n dy * xhat,  dbeta += sum_n dy                (ACCUMULATE)
// CPU references take T = float or double (row sums in double); CUDA launchers are f32, or bf16 / fp16 (mixed
// precision: x, y, dy, dx 16-bit; gamma, beta, mean, rstd, dgamma, dbeta f32; fp32 math; 16-bit buffers are
// uint16_t raw bits): one warp per row for y and dx (128-bit accesses when C and the pointers allow), and a fixed-order
// column reduction (no atomics, bitwise deterministic) for dgamma/dbeta. With `scratch` (of
// LayerNormBackwardScratchFloats(n, c) floats), 128-bit accesses (C a multiple of V = 16 / element size, aligned
// pointers) and C <= 4 * 32 * V (GPT-2's 768 and 1024 in bf16), the backward is one pass over x and dy that also
// leaves per-block dgamma/dbeta partial sums in scratch, added in block order by a small second kernel; otherwise a
// dx pass and a column reduction split over row chunks (without scratch: one block per 32 columns). Queued on
// `stream`. The Tensor entry points check shapes/dtypes/devices (InvalidArgument naming the shapes), take scratch
// from ctx's allocator, and dispatch CPU f32/f64 -> *Cpu, CUDA f32 -> *Cuda, CUDA bf16 -> *CudaBf16, CUDA f16 ->
// *CudaF16. Outputs must not alias inputs.

#include <cstdint>

#include "core/cuda_fwd.h"
#include "core/device_context.h"
#include "core/status.h"
#include "core/tensor.h"

namespace dtrain::ops {

template <typename T>
void LayerNormForwardCpu(T* y, T* mean, T* rstd, const T* x, const T* gamma, const T* beta, int64_t n, int64_t c,
                         T eps);
template <typename T>
void LayerNormBackwardCpu(T* dx, T* dgamma, T* dbeta, const T* x, const T* gamma, const T* mean, const T* rstd,
                          const T* dy, int64_t n, int64_t c, bool accumulate_dx);

// CUDA builds only.
Status LayerNormForwardCuda(float* y, float* mean, float* rstd, const float* x, const float* gamma, const float* beta,
                            int64_t n, int64_t c, float eps, cudaStream_t stream);
Status LayerNormBackwardCuda(float* dx, float* dgamma, float* dbeta, const float* x, const float* gamma,
                             const float* mean, const float* rstd, const float* dy, int64_t n, int64_t c,
                             cudaStream_t stream);

Status LayerNormBackwardCuda(float* dx, float* dgamma, float* dbeta, const float* x, const float* gamma,
                             const float* mean, const float* rstd, const float* dy, int64_t n, int64_t c,
                             float* scratch, bool accumulate_dx, cudaStream_t stream);
// 16-bit: `amax` null, or a device float set to max |y| (|dx|) as stored: kernels/fp8.h's Fp8Amax of the output,
// fused into the pass that writes it. `scratch` may be null (see above).
Status LayerNormForwardCudaBf16(uint16_t* y, float* mean, float* rstd, const uint16_t* x, const float* gamma,
                                const float* beta, int64_t n, int64_t c, float eps, float* amax, cudaStream_t stream);
Status LayerNormBackwardCudaBf16(uint16_t* dx, float* dgamma, float* dbeta, const uint16_t* x, const float* gamma,
                                 const float* mean, const float* rstd, const uint16_t* dy, int64_t n, int64_t c,
                                 float* scratch, bool accumulate_dx, float* amax, cudaStream_t stream);
Status LayerNormForwardCudaF16(uint16_t* y, float* mean, float* rstd, const uint16_t* x, const float* gamma,
                               const float* beta, int64_t n, int64_t c, float eps, float* amax, cudaStream_t stream);
Status LayerNormBackwardCudaF16(uint16_t* dx, float* dgamma, float* dbeta, const uint16_t* x, const float* gamma,
                                const float* mean, const float* rstd, const uint16_t* dy, int64_t n, int64_t c,
                                float* scratch, bool accumulate_dx, float* amax, cudaStream_t stream);
int64_t LayerNormBackwardScratchFloats(int64_t n, int64_t c);

// x (and y, dy, dx) f32/f64, or bf16/f16 on CUDA; gamma, beta, mean, rstd, dgamma, dbeta: x's dtype, f32 when x is
// 16-bit. amax (optional, a one-element f32 tensor on ctx's device): also *amax = max |y| (|dx| as written, after
// accumulate_dx), the value kernels/fp8.h's Fp8Amax gives, for an FP8 cast of the output that then skips its amax
// pass; fused into the kernel for 16-bit CUDA tensors, a separate pass for f32.
Status LayerNormForward(DeviceContext& ctx, const Tensor& x, const Tensor& gamma, const Tensor& beta, float eps,
                        Tensor* y, Tensor* mean, Tensor* rstd, Tensor* amax = nullptr);
// accumulate_dx: dx += the input gradient (a residual stream's gradient), else dx = it. dgamma/dbeta always accumulate.
Status LayerNormBackward(DeviceContext& ctx, const Tensor& x, const Tensor& gamma, const Tensor& mean,
                         const Tensor& rstd, const Tensor& dy, Tensor* dx, Tensor* dgamma, Tensor* dbeta,
                         bool accumulate_dx = false, Tensor* amax = nullptr);

}  // namespace dtrain::ops
