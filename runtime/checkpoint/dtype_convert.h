#pragma once
// Checkpoint files hold f32 values (CheckpointFile.dtype "f32") whatever dtype a run keeps its parameters and
// optimizer state in. A run with bf16 params (train.master_weights) or bf16 state (optim.state_dtype) widens them on
// save (exact: every bf16 value is an f32 value) and narrows on restore (round to nearest even: exact for values that
// were bf16, so such a run resumes bit for bit; an f32 checkpoint loads into a bf16 run rounded once). One on-disk
// format keeps every reader (resume at any world size, `dtrain ckpt export`, model.init_from) unchanged, at twice
// the bytes of a bf16 file.
// Thread-safety: none needed (functions on the caller's buffers).

#include <cstdint>

#include "core/device_context.h"
#include "core/status.h"
#include "core/tensor.h"

namespace dtrain::runtime {

// Copies the f32 CPU tensor `src` into `dst` (same numel; dst f32 or bf16 on ctx's device, or the CPU), on
// ctx.stream(). f32: a plain copy, asynchronous like Tensor::CopyFrom. bf16: rounded on the host into a temporary
// buffer, then copied, and ctx synchronized (the buffer is freed on return). InvalidArgument for other dtypes.
Status CopyF32Into(DeviceContext& ctx, const Tensor& src, Tensor* dst);

// `buf` holds n bf16 values in its first 2n bytes and has room for 4n: rewrites it as the n f32 values, in place
// (last element first, so no value is overwritten before it is read).
void WidenBf16InPlace(void* buf, int64_t n);
// The reverse: the n f32 values at `buf` rounded to nearest even into bf16 in its first 2n bytes, in place (first
// element first).
void NarrowF32ToBf16InPlace(void* buf, int64_t n);

}  // namespace dtrain::runtime
