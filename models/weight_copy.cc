#include "models/weight_copy.h"

#include "core/check.h"
#include "kernels/elementwise.h"

namespace dtrain::models {

void AppendCopyRun(int64_t src, int64_t dst, int64_t numel, std::vector<CopyRun>* runs) {
  if (!runs->empty() && runs->back().src + runs->back().numel == src && runs->back().dst + runs->back().numel == dst) {
    runs->back().numel += numel;
  } else {
    runs->push_back({src, dst, numel});
  }
}

Status CastCopyRuns(DeviceContext& ctx, const Tensor& params, int64_t src_offset, const std::vector<CopyRun>& runs,
                    Tensor* copy) {
  for (const CopyRun& r : runs) {
    Tensor src, dst;
    DT_RETURN_IF_ERROR(params.View(src_offset + r.src, {r.numel}, &src));
    DT_RETURN_IF_ERROR(copy->View(r.dst, {r.numel}, &dst));
    DT_RETURN_IF_ERROR(ops::Cast(ctx, src, &dst));
  }
  return Status::OK();
}

}  // namespace dtrain::models
