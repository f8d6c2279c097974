#include "models/chunked_classifier.h"

#include <algorithm>

#include "core/check.h"
#include "core/nvtx.h"
#include "kernels/matmul.h"
#include "kernels/softmax_xent.h"

namespace dtrain::models {

Status ChunkedClassifierForward(DeviceContext& ctx, const ChunkedClassifierArgs& a) {
  DT_NVTX_RANGE("chunked_classifier");
  DT_CHECK_ARG(a.x != nullptr && a.head != nullptr && a.targets != nullptr && a.logits != nullptr &&
                   a.losses != nullptr && (a.dhead == nullptr || a.dx != nullptr),
               "ChunkedClassifierForward: x, head, targets, logits, losses (and dx with dhead) must be set");
  DT_CHECK_ARG(a.x->ndim() == 2 && a.logits->ndim() == 2 && a.logits->dim(0) >= 1 && a.targets->numel() == a.x->dim(0),
               "ChunkedClassifierForward: x " << a.x->ToString() << ", logits " << a.logits->ToString() << ", targets "
                                              << a.targets->ToString());
  const int64_t n = a.x->dim(0), c = a.x->dim(1), rows = a.logits->dim(0), vp = a.logits->dim(1);
  const bool training = a.dhead != nullptr;
  for (int64_t r0 = 0; r0 < n; r0 += rows) {
    const int64_t r = std::min(rows, n - r0);
    Tensor x, logits, targets, losses;
    DT_RETURN_IF_ERROR(a.x->View(r0 * c, {r, c}, &x));
    DT_RETURN_IF_ERROR(a.logits->View(0, {r, vp}, &logits));
    DT_RETURN_IF_ERROR(a.targets->View(r0, {r}, &targets));
    DT_RETURN_IF_ERROR(a.losses->View(r0, {r}, &losses));
    DT_RETURN_IF_ERROR(ops::Matmul(ctx, x, false, *a.head, true, &logits));
    // Training: d(mean loss over all n tokens)/d(logits) of these rows, over their logits.
    DT_RETURN_IF_ERROR(ops::SoftmaxCrossEntropy(ctx, logits, targets, &losses, training ? &logits : nullptr,
                                                1.0f / static_cast<float>(n), a.valid_cols));
    if (!training) {
      if (a.preds == nullptr) continue;
      Tensor pred;
      DT_RETURN_IF_ERROR(a.preds->View(r0, {r}, &pred));
      DT_RETURN_IF_ERROR(ops::Argmax(ctx, logits, &pred, a.valid_cols));
      continue;
    }
    // The head's backward for these rows at the coming Backward's scale.
    Tensor dx;
    DT_RETURN_IF_ERROR(a.dx->View(r0 * c, {r, c}, &dx));
    DT_RETURN_IF_ERROR(ops::Matmul(ctx, logits, true, x, false, a.dhead, a.scale, 1.f));
    DT_RETURN_IF_ERROR(ops::Matmul(ctx, logits, false, *a.head, false, &dx, a.scale));
  }
  return Status::OK();
}

}  // namespace dtrain::models
