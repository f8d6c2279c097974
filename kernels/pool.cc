#include "kernels/pool.h"

#include <algorithm>
#include <string>
#include <vector>

#include "core/check.h"

namespace dtrain::ops {

template <typename T>
void GlobalAvgPoolForwardCpu(T* y, const T* x, int64_t rows, int64_t hw) {
  for (int64_t r = 0; r < rows; ++r) {
    double sum = 0;
    for (int64_t j = 0; j < hw; ++j) sum += x[r * hw + j];
    y[r] = static_cast<T>(sum / static_cast<double>(hw));
  }
}

template <typename T>
void GlobalAvgPoolBackwardCpu(T* dx, const T* dy, int64_t rows, int64_t hw) {
  for (int64_t r = 0; r < rows; ++r) {
    const T g = static_cast<T>(dy[r] / static_cast<double>(hw));
    for (int64_t j = 0; j < hw; ++j) dx[r * hw + j] = g;
  }
}

template void GlobalAvgPoolForwardCpu<float>(float*, const float*, int64_t, int64_t);
template void GlobalAvgPoolForwardCpu<double>(double*, const double*, int64_t, int64_t);
template void GlobalAvgPoolBackwardCpu<float>(float*, const float*, int64_t, int64_t);
template void GlobalAvgPoolBackwardCpu<double>(double*, const double*, int64_t, int64_t);

template <typename T>
void GlobalAvgPoolNhwcForwardCpu(T* y, const T* x, int64_t n, int64_t hw, int64_t c) {
  std::vector<double> sum(c);
  for (int64_t i = 0; i < n; ++i) {
    std::fill(sum.begin(), sum.end(), 0.0);
    for (int64_t p = 0; p < hw; ++p) {
      for (int64_t ch = 0; ch < c; ++ch) sum[ch] += x[(i * hw + p) * c + ch];
    }
    for (int64_t ch = 0; ch < c; ++ch) y[i * c + ch] = static_cast<T>(sum[ch] / static_cast<double>(hw));
  }
}

template <typename T>
void GlobalAvgPoolNhwcBackwardCpu(T* dx, const T* dy, int64_t n, int64_t hw, int64_t c) {
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t p = 0; p < hw; ++p) {
      for (int64_t ch = 0; ch < c; ++ch) {
        dx[(i * hw + p) * c + ch] = static_cast<T>(dy[i * c + ch] / static_cast<double>(hw));
      }
    }
  }
}

template void GlobalAvgPoolNhwcForwardCpu<float>(float*, const float*, int64_t, int64_t, int64_t);
template void GlobalAvgPoolNhwcForwardCpu<double>(double*, const double*, int64_t, int64_t, int64_t);
template void GlobalAvgPoolNhwcBackwardCpu<float>(float*, const float*, int64_t, int64_t, int64_t);
template void GlobalAvgPoolNhwcBackwardCpu<double>(double*, const double*, int64_t, int64_t, int64_t);

namespace {

// map [N,C,H,W] and vec [N,C]: one dtype, on ctx's device.
Status CheckPoolArgs(const DeviceContext& ctx, const char* op, const Tensor& map, const Tensor& vec) {
  DT_CHECK_ARG(map.ndim() == 4 && vec.ndim() == 2 && vec.dim(0) == map.dim(0) && vec.dim(1) == map.dim(1),
               op << ": shapes do not match: map " << map.ToString() << " needs [N,C] = ["
                  << (map.ndim() == 4 ? map.dim(0) : -1) << "," << (map.ndim() == 4 ? map.dim(1) : -1) << "], got "
                  << vec.ToString());
  DT_CHECK_ARG(map.dim(2) * map.dim(3) > 0, op << ": empty spatial dims in " << map.ToString());
  DT_CHECK_ARG(map.dtype() == vec.dtype(), op << ": dtypes differ: " << map.ToString() << " vs " << vec.ToString());
  DT_CHECK_ARG(map.device() == ctx.type() && vec.device() == ctx.type(),
               op << ": " << map.ToString() << ", " << vec.ToString() << " not all on " << DeviceName(ctx.type()));
  if (ctx.is_cuda()) {
    DT_CHECK_ARG(map.dtype() == DType::kF32, op << ": CUDA supports f32 only, got " << map.ToString());
  } else {
    DT_CHECK_ARG(map.dtype() == DType::kF32 || map.dtype() == DType::kF64,
                 op << ": CPU supports f32/f64, got " << map.ToString());
  }
  return Status::OK();
}

// map [N,H,W,C] and vec [N,C] on ctx's device. CUDA: map bf16, vec f32. CPU: one dtype, f32 or f64.
Status CheckPoolNhwcArgs(const DeviceContext& ctx, const char* op, const Tensor& map, const Tensor& vec) {
  DT_CHECK_ARG(map.ndim() == 4 && vec.ndim() == 2 && vec.dim(0) == map.dim(0) && vec.dim(1) == map.dim(3),
               op << ": shapes do not match: map " << map.ToString() << " [N,H,W,C] needs [N,C] = ["
                  << (map.ndim() == 4 ? map.dim(0) : -1) << "," << (map.ndim() == 4 ? map.dim(3) : -1) << "], got "
                  << vec.ToString());
  DT_CHECK_ARG(map.dim(1) * map.dim(2) > 0, op << ": empty spatial dims in " << map.ToString());
  DT_CHECK_ARG(map.device() == ctx.type() && vec.device() == ctx.type(),
               op << ": " << map.ToString() << ", " << vec.ToString() << " not all on " << DeviceName(ctx.type()));
  if (ctx.is_cuda()) {
    DT_CHECK_ARG(map.dtype() == DType::kBF16 && vec.dtype() == DType::kF32,
                 op << ": CUDA needs a bf16 map and an f32 [N,C], got " << map.ToString() << ", " << vec.ToString());
  } else {
    DT_CHECK_ARG(map.dtype() == vec.dtype(), op << ": dtypes differ: " << map.ToString() << " vs " << vec.ToString());
    DT_CHECK_ARG(map.dtype() == DType::kF32 || map.dtype() == DType::kF64,
                 op << ": CPU supports f32/f64, got " << map.ToString());
  }
  return Status::OK();
}

}  // namespace

