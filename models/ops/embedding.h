#pragma once
// Embedding lookup and its gradient, for ids i32[...] (N ids in all) and table[V,C]:
//   forward:  out[n, :] = table[ids[n], :]           (out has shape ids.shape + [C]; e.g. ids[N] -> out[N,C])
//   backward: dtable[ids[n], :] += dout[n, :]        (ACCUMULATES into dtable; repeated ids add up)
// Ids outside [0, V): InvalidArgument on the CPU, checked before anything is written. On the GPU they cannot be
// reported without a host sync: forward writes a NaN row, backward skips that id; neither reads or writes out
// of bounds.
// GPU backward uses float atomicAdd: when an id repeats, the summation order varies between runs, so dtable
// is NOT bitwise deterministic (it agrees with the CPU to fp32 rounding). Ids that appear once are exact.
//
// CPU references take T = float or double; CUDA launchers are f32, queued on `stream`. The Tensor entry points
// check shapes/dtypes/devices (InvalidArgument naming the shapes) and dispatch CPU f32/f64 -> *Cpu,
// CUDA f32 -> *Cuda.

#include <cstdint>

#include "runtime/core/cuda_fwd.h"
#include "runtime/core/device_context.h"
#include "runtime/core/status.h"
#include "runtime/core/tensor.h"

namespace dtrain::ops {

template <typename T>
Status EmbeddingForwardCpu(T* out, const int32_t* ids, const T* table, int64_t n, int64_t v, int64_t c);
template <typename T>
Status EmbeddingBackwardCpu(T* dtable, const int32_t* ids, const T* dout, int64_t n, int64_t v, int64_t c);

// CUDA builds only.
Status EmbeddingForwardCuda(float* out, const int32_t* ids, const float* table, int64_t n, int64_t v, int64_t c,
                            cudaStream_t stream);
Status EmbeddingBackwardCuda(float* dtable, const int32_t* ids, const float* dout, int64_t n, int64_t v, int64_t c,
                             cudaStream_t stream);

Status EmbeddingForward(DeviceContext& ctx, const Tensor& ids, const Tensor& table, Tensor* out);
Status EmbeddingBackward(DeviceContext& ctx, const Tensor& ids, const Tensor& dout, Tensor* dtable);

}  // namespace dtrain::ops
