#include "kernels/relu.h"

#include "kernels/elementwise.h"

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

Status ReluForward(DeviceContext& ctx, const Tensor& x, Tensor* y) {
  static const detail::UnaryOp kOp = {"ReluForward", ReluForwardCpu<float>, ReluForwardCpu<double>,
                                      DT_CUDA_FN(ReluForwardCuda)};
  return detail::RunUnary(ctx, kOp, x, y);
}

Status ReluBackward(DeviceContext& ctx, const Tensor& y, const Tensor& dy, Tensor* dx) {
  static const detail::BinaryOp kOp = {"ReluBackward", ReluBackwardCpu<float>, ReluBackwardCpu<double>,
                                       DT_CUDA_FN(ReluBackwardCuda)};
  return detail::RunBinary(ctx, kOp, y, dy, dx);
}

}  // namespace dtrain::ops
