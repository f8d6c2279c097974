#pragma once
// Global average pooling over the spatial dims of NCHW activations (the CNN's last feature map -> its head):
//   forward:  y[n,c] = sum_{h,w} x[n,c,h,w] / (H*W)
//   backward: dx[n,c,h,w] = dy[n,c] / (H*W)                       (overwritten)
// CPU references take T = float or double (sums in double); CUDA launchers are f32 (one warp per (n,c) row,
// fixed-order sums: bitwise reproducible), queued on `stream`. The Tensor entry points take x/dx [N,C,H,W] and
// y/dy [N,C], check shapes/dtypes/devices (InvalidArgument naming the shapes) and dispatch CPU f32/f64 -> *Cpu,
// CUDA f32 -> *Cuda. Outputs must not alias inputs.

#include <cstdint>

#include "core/cuda_fwd.h"
#include "core/device_context.h"
#include "core/status.h"
#include "core/tensor.h"

namespace dtrain::ops {

// `rows` = N*C rows of `hw` = H*W values each.
template <typename T>
void GlobalAvgPoolForwardCpu(T* y, const T* x, int64_t rows, int64_t hw);
template <typename T>
void GlobalAvgPoolBackwardCpu(T* dx, const T* dy, int64_t rows, int64_t hw);

// CUDA builds only.
Status GlobalAvgPoolForwardCuda(float* y, const float* x, int64_t rows, int64_t hw, cudaStream_t stream);
Status GlobalAvgPoolBackwardCuda(float* dx, const float* dy, int64_t rows, int64_t hw, cudaStream_t stream);

Status GlobalAvgPoolForward(DeviceContext& ctx, const Tensor& x, Tensor* y);
Status GlobalAvgPoolBackward(DeviceContext& ctx, const Tensor& dy, Tensor* dx);

}  // namespace dtrain::ops
