#pragma once
// GELU, tanh approximation (GPT-2's), elementwise over any shape:
//   forward:  y  = 0.5 x (1 + tanh(u)),  u = sqrt(2/pi) (x + 0.044715 x^3)
//   backward: dx = dy * [0.5 (1 + tanh u) + 0.5 x (1 - tanh^2 u) sqrt(2/pi) (1 + 3 * 0.044715 x^2)]
// Backward takes the INPUT x. CPU references take T = float or double; CUDA launchers are f32 (tanhf), queued on
// `stream`. The Tensor entry points require equal shapes and dtypes on the context's device (InvalidArgument
// naming the shapes) and dispatch CPU f32/f64 -> *Cpu, CUDA f32 -> *Cuda. Outputs must not alias inputs.

#include <cstdint>

#include "runtime/core/cuda_fwd.h"
#include "runtime/core/device_context.h"
#include "runtime/core/status.h"
#include "runtime/core/tensor.h"

namespace dtrain::ops {

template <typename T>
void GeluForwardCpu(T* y, const T* x, int64_t n);
template <typename T>
void GeluBackwardCpu(T* dx, const T* x, const T* dy, int64_t n);

// CUDA builds only.
Status GeluForwardCuda(float* y, const float* x, int64_t n, cudaStream_t stream);
Status GeluBackwardCuda(float* dx, const float* x, const float* dy, int64_t n, cudaStream_t stream);

Status GeluForward(DeviceContext& ctx, const Tensor& x, Tensor* y);
Status GeluBackward(DeviceContext& ctx, const Tensor& x, const Tensor& dy, Tensor* dx);

}  // namespace dtrain::ops
