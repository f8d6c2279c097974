#pragma once
// Bias ops on row-major y[M,N] with bias[N]:
//   BiasAdd:  y[m,n] += bias[n]
//   BiasGrad: dbias[n] (+)= sum_m dy[m,n]   (accumulate = true adds to dbias, false overwrites it)
// CPU references take T = float or double; CUDA launchers are f32, queued on `stream` (asynchronous w.r.t. the
// host). BiasGradCuda is deterministic: a fixed-order column reduction, no atomics. The Tensor entry points
// check shapes/dtypes/devices (InvalidArgument naming the shapes) and dispatch CPU f32/f64 -> *Cpu,
// CUDA f32 -> *Cuda.

#include <cstdint>

#include "runtime/core/cuda_fwd.h"
#include "runtime/core/device_context.h"
#include "runtime/core/status.h"
#include "runtime/core/tensor.h"

namespace dtrain::ops {

template <typename T>
void BiasAddCpu(T* y, const T* bias, int64_t m, int64_t n);
template <typename T>
void BiasGradCpu(T* dbias, const T* dy, int64_t m, int64_t n, bool accumulate);

// CUDA builds only.
Status BiasAddCuda(float* y, const float* bias, int64_t m, int64_t n, cudaStream_t stream);
Status BiasGradCuda(float* dbias, const float* dy, int64_t m, int64_t n, bool accumulate, cudaStream_t stream);

// y[M,N] += bias[N]
Status BiasAdd(DeviceContext& ctx, const Tensor& bias, Tensor* y);
// dbias[N] (+)= sum over rows of dy[M,N].
Status BiasGrad(DeviceContext& ctx, const Tensor& dy, Tensor* dbias, bool accumulate);

}  // namespace dtrain::ops
