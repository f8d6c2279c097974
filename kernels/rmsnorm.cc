#include "kernels/rmsnorm.h"

#include <cmath>
#include <vector>

#include "core/check.h"
#include "kernels/fp8.h"
#include "kernels/half.h"
#include "kernels/norm_args.h"

namespace dtrain::ops {

template <typename T>
void RmsNormForwardCpu(T* y, T* rstd, const T* x, const T* weight, int64_t n, int64_t c, T eps) {
  for (int64_t i = 0; i < n; ++i) {
    const T* xr = x + i * c;
    double sq = 0;
    for (int64_t j = 0; j < c; ++j) sq += static_cast<double>(xr[j]) * xr[j];
    const double rs = 1.0 / std::sqrt(sq / c + eps);
    T* yr = y + i * c;
    for (int64_t j = 0; j < c; ++j) yr[j] = static_cast<T>(xr[j] * rs * weight[j]);
    rstd[i] = static_cast<T>(rs);
  }
}

template <typename T>
void RmsNormBackwardCpu(T* dx, T* dweight, const T* x, const T* weight, const T* rstd, const T* dy, int64_t n,
                        int64_t c, bool accumulate_dx) {
  // Column sums start from zero and are added to dweight once (one rounding, like the GPU kernels).
  std::vector<double> sum_dweight(static_cast<size_t>(c), 0.0);
  for (int64_t i = 0; i < n; ++i) {
    const T* xr = x + i * c;
    const T* dyr = dy + i * c;
    const double rs = rstd[i];
    double sum_gx = 0;
    for (int64_t j = 0; j < c; ++j) {
      const double xhat = xr[j] * rs;
      sum_gx += static_cast<double>(dyr[j]) * weight[j] * xhat;
      sum_dweight[j] += dyr[j] * xhat;
    }
    const double mean_gx = sum_gx / c;
    T* dxr = dx + i * c;
    for (int64_t j = 0; j < c; ++j) {
      const double xhat = xr[j] * rs;
      const double d = rs * (static_cast<double>(dyr[j]) * weight[j] - xhat * mean_gx);
      dxr[j] = static_cast<T>(accumulate_dx ? dxr[j] + d : d);
    }
  }
  for (int64_t j = 0; j < c; ++j) dweight[j] = static_cast<T>(dweight[j] + sum_dweight[j]);
}

template void RmsNormForwardCpu<float>(float*, float*, const float*, const float*, int64_t, int64_t, float);
template void RmsNormForwardCpu<double>(double*, double*, const double*, const double*, int64_t, int64_t, double);
template void RmsNormBackwardCpu<float>(float*, float*, const float*, const float*, const float*, const float*, int64_t,
                                        int64_t, bool);
template void RmsNormBackwardCpu<double>(double*, double*, const double*, const double*, const double*, const double*,
                                         int64_t, int64_t, bool);

namespace {

// A bf16 weight beside bf16 x (bf16 master weights, CUDA): shape [C] on the context's device.
// Also a bf16 dweight beside bf16 x (bf16 gradients, CUDA).
bool Bf16Weight(const Tensor& x, const Tensor& weight) {
  return x.dtype() == DType::kBF16 && weight.dtype() == DType::kBF16;
}
Status CheckBf16Weight(const DeviceContext& ctx, const char* op, const Tensor& x, const Tensor& weight,
                       const char* what = "weight") {
  DT_CHECK_ARG(
      weight.shape() == std::vector<int64_t>{x.dim(-1)} && weight.device() == ctx.type(),
      op << ": " << what << " " << weight.ToString() << " must be [" << x.dim(-1) << "] on " << DeviceName(ctx.type()));
  return Status::OK();
}

}  // namespace

Status RmsNormForward(DeviceContext& ctx, const Tensor& x, const Tensor& weight, float eps, Tensor* y, Tensor* rstd,
                      Tensor* amax) {
  DT_CHECK_ARG(y != nullptr && rstd != nullptr, "RmsNormForward: null output");
  DT_RETURN_IF_ERROR(CheckAmaxOutput(ctx, "RmsNormForward", amax));
  const bool w16 = Bf16Weight(x, weight);
  if (w16) {
    DT_RETURN_IF_ERROR(CheckRowNormArgs(ctx, "RmsNormForward", x, {y}, {}, {rstd}));
    DT_RETURN_IF_ERROR(CheckBf16Weight(ctx, "RmsNormForward", x, weight));
  } else {
    DT_RETURN_IF_ERROR(CheckRowNormArgs(ctx, "RmsNormForward", x, {y}, {&weight}, {rstd}));
  }
  const int64_t c = x.dim(-1), n = x.numel() / c;
  if (ctx.is_cuda()) {
#if DT_HAVE_CUDA
    if (w16) {
      return RmsNormForwardCudaBf16W(y->data<uint16_t>(), rstd->data<float>(), x.data<uint16_t>(),
                                     weight.data<uint16_t>(), n, c, eps, AmaxData(amax), ctx.stream());
    }
    if (IsHalfFloat(x.dtype())) {
      const auto fn = x.dtype() == DType::kBF16 ? RmsNormForwardCudaBf16 : RmsNormForwardCudaF16;
      return fn(y->data<uint16_t>(), rstd->data<float>(), x.data<uint16_t>(), weight.data<float>(), n, c, eps,
                AmaxData(amax), ctx.stream());
    }
    DT_RETURN_IF_ERROR(RmsNormForwardCuda(y->data<float>(), rstd->data<float>(), x.data<float>(), weight.data<float>(),
                                          n, c, eps, ctx.stream()));
    return amax != nullptr ? Fp8Amax(ctx, *y, amax) : Status::OK();
#else
    return Status::Unavailable("RmsNormForward: CUDA tensor in a build without CUDA");
#endif
  }
  if (x.dtype() == DType::kF32) {
    RmsNormForwardCpu<float>(y->data<float>(), rstd->data<float>(), x.data<float>(), weight.data<float>(), n, c, eps);
  } else {
    RmsNormForwardCpu<double>(y->data<double>(), rstd->data<double>(), x.data<double>(), weight.data<double>(), n, c,
                              eps);
  }
  return amax != nullptr ? Fp8Amax(ctx, *y, amax) : Status::OK();
}

Status RmsNormBackward(DeviceContext& ctx, const Tensor& x, const Tensor& weight, const Tensor& rstd, const Tensor& dy,
                       Tensor* dx, Tensor* dweight, bool accumulate_dx, Tensor* amax) {
  DT_CHECK_ARG(dx != nullptr && dweight != nullptr, "RmsNormBackward: null output");
  DT_RETURN_IF_ERROR(CheckAmaxOutput(ctx, "RmsNormBackward", amax));
  const bool w16 = Bf16Weight(x, weight), g16 = Bf16Weight(x, *dweight) && ctx.is_cuda();
  DT_RETURN_IF_ERROR(CheckRowNormArgs(ctx, "RmsNormBackward", x, {&dy, dx},
                                      {w16 ? nullptr : &weight, g16 ? nullptr : dweight}, {&rstd}));
  if (w16) DT_RETURN_IF_ERROR(CheckBf16Weight(ctx, "RmsNormBackward", x, weight));
  if (g16) DT_RETURN_IF_ERROR(CheckBf16Weight(ctx, "RmsNormBackward", x, *dweight, "dweight"));
  const int64_t c = x.dim(-1), n = x.numel() / c;
  if (ctx.is_cuda()) {
#if DT_HAVE_CUDA
    // Scratch from the caching allocator: stream-ordered, so it may be reused as soon as this returns.
    Tensor scratch;
    DT_RETURN_IF_ERROR(Tensor::Empty({RmsNormBackwardScratchFloats(n, c)}, DType::kF32, ctx.allocator(), &scratch));
    if (w16) {
      return RmsNormBackwardCudaBf16W(dx->data<uint16_t>(), dweight->data(), g16, x.data<uint16_t>(),
                                      weight.data<uint16_t>(), rstd.data<float>(), dy.data<uint16_t>(), n, c,
                                      scratch.data<float>(), accumulate_dx, AmaxData(amax), ctx.stream());
    }
    if (x.dtype() == DType::kBF16) {
      return RmsNormBackwardCudaBf16(dx->data<uint16_t>(), dweight->data(), g16, x.data<uint16_t>(),
                                     weight.data<float>(), rstd.data<float>(), dy.data<uint16_t>(), n, c,
                                     scratch.data<float>(), accumulate_dx, AmaxData(amax), ctx.stream());
    }
    if (IsHalfFloat(x.dtype())) {
      return RmsNormBackwardCudaF16(dx->data<uint16_t>(), dweight->data<float>(), x.data<uint16_t>(),
                                    weight.data<float>(), rstd.data<float>(), dy.data<uint16_t>(), n, c,
                                    scratch.data<float>(), accumulate_dx, AmaxData(amax), ctx.stream());
    }
    DT_RETURN_IF_ERROR(RmsNormBackwardCuda(dx->data<float>(), dweight->data<float>(), x.data<float>(),
                                           weight.data<float>(), rstd.data<float>(), dy.data<float>(), n, c,
                                           scratch.data<float>(), accumulate_dx, ctx.stream()));
    return amax != nullptr ? Fp8Amax(ctx, *dx, amax) : Status::OK();
#else
    return Status::Unavailable("RmsNormBackward: CUDA tensor in a build without CUDA");
#endif
  }
  if (x.dtype() == DType::kF32) {
    RmsNormBackwardCpu<float>(dx->data<float>(), dweight->data<float>(), x.data<float>(), weight.data<float>(),
                              rstd.data<float>(), dy.data<float>(), n, c, accumulate_dx);
  } else {
    RmsNormBackwardCpu<double>(dx->data<double>(), dweight->data<double>(), x.data<double>(), weight.data<double>(),
                               rstd.data<double>(), dy.data<double>(), n, c, accumulate_dx);
  }
  return amax != nullptr ? Fp8Amax(ctx, *dx, amax) : Status::OK();
}

}  // namespace dtrain::ops
