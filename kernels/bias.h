#pragma once
// Bias ops on row-major y[M,N] with bias[N]:
//   BiasAdd:  y[m,n] += bias[n]
//   BiasGrad: dbias[n] (+)= sum_m dy[m,n]   (accumulate = true adds to dbias, false overwrites it)
// CPU references take T = float or double; CUDA launchers are f32, or bf16 / fp16 (mixed precision: 16-bit
// activations y and dy with an f32 bias and an f32 dbias; the sums are fp32), queued on `stream` (asynchronous w.r.t.
// the host). The bias gradient is deterministic: a fixed-order column reduction, no atomics. With `scratch` (of
// BiasGradScratchFloats(m, n) floats) the rows are split into chunks reduced by separate blocks, then the chunk
// sums are added in order: enough blocks to fill the GPU for GPT-2's 16384 x 768 gradients. Without scratch one
// block reduces each 32 columns. The Tensor entry points check shapes/dtypes/devices (InvalidArgument naming the
// shapes), take scratch from ctx's allocator, and dispatch CPU f32/f64 -> *Cpu, CUDA f32/bf16 -> *Cuda*.
// 16-bit buffers are uint16_t (raw bits) in the raw-pointer API; a 16-bit bias goes with y of its own type.

#include <cstdint>

#include "core/cuda_fwd.h"
#include "core/device_context.h"
#include "core/status.h"
#include "core/tensor.h"

namespace dtrain::ops {

template <typename T>
void BiasAddCpu(T* y, const T* bias, int64_t m, int64_t n);
template <typename T>
void BiasGradCpu(T* dbias, const T* dy, int64_t m, int64_t n, bool accumulate);

// CUDA builds only.
Status BiasAddCuda(float* y, const float* bias, int64_t m, int64_t n, cudaStream_t stream);
Status BiasGradCuda(float* dbias, const float* dy, int64_t m, int64_t n, bool accumulate, cudaStream_t stream);

Status BiasAddCudaBf16(uint16_t* y, const float* bias, int64_t m, int64_t n, cudaStream_t stream);
Status BiasAddCudaBf16(uint16_t* y, const uint16_t* bias, int64_t m, int64_t n, cudaStream_t stream);
// `scratch` may be null (see above).
Status BiasGradCuda(float* dbias, const float* dy, int64_t m, int64_t n, bool accumulate, float* scratch,
                    cudaStream_t stream);
Status BiasGradCudaBf16(float* dbias, const uint16_t* dy, int64_t m, int64_t n, bool accumulate, float* scratch,
                        cudaStream_t stream);
Status BiasAddCudaF16(uint16_t* y, const float* bias, int64_t m, int64_t n, cudaStream_t stream);
Status BiasAddCudaF16(uint16_t* y, const uint16_t* bias, int64_t m, int64_t n, cudaStream_t stream);
Status BiasGradCudaF16(float* dbias, const uint16_t* dy, int64_t m, int64_t n, bool accumulate, float* scratch,
                       cudaStream_t stream);
int64_t BiasGradScratchFloats(int64_t m, int64_t n);
// The second stage alone: dbias[n] (+)= sum over c of partials[c * n + col], c in order (bitwise reproducible). For
// partial column sums another kernel computed (kernels/fp8.h's fused bias gradient).
Status BiasGradFinishCuda(float* dbias, const float* partials, int64_t chunks, int64_t n, bool accumulate,
                          cudaStream_t stream);

// y[M,N] += bias[N]. CUDA: y f32 with an f32 bias, or y bf16 (f16) with an f32 or bf16 (f16) bias.
Status BiasAdd(DeviceContext& ctx, const Tensor& bias, Tensor* y);
// dbias[N] (+)= sum over rows of dy[M,N]. CUDA: dy f32, bf16 or f16, dbias f32.
Status BiasGrad(DeviceContext& ctx, const Tensor& dy, Tensor* dbias, bool accumulate);

}  // namespace dtrain::ops
