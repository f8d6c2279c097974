#pragma once
// Layout: permutations between NCHW (channels first, the f32 master copies) and NHWC (channels last, the bf16
// working copies cuDNN's tensor-core convolutions take; see kernels/conv2d.h). Both ops move every element once:
//
//   NchwToNhwc: out[n,h,w,c]  = in[n,c,h,w]     in [N,C,H,W] -> out [N,H,W,C]
//   NhwcToNchw: out[n,c,h,w] (+)= in[n,h,w,c]   in [N,H,W,C] -> out [N,C,H,W]  (adds when `accumulate`)
//
// Uses in the CNN: the input images (f32 NCHW -> bf16 NHWC), the conv weights (f32 master KCRS -> bf16 working copy
// KRSC: N = K, H = R, W = S) and the conv weight gradients (bf16 KRSC from cuDNN -> the f32 master gradient KCRS,
// accumulated across micro-steps).
//
//   - CPU references (*Cpu<T>, T = float or double): same dtype in and out, exact.
//   - CUDA launchers: NchwToNhwc converts f32 -> bf16 (round to nearest even, NaN stays NaN: core/bf16.h),
//     NhwcToNchw bf16 -> f32 (exact; with `accumulate` one fp32 add). One kernel launch each, queued on `stream`;
//     bf16 crosses the API as uint16_t (raw bits).
//   - Tensor entry points: check that `out`'s shape is the permutation of `in`'s (InvalidArgument naming both) and
//     the dtypes (CPU: f32/f64, equal; CUDA: the conversions above) and devices, then dispatch.
// Without `accumulate` the output is overwritten and never read. `out` must not alias `in`.

#include <cstdint>

#include "core/cuda_fwd.h"
#include "core/device_context.h"
#include "core/status.h"
#include "core/tensor.h"

namespace dtrain::ops {

// ---- CPU references: n, c, h, w are the sizes of the NCHW side ----------------------------------------------
template <typename T>
void NchwToNhwcCpu(T* out, const T* in, int64_t n, int64_t c, int64_t h, int64_t w);
template <typename T>
void NhwcToNchwCpu(T* out, const T* in, int64_t n, int64_t c, int64_t h, int64_t w, bool accumulate);

// ---- CUDA launchers (CUDA builds only) -----------------------------------------------------------------------
Status NchwToNhwcCudaF32ToBf16(uint16_t* out, const float* in, int64_t n, int64_t c, int64_t h, int64_t w,
                               cudaStream_t stream);
Status NhwcToNchwCudaBf16ToF32(float* out, const uint16_t* in, int64_t n, int64_t c, int64_t h, int64_t w,
                               bool accumulate, cudaStream_t stream);

// ---- Tensor entry points -------------------------------------------------------------------------------------
// in [N,C,H,W] -> out [N,H,W,C] (same numel). CUDA: f32 in -> bf16 out (round to nearest even). CPU: f32/f64, same
// dtype in and out.
Status NchwToNhwc(DeviceContext& ctx, const Tensor& in, Tensor* out);
// in [N,H,W,C] -> out [N,C,H,W]; out += in when accumulate, else overwrite. CUDA: bf16 in -> f32 out. CPU: f32/f64,
// same dtype.
Status NhwcToNchw(DeviceContext& ctx, const Tensor& in, Tensor* out, bool accumulate);

}  // namespace dtrain::ops
