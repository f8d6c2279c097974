#pragma once
// SwiGLU, the gated MLP activation of Llama, on the output of one fused gate|up GEMM:
//   h[..., 2F] whose row is gate (F) | up (F);  out[..., F] = silu(gate) * up,  silu(g) = g * sigmoid(g).
//   backward (dh SET, [..., 2F]): dgate = dout * up * sigmoid(g) * (1 + g * (1 - sigmoid(g))),  dup = dout * silu(g).
// Backward takes the INPUT h (nothing else is saved). 16-bit rounding: fp32 math, out rounded once; HF rounds
// silu(gate) to 16 bits before the product (a second rounding), so they differ by at most one 16-bit rounding.
// CPU references take T = float or double; CUDA launchers are f32 and bf16 / fp16 (16-bit as uint16_t raw bits,
// fp32 math with expf), one thread per V columns of a row (128-bit accesses when F % V == 0 and the pointers are
// aligned: V = 8 for 16-bit, 4 for f32), queued on `stream`. The Tensor entry points check shapes/dtypes/devices
// (InvalidArgument naming the shapes) and dispatch CPU f32/f64 -> *Cpu, CUDA f32 -> *Cuda, bf16 -> *CudaBf16,
// f16 -> *CudaF16. FP8 (issue 35): the forward can also give max |out| and the backward max |dh| (the amax of an FP8
// GEMM's input or output gradient, kernels/fp8.h), fused into the 16-bit kernels that write them. Outputs must not
// alias inputs.

#include <cstdint>

#include "core/cuda_fwd.h"
#include "core/device_context.h"
#include "core/status.h"
#include "core/tensor.h"

namespace dtrain::ops {

// h [n, 2f], out and dout [n, f], dh [n, 2f].
template <typename T>
void SwiGluForwardCpu(T* out, const T* h, int64_t n, int64_t f);
template <typename T>
void SwiGluBackwardCpu(T* dh, const T* h, const T* dout, int64_t n, int64_t f);

// CUDA builds only.
Status SwiGluForwardCuda(float* out, const float* h, int64_t n, int64_t f, cudaStream_t stream);
Status SwiGluBackwardCuda(float* dh, const float* h, const float* dout, int64_t n, int64_t f, cudaStream_t stream);
// 16-bit: `amax` null, or a device float set to max |out| (|dh|) as stored: kernels/fp8.h's Fp8Amax of the output,
// fused into the pass that writes it.
Status SwiGluForwardCudaBf16(uint16_t* out, const uint16_t* h, int64_t n, int64_t f, float* amax, cudaStream_t stream);
Status SwiGluBackwardCudaBf16(uint16_t* dh, const uint16_t* h, const uint16_t* dout, int64_t n, int64_t f, float* amax,
                              cudaStream_t stream);
Status SwiGluForwardCudaF16(uint16_t* out, const uint16_t* h, int64_t n, int64_t f, float* amax, cudaStream_t stream);
Status SwiGluBackwardCudaF16(uint16_t* dh, const uint16_t* h, const uint16_t* dout, int64_t n, int64_t f, float* amax,
                             cudaStream_t stream);

// h [..., 2F] (F > 0): f32/f64 on the CPU, f32/bf16/f16 on CUDA; out [..., F] of h's dtype on ctx's device. amax
// (optional, a one-element f32 tensor on ctx's device): also *amax = max |out|, the value kernels/fp8.h's Fp8Amax gives
// (for an FP8 cast of out that then skips its amax pass); fused into the kernel for 16-bit CUDA tensors, a separate
// pass otherwise.
Status SwiGluForward(DeviceContext& ctx, const Tensor& h, Tensor* out, Tensor* amax = nullptr);
// dout [..., F] and dh [..., 2F] of h's dtype; dh is overwritten. amax (optional, as in the forward): also
// *amax = max |dh|.
Status SwiGluBackward(DeviceContext& ctx, const Tensor& h, const Tensor& dout, Tensor* dh, Tensor* amax = nullptr);

}  // namespace dtrain::ops
