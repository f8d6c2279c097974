#include "models/ops/gelu.h"

#include <cmath>

#include "runtime/core/check.h"

namespace dtrain::ops {

namespace {
constexpr double kSqrt2OverPi = 0.7978845608028654;  // sqrt(2/pi)
constexpr double kCubic = 0.044715;
}  // namespace

template <typename T>
void GeluForwardCpu(T* y, const T* x, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    const T v = x[i];
    const T u = T(kSqrt2OverPi) * (v + T(kCubic) * v * v * v);
    y[i] = T(0.5) * v * (T(1) + std::tanh(u));
  }
}

template <typename T>
void GeluBackwardCpu(T* dx, const T* x, const T* dy, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    const T v = x[i];
    const T t = std::tanh(T(kSqrt2OverPi) * (v + T(kCubic) * v * v * v));
    const T du = T(kSqrt2OverPi) * (T(1) + T(3 * kCubic) * v * v);
    dx[i] = dy[i] * (T(0.5) * (T(1) + t) + T(0.5) * v * (T(1) - t * t) * du);
  }
}

template void GeluForwardCpu<float>(float*, const float*, int64_t);
template void GeluForwardCpu<double>(double*, const double*, int64_t);
template void GeluBackwardCpu<float>(float*, const float*, const float*, int64_t);
template void GeluBackwardCpu<double>(double*, const double*, const double*, int64_t);

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

Status GeluForward(DeviceContext& ctx, const Tensor& x, Tensor* y) {
  DT_CHECK_ARG(y != nullptr, "GeluForward: y is null");
  DT_RETURN_IF_ERROR(CheckSame(ctx, "GeluForward", x, x, *y));
  if (ctx.is_cuda()) {
#if DT_HAVE_CUDA
    return GeluForwardCuda(y->data<float>(), x.data<float>(), x.numel(), ctx.stream());
#else
    return Status::Unavailable("GeluForward: CUDA tensor in a build without CUDA");
#endif
  }
  if (x.dtype() == DType::kF32) {
    GeluForwardCpu(y->data<float>(), x.data<float>(), x.numel());
  } else {
    GeluForwardCpu(y->data<double>(), x.data<double>(), x.numel());
  }
  return Status::OK();
}

Status GeluBackward(DeviceContext& ctx, const Tensor& x, const Tensor& dy, Tensor* dx) {
  DT_CHECK_ARG(dx != nullptr, "GeluBackward: dx is null");
  DT_RETURN_IF_ERROR(CheckSame(ctx, "GeluBackward", x, dy, *dx));
  if (ctx.is_cuda()) {
#if DT_HAVE_CUDA
    return GeluBackwardCuda(dx->data<float>(), x.data<float>(), dy.data<float>(), x.numel(), ctx.stream());
#else
    return Status::Unavailable("GeluBackward: CUDA tensor in a build without CUDA");
#endif
  }
  if (x.dtype() == DType::kF32) {
    GeluBackwardCpu(dx->data<float>(), x.data<float>(), dy.data<float>(), x.numel());
  } else {
    GeluBackwardCpu(dx->data<double>(), x.data<double>(), dy.data<double>(), x.numel());
  }
  return Status::OK();
}

}  // namespace dtrain::ops
