#pragma once
// train.master_weights split keeps each fp32 master weight as two 16-bit halves: the model's bf16 parameter (the high
// half, the nearest bf16 with ties away from zero) and the optimizer's master_low (the low 16 bits):
// kernels/bf16_round.h SplitF32 / JoinF32, exact both ways. Checkpoints, exported weights and model.init_from hold the
// fp32 values; these convert on the host, on the caller's buffers.
// Thread-safety: none needed (functions on the caller's buffers and streams).

#include <cstdint>

#include "core/device_context.h"
#include "core/status.h"
#include "core/tensor.h"

namespace dtrain::runtime {

// `buf` holds n high halves in its first 2n bytes and has room for 4n, `lo` the n low halves: rewrites buf as the n
// fp32 masters, in place (last element first, as WidenBf16InPlace).
void JoinMastersInPlace(void* buf, const uint16_t* lo, int64_t n);
// The reverse: the n f32 values at `buf` as their high halves in its first 2n bytes (first element first) and their
// low halves in lo[0, n).
void SplitMastersInPlace(void* buf, uint16_t* lo, int64_t n);

// The f32 CPU tensor `src` into the masters: its high halves into `hi` (bf16 on ctx's device), its low halves into
// `lo` (bf16 storage, on the device or in host memory), both of src's numel. Synchronizes ctx (its host buffers are
// freed on return).
Status CopyF32IntoMasters(DeviceContext& ctx, const Tensor& src, Tensor* hi, Tensor* lo);
// The masters [offset, offset + n) of `hi` and `lo` as n f32 values at `dst` (host memory). Synchronizes ctx.
Status ReadMasters(DeviceContext& ctx, const Tensor& hi, const Tensor& lo, int64_t offset, int64_t n, float* dst);

}  // namespace dtrain::runtime
