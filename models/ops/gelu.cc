#include "models/ops/gelu.h"

#include <cmath>

#include "models/ops/elementwise.h"

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
  static const detail::UnaryOp kOp = {"GeluForward", GeluForwardCpu<float>, GeluForwardCpu<double>,
                                      DT_CUDA_FN(GeluForwardCuda)};
  return detail::RunUnary(ctx, kOp, x, y);
}

Status GeluBackward(DeviceContext& ctx, const Tensor& x, const Tensor& dy, Tensor* dx) {
  static const detail::BinaryOp kOp = {"GeluBackward", GeluBackwardCpu<float>, GeluBackwardCpu<double>,
                                       DT_CUDA_FN(GeluBackwardCuda)};
  return detail::RunBinary(ctx, kOp, x, dy, dx);
}

}  // namespace dtrain::ops
