#pragma once
// ReLU, elementwise over any shape:
//   forward:  y = max(x, 0)
//   backward: dx = dy * (y > 0)   (uses the OUTPUT y, so x need not be kept)
// CPU references take T = float or double; CUDA launchers are f32, queued on `stream`. The Tensor entry points
// require equal shapes and dtypes on the context's device (InvalidArgument naming the shapes) and dispatch CPU
// f32/f64 -> *Cpu, CUDA f32 -> *Cuda. Outputs must not alias inputs.

#include <cstdint>

#include "core/cuda_fwd.h"
#include "core/device_context.h"
#include "core/status.h"
#include "core/tensor.h"

namespace dtrain::ops {

template <typename T>
void ReluForwardCpu(T* y, const T* x, int64_t n);
template <typename T>
void ReluBackwardCpu(T* dx, const T* y, const T* dy, int64_t n);

// CUDA builds only.
Status ReluForwardCuda(float* y, const float* x, int64_t n, cudaStream_t stream);
Status ReluBackwardCuda(float* dx, const float* y, const float* dy, int64_t n, cudaStream_t stream);

Status ReluForward(DeviceContext& ctx, const Tensor& x, Tensor* y);
Status ReluBackward(DeviceContext& ctx, const Tensor& y, const Tensor& dy, Tensor* dx);

}  // namespace dtrain::ops
