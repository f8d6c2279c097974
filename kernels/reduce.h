#pragma once
// Reductions and scaling over flat buffers: the pieces of global-norm gradient clipping.
//
//   SumSquares(x) = sum_i x_i^2, written into (or, accumulating, added to) a 1-element tensor on x's device.
//   Scale(x, s):    x_i *= s, in place.
//
// CPU: f32 and f64, accumulating in f64. CUDA: f32, and for SumSquares also bf16 (bf16 gradients,
// train.gradients), a deterministic two-pass reduction (per-block
// partial sums in f64 written to a workspace, then one block sums the partials in a fixed order),
// so the same input on the same GPU always gives bit-identical results (no atomics).
// Device work is queued on the given stream (ctx.stream()); nothing here synchronizes the host.

#include <cstdint>

#include "core/cuda_fwd.h"
#include "core/device_context.h"
#include "core/status.h"
#include "core/tensor.h"

namespace dtrain::ops {

// ---- CPU references (T = float, double) ------------------------------------------------------
template <typename T>
double SumSquaresCpu(const T* x, int64_t n);             // accumulates in double
double SumSquaresCpuBf16(const uint16_t* x, int64_t n);  // bf16 bits, widened exactly
template <typename T>
void ScaleCpu(T* x, int64_t n, T s);

// ---- CUDA launchers (f32, defined in reduce.cu) ----------------------------------------------
// Elements (f64) of the workspace SumSquaresCuda needs: one partial sum per block of pass 1.
constexpr int64_t kSumSquaresWorkspaceElems = 1024;
#if DT_HAVE_CUDA
// *out (device f32) = sum of x[0..n)^2, or with `accumulate` *out += that sum (added in f64, rounded
// once). `workspace`: kSumSquaresWorkspaceElems device doubles, not in use by other work on `stream`.
Status SumSquaresCuda(const float* x, int64_t n, double* workspace, float* out, cudaStream_t stream,
                      bool accumulate = false);
Status SumSquaresCudaBf16(const uint16_t* x, int64_t n, double* workspace, float* out, cudaStream_t stream,
                          bool accumulate = false);
Status ScaleCuda(float* x, int64_t n, float s, cudaStream_t stream);
#endif

// ---- Tensor level: checks, then dispatch on the device (CPU f32/f64, CUDA f32) ---------------
// `x` must live on ctx's device. If `out` is undefined it is allocated as a [1] tensor of x's dtype (f32 for a
// bf16 x) from ctx.allocator(); otherwise it must already be a 1-element tensor of that dtype on x's device.
// On CUDA a temporary workspace is taken from ctx.allocator() (the caching allocator: no cudaMalloc
// once warm). With `accumulate`, *out += sum x^2 (the sum and the old value added in f64, rounded once
// to out's dtype): a norm over disjoint pieces (ZeRO-1's owned ranges); `out` must then be defined.
Status SumSquares(DeviceContext& ctx, const Tensor& x, Tensor* out, bool accumulate = false);
// x *= s for a tensor on ctx's device.
Status Scale(DeviceContext& ctx, Tensor* x, float s);

}  // namespace dtrain::ops
