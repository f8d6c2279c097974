#pragma once
// Global average pooling over the spatial dims of NCHW activations (the CNN's last feature map -> its head):
//   forward:  y[n,c] = sum_{h,w} x[n,c,h,w] / (H*W)
//   backward: dx[n,c,h,w] = dy[n,c] / (H*W)                       (overwritten)
// CPU references take T = float or double (sums in double); CUDA launchers are f32 (one warp per (n,c) row,
// fixed-order sums: bitwise reproducible), queued on `stream`. The Tensor entry points take x/dx [N,C,H,W] and
// y/dy [N,C], check shapes/dtypes/devices (InvalidArgument naming the shapes) and dispatch CPU f32/f64 -> *Cpu,
// CUDA f32 -> *Cuda. Outputs must not alias inputs.
//
// Channels-last (NHWC) variants for the CNN's bf16 path, x/dx [N,H,W,C] and y/dy [N,C]:
//   forward:  y[n,c] = sum_{h,w} x[n,h,w,c] / (H*W)           CUDA: x bf16, y f32; CPU: f32/f64 throughout
//   backward: dx[n,h,w,c] = dy[n,c] / (H*W)                   CUDA: dy f32, dx bf16 (fp32 quotient rounded once)
// The CUDA forward is one launch of one block per image (and per 256 slots of 8 channels): each thread sums its 8
// channels (a 16-byte load) of every rpp-th pixel in double, then a fixed tree over the block: bitwise reproducible, no
// atomics. The backward is one grid-stride launch. Both use 128-bit accesses when C % 8 == 0 and the pointers are
// 16-byte aligned, else one channel a thread. Outputs must not alias inputs.

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

// ---- channels-last ([N,H,W,C]: n images of hw = H*W rows of c channels) --------------------------------------
template <typename T>
void GlobalAvgPoolNhwcForwardCpu(T* y, const T* x, int64_t n, int64_t hw, int64_t c);
template <typename T>
void GlobalAvgPoolNhwcBackwardCpu(T* dx, const T* dy, int64_t n, int64_t hw, int64_t c);

// CUDA builds only; bf16 maps cross as uint16_t (raw bits).
Status GlobalAvgPoolNhwcForwardCudaBf16(float* y, const uint16_t* x, int64_t n, int64_t hw, int64_t c,
                                        cudaStream_t stream);
Status GlobalAvgPoolNhwcBackwardCudaBf16(uint16_t* dx, const float* dy, int64_t n, int64_t hw, int64_t c,
                                         cudaStream_t stream);

// x [N,H,W,C] (CUDA bf16; CPU f32/f64) -> y [N,C] (CUDA f32; CPU x's dtype).
Status GlobalAvgPoolNhwcForward(DeviceContext& ctx, const Tensor& x, Tensor* y);
// dy [N,C] (CUDA f32; CPU f32/f64) -> dx [N,H,W,C] (CUDA bf16; CPU dy's dtype), overwritten. dx's shape gives H, W.
Status GlobalAvgPoolNhwcBackward(DeviceContext& ctx, const Tensor& dy, Tensor* dx);

}  // namespace dtrain::ops
