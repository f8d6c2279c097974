#pragma once
// Embedding lookup and its gradient, for ids i32[...] (N ids in all) and table[V,C]:
//   forward:  out[n, :] = table[ids[n], :]           (out has shape ids.shape + [C]; e.g. ids[N] -> out[N,C])
//   backward: dtable[ids[n], :] += dout[n, :]        (ACCUMULATES into dtable; repeated ids add up)
// Ids outside [0, V): InvalidArgument on the CPU, checked before anything is written. On the GPU they cannot be
// reported without a host sync: forward writes a NaN row, backward skips that id; neither reads or writes out
// of bounds.
// GPU backward is bitwise deterministic: the ids are stably sorted, then each distinct id's dout rows are summed
// in increasing position order (fp32) and added to dtable once. No float atomics.
//
// CPU references take T = float or double. CUDA launchers: an f32 table (and f32 dtable) with f32 rows, or bf16 /
// fp16 rows (mixed precision: out / dout 16-bit, math in fp32; 16-bit buffers are uint16_t raw bits), queued on
// `stream`.
// The backward launchers need `scratch` of EmbeddingBackwardScratchBytes(n, v) bytes (sort buffers). The Tensor
// entry points check shapes/dtypes/devices (InvalidArgument naming the shapes), take the scratch from ctx's
// allocator, and dispatch CPU f32/f64 -> *Cpu, CUDA f32 -> *Cuda, CUDA bf16 rows -> *CudaBf16, f16 rows -> *CudaF16.

#include <cstdint>

#include "core/cuda_fwd.h"
#include "core/device_context.h"
#include "core/status.h"
#include "core/tensor.h"

namespace dtrain::ops {

template <typename T>
Status EmbeddingForwardCpu(T* out, const int32_t* ids, const T* table, int64_t n, int64_t v, int64_t c);
template <typename T>
Status EmbeddingBackwardCpu(T* dtable, const int32_t* ids, const T* dout, int64_t n, int64_t v, int64_t c);

// CUDA builds only.
Status EmbeddingForwardCuda(float* out, const int32_t* ids, const float* table, int64_t n, int64_t v, int64_t c,
                            cudaStream_t stream);
Status EmbeddingForwardCudaBf16(uint16_t* out, const int32_t* ids, const float* table, int64_t n, int64_t v, int64_t c,
                                cudaStream_t stream);
Status EmbeddingBackwardCuda(float* dtable, const int32_t* ids, const float* dout, int64_t n, int64_t v, int64_t c,
                             void* scratch, size_t scratch_bytes, cudaStream_t stream);
Status EmbeddingBackwardCudaBf16(float* dtable, const int32_t* ids, const uint16_t* dout, int64_t n, int64_t v,
                                 int64_t c, void* scratch, size_t scratch_bytes, cudaStream_t stream);
// bf16 rows into a bf16 dtable (bf16 gradients, train.gradients): each entry gets the f32 total of its rows added to
// its widened value and rounded to nearest once, so from a zero dtable it is the f32 launcher's result rounded.
Status EmbeddingBackwardCudaBf16Grad(uint16_t* dtable, const int32_t* ids, const uint16_t* dout, int64_t n, int64_t v,
                                     int64_t c, void* scratch, size_t scratch_bytes, cudaStream_t stream);
// A bf16 table (bf16 master weights, train.master_weights) into bf16 rows: the rows are the table's rows, bit for bit.
Status EmbeddingForwardCudaBf16Table(uint16_t* out, const int32_t* ids, const uint16_t* table, int64_t n, int64_t v,
                                     int64_t c, cudaStream_t stream);
Status EmbeddingForwardCudaF16(uint16_t* out, const int32_t* ids, const float* table, int64_t n, int64_t v, int64_t c,
                               cudaStream_t stream);
Status EmbeddingBackwardCudaF16(float* dtable, const int32_t* ids, const uint16_t* dout, int64_t n, int64_t v,
                                int64_t c, void* scratch, size_t scratch_bytes, cudaStream_t stream);
// InvalidArgument when n or v do not fit the sort's int32 keys.
Status EmbeddingBackwardScratchBytes(int64_t n, int64_t v, size_t* bytes);

// table [V,C] f32/f64 (f32 on CUDA); out ids.shape + [C], of table's dtype or (CUDA) bf16/f16. Also (CUDA) a bf16
// table into bf16 rows (bf16 master weights).
Status EmbeddingForward(DeviceContext& ctx, const Tensor& ids, const Tensor& table, Tensor* out);
// dtable [V,C] f32/f64 (f32 on CUDA), ACCUMULATED; dout of dtable's dtype or (CUDA) bf16/f16. Also (CUDA) bf16
// dout into a bf16 dtable (bf16 gradients).
Status EmbeddingBackward(DeviceContext& ctx, const Tensor& ids, const Tensor& dout, Tensor* dtable);

}  // namespace dtrain::ops
