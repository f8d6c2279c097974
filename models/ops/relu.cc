#include "models/ops/relu.h"

#include "runtime/core/check.h"

namespace dtrain::ops {

template <typename T>
void ReluForwardCpu(T* y, const T* x, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = x[i] > T(0) ? x[i] : T(0);
}

template <typename T>
void ReluBackwardCpu(T* dx, const T* y, const T* dy, int64_t n) {
  for (int64_t i = 0; i < n; ++i) dx[i] = y[i] > T(0) ? dy[i] : T(0);
}

template void ReluForwardCpu<float>(float*, const float*, int64_t);
template void ReluForwardCpu<double>(double*, const double*, int64_t);
template void ReluBackwardCpu<float>(float*, const float*, const float*, int64_t);
template void ReluBackwardCpu<double>(double*, const double*, const double*, int64_t);

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

Status ReluForward(DeviceContext& ctx, const Tensor& x, Tensor* y) {
  DT_CHECK_ARG(y != nullptr, "ReluForward: y is null");
  DT_RETURN_IF_ERROR(CheckSame(ctx, "ReluForward", x, x, *y));
  if (ctx.is_cuda()) {
#if DT_HAVE_CUDA
    return ReluForwardCuda(y->data<float>(), x.data<float>(), x.numel(), ctx.stream());
#else
    return Status::Unavailable("ReluForward: CUDA tensor in a build without CUDA");
#endif
  }
  if (x.dtype() == DType::kF32) {
    ReluForwardCpu(y->data<float>(), x.data<float>(), x.numel());
  } else {
    ReluForwardCpu(y->data<double>(), x.data<double>(), x.numel());
  }
  return Status::OK();
}

Status ReluBackward(DeviceContext& ctx, const Tensor& y, const Tensor& dy, Tensor* dx) {
  DT_CHECK_ARG(dx != nullptr, "ReluBackward: dx is null");
  DT_RETURN_IF_ERROR(CheckSame(ctx, "ReluBackward", y, dy, *dx));
  if (ctx.is_cuda()) {
#if DT_HAVE_CUDA
    return ReluBackwardCuda(dx->data<float>(), y.data<float>(), dy.data<float>(), y.numel(), ctx.stream());
#else
    return Status::Unavailable("ReluBackward: CUDA tensor in a build without CUDA");
#endif
  }
  if (y.dtype() == DType::kF32) {
    ReluBackwardCpu(dx->data<float>(), y.data<float>(), dy.data<float>(), y.numel());
  } else {
    ReluBackwardCpu(dx->data<double>(), y.data<double>(), dy.data<double>(), y.numel());
  }
  return Status::OK();
}

}  // namespace dtrain::ops