Status GlobalAvgPoolForward(DeviceContext& ctx, const Tensor& x, Tensor* y) {
  DT_CHECK_ARG(y != nullptr, "GlobalAvgPoolForward: y is null");
  DT_RETURN_IF_ERROR(CheckPoolArgs(ctx, "GlobalAvgPoolForward", x, *y));
  const int64_t rows = x.dim(0) * x.dim(1), hw = x.dim(2) * x.dim(3);
  if (ctx.is_cuda()) {
#if DT_HAVE_CUDA
    return GlobalAvgPoolForwardCuda(y->data<float>(), x.data<float>(), rows, hw, ctx.stream());
#else
    return Status::Unavailable("GlobalAvgPoolForward: CUDA tensor in a build without CUDA");
#endif
  }
  if (x.dtype() == DType::kF32) {
    GlobalAvgPoolForwardCpu(y->data<float>(), x.data<float>(), rows, hw);
  } else {
    GlobalAvgPoolForwardCpu(y->data<double>(), x.data<double>(), rows, hw);
  }
  return Status::OK();
}

Status GlobalAvgPoolBackward(DeviceContext& ctx, const Tensor& dy, Tensor* dx) {
  DT_CHECK_ARG(dx != nullptr, "GlobalAvgPoolBackward: dx is null");
  DT_RETURN_IF_ERROR(CheckPoolArgs(ctx, "GlobalAvgPoolBackward", *dx, dy));
  const int64_t rows = dx->dim(0) * dx->dim(1), hw = dx->dim(2) * dx->dim(3);
  if (ctx.is_cuda()) {
#if DT_HAVE_CUDA
    return GlobalAvgPoolBackwardCuda(dx->data<float>(), dy.data<float>(), rows, hw, ctx.stream());
#else
    return Status::Unavailable("GlobalAvgPoolBackward: CUDA tensor in a build without CUDA");
#endif
  }
  if (dy.dtype() == DType::kF32) {
    GlobalAvgPoolBackwardCpu(dx->data<float>(), dy.data<float>(), rows, hw);
  } else {
    GlobalAvgPoolBackwardCpu(dx->data<double>(), dy.data<double>(), rows, hw);
  }
  return Status::OK();
}

Status GlobalAvgPoolNhwcForward(DeviceContext& ctx, const Tensor& x, Tensor* y) {
  DT_CHECK_ARG(y != nullptr, "GlobalAvgPoolNhwcForward: y is null");
  DT_RETURN_IF_ERROR(CheckPoolNhwcArgs(ctx, "GlobalAvgPoolNhwcForward", x, *y));
  const int64_t n = x.dim(0), hw = x.dim(1) * x.dim(2), c = x.dim(3);
  if (ctx.is_cuda()) {
#if DT_HAVE_CUDA
    return GlobalAvgPoolNhwcForwardCudaBf16(y->data<float>(), x.data<uint16_t>(), n, hw, c, ctx.stream());
#else
    return Status::Unavailable("GlobalAvgPoolNhwcForward: CUDA tensor in a build without CUDA");
#endif
  }
  if (x.dtype() == DType::kF32) {
    GlobalAvgPoolNhwcForwardCpu(y->data<float>(), x.data<float>(), n, hw, c);
  } else {
    GlobalAvgPoolNhwcForwardCpu(y->data<double>(), x.data<double>(), n, hw, c);
  }
  return Status::OK();
}

Status GlobalAvgPoolNhwcBackward(DeviceContext& ctx, const Tensor& dy, Tensor* dx) {
  DT_CHECK_ARG(dx != nullptr, "GlobalAvgPoolNhwcBackward: dx is null");
  DT_RETURN_IF_ERROR(CheckPoolNhwcArgs(ctx, "GlobalAvgPoolNhwcBackward", *dx, dy));
  const int64_t n = dx->dim(0), hw = dx->dim(1) * dx->dim(2), c = dx->dim(3);
  if (ctx.is_cuda()) {
#if DT_HAVE_CUDA
    return GlobalAvgPoolNhwcBackwardCudaBf16(dx->data<uint16_t>(), dy.data<float>(), n, hw, c, ctx.stream());
#else
    return Status::Unavailable("GlobalAvgPoolNhwcBackward: CUDA tensor in a build without CUDA");
#endif
  }
  if (dy.dtype() == DType::kF32) {
    GlobalAvgPoolNhwcBackwardCpu(dx->data<float>(), dy.data<float>(), n, hw, c);
  } else {
    GlobalAvgPoolNhwcBackwardCpu(dx->data<double>(), dy.data<double>(), n, hw, c);
  }
  return Status::OK();
}

}  // namespace dtrain::ops
