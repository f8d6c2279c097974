#pragma once
// The LM head and the cross-entropy over row chunks of the tokens, so that a large vocabulary's logits never exist
// whole (model.llama.loss_chunk_tokens; Llama's file comment describes the model's side). For each chunk of rows
// [r0, r0 + r) of the N tokens, with one [chunk, Vp] logits buffer reused:
//   logits = x[r0:r0+r] @ head^T;  losses[r0:r0+r] = cross-entropy over the first valid_cols columns;
//   training (dhead set): dlogits = d(mean loss over all N tokens)/d(logits), in place over the logits (fused
//     softmax-xent), then dhead += scale * dlogits^T x[r0:r0+r] (beta 1: accumulates across chunks and micro-batches)
//     and dx[r0:r0+r] = scale * dlogits @ head;
//   eval (dhead null): preds[r0:r0+r] = argmax over the first valid_cols columns (when preds is set).
// The head's backward thus runs inside the forward: `scale` is the loss scale of the Backward to come, so the caller
// must know it before the forward (models/model.h, set_backward_scale). The gradients equal those of the unchunked
// head up to the summation order of dhead; the losses, dx and preds are the same rows' values.
// Dtypes as ops::Matmul and ops::SoftmaxCrossEntropy take them (x, head, logits and dx of the activation dtype;
// losses f32/f64; dhead the master dtype). CPU and CUDA alike; queues work on ctx's stream only: no allocation, no
// host synchronization (CUDA-graph capturable). InvalidArgument for mismatched shapes.

#include <cstdint>

#include "core/device_context.h"
#include "core/status.h"
#include "core/tensor.h"

namespace dtrain::models {

struct ChunkedClassifierArgs {
  const Tensor* x = nullptr;        // [N, C]: the final norm's output
  const Tensor* head = nullptr;     // [Vp, C]: the LM head as the GEMMs read it
  const Tensor* targets = nullptr;  // i32 [N]
  int64_t valid_cols = -1;          // columns that are classes (the unpadded vocabulary); -1: Vp
  Tensor* logits = nullptr;         // [chunk, Vp] scratch: after the call, the last chunk's logits (dlogits: training)
  Tensor* losses = nullptr;         // [N], written
  Tensor* dhead = nullptr;          // [Vp, C], accumulated; null: an eval forward
  Tensor* dx = nullptr;             // [N, C], written (training)
  float scale = 1.f;                // the loss scale of dhead and dx (training)
  Tensor* preds = nullptr;          // i32 [N], written (eval; may be null)
};

Status ChunkedClassifierForward(DeviceContext& ctx, const ChunkedClassifierArgs& a);

}  // namespace dtrain::models
