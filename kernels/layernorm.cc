#include "kernels/layernorm.h"

#include <cmath>
#include <vector>

#include "core/check.h"
#include "kernels/fp8.h"
#include "kernels/half.h"
#include "kernels/norm_args.h"

namespace dtrain::ops {

template <typename T>
void LayerNormForwardCpu(T* y, T* mean, T* rstd, const T* x, const T* gamma, const T* beta, int64_t n, int64_t c,
                         T eps) {
  for (int64_t i = 0; i < n; ++i) {
    const T* xr = x + i * c;
    double sum = 0;
    for (int64_t j = 0; j < c; ++j) sum += xr[j];
    const double mu = sum / c;
    double sq = 0;  // two-pass variance: no cancellation for rows with a large mean
    for (int64_t j = 0; j < c; ++j) sq += (xr[j] - mu) * (xr[j] - mu);
    const double rs = 1.0 / std::sqrt(sq / c + eps);
    T* yr = y + i * c;
    for (int64_t j = 0; j < c; ++j) yr[j] = static_cast<T>((xr[j] - mu) * rs * gamma[j] + beta[j]);
    mean[i] = static_cast<T>(mu);
    rstd[i] = static_cast<T>(rs);
  }
}

template <typename T>
void LayerNormBackwardCpu(T* dx, T* dgamma, T* dbeta, const T* x, const T* gamma, const T* mean, const T* rstd,
                          const T* dy, int64_t n, int64_t c, bool accumulate_dx) {
  // Column sums start from zero and are added to dgamma/dbeta once (one rounding, like the GPU kernel).
  std::vector<double> sum_dgamma(static_cast<size_t>(c), 0.0), sum_dbeta(static_cast<size_t>(c), 0.0);
  for (int64_t i = 0; i < n; ++i) {
    const T* xr = x + i * c;
    const T* dyr = dy + i * c;
    const double mu = mean[i], rs = rstd[i];
    double sum_g = 0, sum_gx = 0;
    for (int64_t j = 0; j < c; ++j) {
      const double xhat = (xr[j] - mu) * rs;
      const double g = static_cast<double>(dyr[j]) * gamma[j];
      sum_g += g;
      sum_gx += g * xhat;
      sum_dgamma[j] += dyr[j] * xhat;
      sum_dbeta[j] += dyr[j];
    }
    const double mean_g = sum_g / c, mean_gx = sum_gx / c;
    T* dxr = dx + i * c;
    for (int64_t j = 0; j < c; ++j) {
      const double xhat = (xr[j] - mu) * rs;
      const double d = rs * (static_cast<double>(dyr[j]) * gamma[j] - mean_g - xhat * mean_gx);
      dxr[j] = static_cast<T>(accumulate_dx ? dxr[j] + d : d);
    }
  }
  for (int64_t j = 0; j < c; ++j) {
    dgamma[j] = static_cast<T>(dgamma[j] + sum_dgamma[j]);
    dbeta[j] = static_cast<T>(dbeta[j] + sum_dbeta[j]);
  }
}

template void LayerNormForwardCpu<float>(float*, float*, float*, const float*, const float*, const float*, int64_t,
                                         int64_t, float);
template void LayerNormForwardCpu<double>(double*, double*, double*, const double*, const double*, const double*,
                                          int64_t, int64_t, double);
template void LayerNormBackwardCpu<float>(float*, float*, float*, const float*, const float*, const float*,
                                          const float*, const float*, int64_t, int64_t, bool);
template void LayerNormBackwardCpu<double>(double*, double*, double*, const double*, const double*, const double*,
                                           const double*, const double*, int64_t, int64_t, bool);

Status LayerNormForward(DeviceContext& ctx, const Tensor& x, const Tensor& gamma, const Tensor& beta, float eps,
                        Tensor* y, Tensor* mean, Tensor* rstd, Tensor* amax) {
  DT_CHECK_ARG(y != nullptr && mean != nullptr && rstd != nullptr, "LayerNormForward: null output");
  DT_RETURN_IF_ERROR(CheckRowNormArgs(ctx, "LayerNormForward", x, {y}, {&gamma, &beta}, {mean, rstd}));
  DT_RETURN_IF_ERROR(CheckAmaxOutput(ctx, "LayerNormForward", amax));
  const int64_t c = x.dim(-1), n = x.numel() / c;
  if (ctx.is_cuda()) {
#if DT_HAVE_CUDA
    if (IsHalfFloat(x.dtype())) {
      const auto fn = x.dtype() == DType::kBF16 ? LayerNormForwardCudaBf16 : LayerNormForwardCudaF16;
      return fn(y->data<uint16_t>(), mean->data<float>(), rstd->data<float>(), x.data<uint16_t>(), gamma.data<float>(),
                beta.data<float>(), n, c, eps, AmaxData(amax), ctx.stream());
    }
    DT_RETURN_IF_ERROR(LayerNormForwardCuda(y->data<float>(), mean->data<float>(), rstd->data<float>(), x.data<float>(),
                                            gamma.data<float>(), beta.data<float>(), n, c, eps, ctx.stream()));
    return amax != nullptr ? Fp8Amax(ctx, *y, amax) : Status::OK();
#else
    return Status::Unavailable("LayerNormForward: CUDA tensor in a build without CUDA");
#endif
  }
  if (x.dtype() == DType::kF32) {
    LayerNormForwardCpu<float>(y->data<float>(), mean->data<float>(), rstd->data<float>(), x.data<float>(),
                               gamma.data<float>(), beta.data<float>(), n, c, eps);
  } else {
    LayerNormForwardCpu<double>(y->data<double>(), mean->data<double>(), rstd->data<double>(), x.data<double>(),
                                gamma.data<double>(), beta.data<double>(), n, c, eps);
  }
  return amax != nullptr ? Fp8Amax(ctx, *y, amax) : Status::OK();
}

Status LayerNormBackward(DeviceContext& ctx, const Tensor& x, const Tensor& gamma, const Tensor& mean,
                         const Tensor& rstd, const Tensor& dy, Tensor* dx, Tensor* dgamma, Tensor* dbeta,
                         bool accumulate_dx, Tensor* amax) {
  DT_CHECK_ARG(dx != nullptr && dgamma != nullptr && dbeta != nullptr, "LayerNormBackward: null output");
  DT_RETURN_IF_ERROR(CheckRowNormArgs(ctx, "LayerNormBackward", x, {&dy, dx}, {&gamma, dgamma, dbeta}, {&mean, &rstd}));
  DT_RETURN_IF_ERROR(CheckAmaxOutput(ctx, "LayerNormBackward", amax));
  const int64_t c = x.dim(-1), n = x.numel() / c;
  if (ctx.is_cuda()) {
#if DT_HAVE_CUDA
    // Scratch from the caching allocator: stream-ordered, so it may be reused as soon as this returns.
    Tensor scratch;
    DT_RETURN_IF_ERROR(Tensor::Empty({LayerNormBackwardScratchFloats(n, c)}, DType::kF32, ctx.allocator(), &scratch));
    if (IsHalfFloat(x.dtype())) {
      const auto fn = x.dtype() == DType::kBF16 ? LayerNormBackwardCudaBf16 : LayerNormBackwardCudaF16;
      return fn(dx->data<uint16_t>(), dgamma->data<float>(), dbeta->data<float>(), x.data<uint16_t>(),
                gamma.data<float>(), mean.data<float>(), rstd.data<float>(), dy.data<uint16_t>(), n, c,
                scratch.data<float>(), accumulate_dx, AmaxData(amax), ctx.stream());
    }
    DT_RETURN_IF_ERROR(LayerNormBackwardCuda(dx->data<float>(), dgamma->data<float>(), dbeta->data<float>(),
                                             x.data<float>(), gamma.data<float>(), mean.data<float>(),
                                             rstd.data<float>(), dy.data<float>(), n, c, scratch.data<float>(),
                                             accumulate_dx, ctx.stream()));
    return amax != nullptr ? Fp8Amax(ctx, *dx, amax) : Status::OK();
#else
    return Status::Unavailable("LayerNormBackward: CUDA tensor in a build without CUDA");
#endif
  }
  if (x.dtype() == DType::kF32) {
    LayerNormBackwardCpu<float>(dx->data<float>(), dgamma->data<float>(), dbeta->data<float>(), x.data<float>(),
                                gamma.data<float>(), mean.data<float>(), rstd.data<float>(), dy.data<float>(), n, c,
                                accumulate_dx);
  } else {
    LayerNormBackwardCpu<double>(dx->data<double>(), dgamma->data<double>(), dbeta->data<double>(), x.data<double>(),
                                 gamma.data<double>(), mean.data<double>(), rstd.data<double>(), dy.data<double>(), n,
                                 c, accumulate_dx);
  }
  return amax != nullptr ? Fp8Amax(ctx, *dx, amax) : Status::OK();
}

}  // namespace dtrain::ops
