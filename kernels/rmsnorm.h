#pragma once
// RMS normalization over the last dimension C of x (x[N,C], or any x[..., C] with N = numel / C rows), Llama's
// (Hugging Face LlamaRMSNorm): no mean subtraction, no bias.
//   forward:  rstd[n] = 1/sqrt((1/C) sum_c x^2 + eps),  y = x * rstd * weight;  rstd (shape x.shape[:-1]) is saved.
//   backward: xhat = x * rstd,  g = dy * weight
//             dx = rstd * (g - xhat * mean_c(g * xhat))       (SET, or += with accumulate_dx)
//             dweight += sum_n dy * xhat                       (ALWAYS ACCUMULATES)
// 16-bit rounding: the math is fp32 and y is rounded ONCE, y = round16(x * rstd * weight). HF rounds twice,
// weight * round16(x * rstd) (with a 16-bit weight); the two differ by at most one 16-bit rounding of y. For f32
// they are the same.
// CPU references take T = float or double (row sums in double); CUDA launchers are f32, or bf16 / fp16 (mixed
// precision: x, y, dy, dx 16-bit, raw bits in uint16_t; weight, rstd, dweight f32; fp32 math). CUDA: one warp per row
// with V-element accesses (128-bit when C and the pointers allow: C % 8 == 0 for 16-bit, C % 4 == 0 for f32). Rows of
// C <= 2048 (Llama-3.2-1B's hidden) are held in registers: the forward reads x once, and the backward is one pass
// over x and dy (a row's second read hits L1): block b writes its 64 rows' dx and its dweight partial sums to
// scratch[b][C]; a second kernel adds the blocks in order. Wider rows take a dx pass and a column pass over row chunks.
// No atomics: dweight is bitwise reproducible run to run. FP8 (issue 35): the forward can also give max |y| and the
// backward max |dx| (the amax of an FP8 GEMM's input or output gradient, kernels/fp8.h), fused into the 16-bit kernels
// that write them. Queued on `stream`, no host synchronisation. The Tensor entry points check shapes/dtypes/devices
// (InvalidArgument naming the shapes), take scratch from ctx's allocator, and dispatch CPU f32/f64 -> *Cpu, CUDA f32
// -> *Cuda, bf16 -> *CudaBf16, f16 -> *CudaF16. Outputs must not alias inputs.

#include <cstdint>

#include "core/cuda_fwd.h"
#include "core/device_context.h"
#include "core/status.h"
#include "core/tensor.h"

namespace dtrain::ops {

template <typename T>
void RmsNormForwardCpu(T* y, T* rstd, const T* x, const T* weight, int64_t n, int64_t c, T eps);
template <typename T>
void RmsNormBackwardCpu(T* dx, T* dweight, const T* x, const T* weight, const T* rstd, const T* dy, int64_t n,
                        int64_t c, bool accumulate_dx);

// CUDA builds only. `scratch` holds RmsNormBackwardScratchFloats(n, c) floats (stream-ordered: free to reuse once
// the call is queued behind whatever uses it next). 16-bit: `amax` null, or a device float set to max |y| (max |dx|,
// after accumulate_dx) as stored: kernels/fp8.h's Fp8Amax of the output, fused into the pass that writes it.
Status RmsNormForwardCuda(float* y, float* rstd, const float* x, const float* weight, int64_t n, int64_t c, float eps,
                          cudaStream_t stream);
Status RmsNormForwardCudaBf16(uint16_t* y, float* rstd, const uint16_t* x, const float* weight, int64_t n, int64_t c,
                              float eps, float* amax, cudaStream_t stream);
Status RmsNormForwardCudaF16(uint16_t* y, float* rstd, const uint16_t* x, const float* weight, int64_t n, int64_t c,
                             float eps, float* amax, cudaStream_t stream);
Status RmsNormBackwardCuda(float* dx, float* dweight, const float* x, const float* weight, const float* rstd,
                           const float* dy, int64_t n, int64_t c, float* scratch, bool accumulate_dx,
                           cudaStream_t stream);
// bf16 x: dweight f32, or bf16 (raw bits, dweight_bf16: bf16 gradients, train.gradients; the f32 sum is added to
// the widened value and rounded to nearest once).
Status RmsNormBackwardCudaBf16(uint16_t* dx, void* dweight, bool dweight_bf16, const uint16_t* x, const float* weight,
                               const float* rstd, const uint16_t* dy, int64_t n, int64_t c, float* scratch,
                               bool accumulate_dx, float* amax, cudaStream_t stream);
Status RmsNormBackwardCudaF16(uint16_t* dx, float* dweight, const uint16_t* x, const float* weight, const float* rstd,
                              const uint16_t* dy, int64_t n, int64_t c, float* scratch, bool accumulate_dx, float* amax,
                              cudaStream_t stream);
// bf16 x with a bf16 weight (bf16 master weights, train.master_weights): the weight is widened exactly, so the results
// equal the *CudaBf16 launchers' with an f32 copy of the weight, bit for bit (their reference).
Status RmsNormForwardCudaBf16W(uint16_t* y, float* rstd, const uint16_t* x, const uint16_t* weight, int64_t n,
                               int64_t c, float eps, float* amax, cudaStream_t stream);
Status RmsNormBackwardCudaBf16W(uint16_t* dx, void* dweight, bool dweight_bf16, const uint16_t* x,
                                const uint16_t* weight, const float* rstd, const uint16_t* dy, int64_t n, int64_t c,
                                float* scratch, bool accumulate_dx, float* amax, cudaStream_t stream);
int64_t RmsNormBackwardScratchFloats(int64_t n, int64_t c);

// x (and y): f32/f64 on the CPU, f32/bf16/f16 on CUDA; weight [C] and rstd x.shape[:-1]: x's dtype, f32 when x is
// 16-bit; the weight may also be bf16 when x is (bf16 master weights), and so may dweight (bf16 gradients). amax
// (optional, a one-element f32 tensor on ctx's device): also *amax = max |y|, the value kernels/fp8.h's Fp8Amax gives
// (for an FP8 cast of y that then skips its amax pass); fused into the kernel for 16-bit CUDA tensors, a separate pass
// otherwise.
Status RmsNormForward(DeviceContext& ctx, const Tensor& x, const Tensor& weight, float eps, Tensor* y, Tensor* rstd,
                      Tensor* amax = nullptr);
// dy, dx: x's shape and dtype; weight, dweight [C] and rstd as in the forward. accumulate_dx: dx += the input gradient
// (a residual stream's gradient), else dx = it. dweight always accumulates. amax (optional, as in the forward): also
// *amax = max |dx| as written (after accumulate_dx).
Status RmsNormBackward(DeviceContext& ctx, const Tensor& x, const Tensor& weight, const Tensor& rstd, const Tensor& dy,
                       Tensor* dx, Tensor* dweight, bool accumulate_dx = false, Tensor* amax = nullptr);

}  // namespace dtrain::ops
