#include "models/ops/elementwise.h"

#include "runtime/core/check.h"

namespace dtrain::ops::detail {
namespace {

// `a` and `b` must match `out` in shape and dtype, all on the context's device with a supported dtype.
Status CheckSame(const DeviceContext& ctx, const char* op, const Tensor& a, const Tensor& b, const Tensor& out) {
  DT_CHECK_ARG(a.shape() == out.shape() && b.shape() == out.shape(),
               op << ": shapes do not match: " << a.ToString() << ", " << b.ToString() << " -> " << out.ToString());
  DT_CHECK_ARG(a.dtype() == out.dtype() && b.dtype() == out.dtype(),
               op << ": dtypes differ: " << a.ToString() << ", " << b.ToString() << " -> " << out.ToString());
  DT_CHECK_ARG(a.device() == ctx.type() && b.device() == ctx.type() && out.device() == ctx.type(),
               op << ": " << a.ToString() << ", " << b.ToString() << ", " << out.ToString() << " not all on "
                  << DeviceName(ctx.type()));
  if (ctx.is_cuda()) {
    DT_CHECK_ARG(out.dtype() == DType::kF32, op << ": CUDA supports f32 only, got " << out.ToString());
  } else {
    DT_CHECK_ARG(out.dtype() == DType::kF32 || out.dtype() == DType::kF64,
                 op << ": CPU supports f32/f64, got " << out.ToString());
  }
  return Status::OK();
}

}  // namespace

Status RunUnary(DeviceContext& ctx, const UnaryOp& op, const Tensor& x, Tensor* y) {
  DT_CHECK_ARG(y != nullptr, op.name << ": output is null");
  DT_RETURN_IF_ERROR(CheckSame(ctx, op.name, x, x, *y));
  if (ctx.is_cuda()) {
    if (op.cuda_f32 == nullptr)
      return Status::Unavailable(std::string(op.name) + ": CUDA tensor in a build without CUDA");
    return op.cuda_f32(y->data<float>(), x.data<float>(), x.numel(), ctx.stream());
  }
  if (x.dtype() == DType::kF32) {
    op.cpu_f32(y->data<float>(), x.data<float>(), x.numel());
  } else {
    op.cpu_f64(y->data<double>(), x.data<double>(), x.numel());
  }
  return Status::OK();
}

Status RunBinary(DeviceContext& ctx, const BinaryOp& op, const Tensor& a, const Tensor& b, Tensor* out) {
  DT_CHECK_ARG(out != nullptr, op.name << ": output is null");
  DT_RETURN_IF_ERROR(CheckSame(ctx, op.name, a, b, *out));
  if (ctx.is_cuda()) {
    if (op.cuda_f32 == nullptr)
      return Status::Unavailable(std::string(op.name) + ": CUDA tensor in a build without CUDA");
    return op.cuda_f32(out->data<float>(), a.data<float>(), b.data<float>(), a.numel(), ctx.stream());
  }
  if (a.dtype() == DType::kF32) {
    op.cpu_f32(out->data<float>(), a.data<float>(), b.data<float>(), a.numel());
  } else {
    op.cpu_f64(out->data<double>(), a.data<double>(), b.data<double>(), a.numel());
  }
  return Status::OK();
}

}  // namespace dtrain::ops::detail
