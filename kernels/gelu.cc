#include "kernels/gelu.h"

#include <cmath>

#include "core/check.h"
#include "kernels/elementwise.h"
#include "kernels/fp8.h"
#include "kernels/half.h"

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

Status GeluForward(DeviceContext& ctx, const Tensor& x, Tensor* y) {
  if (ctx.is_cuda() && IsHalfFloat(x.dtype())) {
    DT_CHECK_ARG(y != nullptr, "GeluForward: output is null");
    DT_RETURN_IF_ERROR(detail::CheckSameShapeDtype(ctx, "GeluForward", x, x, *y));
#if DT_HAVE_CUDA
    const auto fn = x.dtype() == DType::kBF16 ? GeluForwardCudaBf16 : GeluForwardCudaF16;
    return fn(y->data<uint16_t>(), x.data<uint16_t>(), x.numel(), ctx.stream());
#endif
  }
  static const detail::UnaryOp kOp = {"GeluForward", GeluForwardCpu<float>, GeluForwardCpu<double>,
                                      DT_CUDA_FN(GeluForwardCuda)};
  return detail::RunUnary(ctx, kOp, x, y);
}

Status GeluBackward(DeviceContext& ctx, const Tensor& x, const Tensor& dy, Tensor* dx, Tensor* amax) {
  DT_RETURN_IF_ERROR(CheckAmaxOutput(ctx, "GeluBackward", amax));
  if (ctx.is_cuda() && IsHalfFloat(x.dtype())) {
    DT_CHECK_ARG(dx != nullptr, "GeluBackward: output is null");
    DT_RETURN_IF_ERROR(detail::CheckSameShapeDtype(ctx, "GeluBackward", x, dy, *dx));
#if DT_HAVE_CUDA
    const auto fn = x.dtype() == DType::kBF16 ? GeluBackwardCudaBf16 : GeluBackwardCudaF16;
    return fn(dx->data<uint16_t>(), x.data<uint16_t>(), dy.data<uint16_t>(), x.numel(), AmaxData(amax), ctx.stream());
#endif
  }
  static const detail::BinaryOp kOp = {"GeluBackward", GeluBackwardCpu<float>, GeluBackwardCpu<double>,
                                       DT_CUDA_FN(GeluBackwardCuda)};
  DT_RETURN_IF_ERROR(detail::RunBinary(ctx, kOp, x, dy, dx));
  return amax != nullptr ? Fp8Amax(ctx, *dx, amax) : Status::OK();
}

}  // namespace dtrain::ops
