#pragma once
// GELU, tanh approximation (GPT-2's), elementwise over any shape:
//   forward:  y  = 0.5 x (1 + tanh(u)),  u = sqrt(2/pi) (x + 0.044715 x^3)
//   backward: dx = dy * [0.5 (1 + tanh u) + 0.5 x (1 - tanh^2 u) sqrt(2/pi) (1 + 3 * 0.044715 x^2)]
// Backward takes the INPUT x. CPU references take T = float or double; CUDA launchers are f32 (tanhf) and bf16 /
// fp16 (16-bit in/out, fp32 math, 128-bit accesses when aligned; 16-bit buffers are uint16_t raw bits), queued on
// `stream`. The Tensor entry points require equal shapes and dtypes on the context's device (InvalidArgument
// naming the shapes) and dispatch CPU f32/f64 -> *Cpu, CUDA f32 -> *Cuda, bf16 -> *CudaBf16, f16 -> *CudaF16. Outputs
// must not alias inputs in the Tensor API (the raw launchers allow dx == dy: each element is read, then written).

#include <cstdint>

#include "core/cuda_fwd.h"
#include "core/device_context.h"
#include "core/status.h"
#include "core/tensor.h"

namespace dtrain::ops {

template <typename T>
void GeluForwardCpu(T* y, const T* x, int64_t n);
template <typename T>
void GeluBackwardCpu(T* dx, const T* x, const T* dy, int64_t n);

// CUDA builds only.
Status GeluForwardCuda(float* y, const float* x, int64_t n, cudaStream_t stream);
Status GeluBackwardCuda(float* dx, const float* x, const float* dy, int64_t n, cudaStream_t stream);

Status GeluForwardCudaBf16(uint16_t* y, const uint16_t* x, int64_t n, cudaStream_t stream);
// amax: null, or a device float set to max |dx| as stored (kernels/fp8.h's Fp8Amax, fused into this pass).
Status GeluBackwardCudaBf16(uint16_t* dx, const uint16_t* x, const uint16_t* dy, int64_t n, float* amax,
                            cudaStream_t stream);
Status GeluForwardCudaF16(uint16_t* y, const uint16_t* x, int64_t n, cudaStream_t stream);
Status GeluBackwardCudaF16(uint16_t* dx, const uint16_t* x, const uint16_t* dy, int64_t n, float* amax,
                           cudaStream_t stream);

Status GeluForward(DeviceContext& ctx, const Tensor& x, Tensor* y);
// amax (optional, a one-element f32 tensor on ctx's device): also *amax = max |dx|, the value kernels/fp8.h's Fp8Amax
// gives (for an FP8 cast of dx that then skips its amax pass); fused into the kernel for 16-bit CUDA tensors, a
// separate pass otherwise.
Status GeluBackward(DeviceContext& ctx, const Tensor& x, const Tensor& dy, Tensor* dx, Tensor* amax = nullptr);

}  // namespace dtrain::ops
