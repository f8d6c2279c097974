#include "kernels/norm_args.h"

#include <vector>

#include "core/check.h"
#include "kernels/half.h"

namespace dtrain::ops {

Status CheckRowNormArgs(const DeviceContext& ctx, const char* op, const Tensor& x,
                        std::initializer_list<const Tensor*> x_like, std::initializer_list<const Tensor*> param_like,
                        std::initializer_list<const Tensor*> row_like) {
  DT_CHECK_ARG(x.ndim() >= 1 && x.dim(-1) > 0, op << ": x " << x.ToString() << " needs a non-empty last dim C");
  DT_CHECK_ARG(x.device() == ctx.type(), op << ": x " << x.ToString() << " not on " << DeviceName(ctx.type()));
  if (ctx.is_cuda()) {
    DT_CHECK_ARG(x.dtype() == DType::kF32 || IsHalfFloat(x.dtype()),
                 op << ": CUDA supports f32, bf16 and f16, got " << x.ToString());
  } else {
    DT_CHECK_ARG(x.dtype() == DType::kF32 || x.dtype() == DType::kF64,
                 op << ": CPU supports f32/f64, got " << x.ToString());
  }
  const DType stats = IsHalfFloat(x.dtype()) ? DType::kF32 : x.dtype();
  const std::vector<int64_t> rows(x.shape().begin(), x.shape().end() - 1);
  const std::vector<int64_t> params = {x.dim(-1)};
  auto check = [&](const Tensor* t, const std::vector<int64_t>& want, DType dtype, const char* kind) -> Status {
    DT_CHECK_ARG(t->shape() == want && t->dtype() == dtype && t->device() == ctx.type(),
                 op << ": shapes do not match: x " << x.ToString() << " needs " << kind << " " << DTypeName(dtype)
                    << " on the same device, got " << t->ToString());
    return Status::OK();
  };
  for (const Tensor* t : x_like) DT_RETURN_IF_ERROR(check(t, x.shape(), x.dtype(), "x-shaped"));
  for (const Tensor* t : param_like) {
    if (t != nullptr) DT_RETURN_IF_ERROR(check(t, params, stats, "[C]"));
  }
  for (const Tensor* t : row_like) DT_RETURN_IF_ERROR(check(t, rows, stats, "x.shape[:-1]"));
  return Status::OK();
}

}  // namespace dtrain::ops
