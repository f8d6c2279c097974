#pragma once
// The 16-bit copy of a model's f32 master weights that its GEMMs read (train.precision bf16 / fp16 with f32 masters),
// packed in one tensor and planned as runs: stretches of the flat params, each cast in one pass. Gpt2 and Llama decide
// which parameters go where (models/gpt2.cc Create, models/llama.cc MakeWeightCopy), append them with AppendCopyRun
// and cast with CastCopyRuns.
// Thread-safety: plain data, and a function queuing work on the caller's stream.

#include <cstdint>
#include <vector>

#include "core/device_context.h"
#include "core/status.h"
#include "core/tensor.h"

namespace dtrain::models {

// params[src, src + numel) is the copy's [dst, dst + numel).
struct CopyRun {
  int64_t src = 0, dst = 0, numel = 0;
};

// Appends params[src, src + numel) at the copy's element `dst` to `runs`: the last run grows instead when both of
// its ranges end where these begin (contiguous parameters are one cast).
void AppendCopyRun(int64_t src, int64_t dst, int64_t numel, std::vector<CopyRun>* runs);

// Casts every run, params[src_offset + src, ... + numel) into copy[dst, dst + numel) (kernels/elementwise.h Cast:
// f32 into the copy's dtype, rounded to nearest even), queued on ctx.stream().
Status CastCopyRuns(DeviceContext& ctx, const Tensor& params, int64_t src_offset, const std::vector<CopyRun>& runs,
                    Tensor* copy);

}  // namespace dtrain::models
