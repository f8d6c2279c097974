#include "kernels/batchnorm_nhwc.h"

#include <cmath>
#include <initializer_list>
#include <string>
#include <vector>

#include "core/check.h"

namespace dtrain::ops {

// The references walk the rows in order and keep one double accumulator per channel, so each channel's sums are in
// row order (the same order as batchnorm.cc's per-channel loops over an NCHW map).

namespace {

// y = act((x - mean) * scale + beta + residual), act = ReLU when `relu` (NaN stays NaN); residual may be null.
template <typename T>
void ApplyCpu(T* y, const T* x, const T* residual, const T* mean, const T* scale, const T* beta, int64_t m, int64_t c,
              bool relu) {
  for (int64_t r = 0; r < m; ++r) {
    for (int64_t ch = 0; ch < c; ++ch) {
      const int64_t k = r * c + ch;
      T v = (x[k] - mean[ch]) * scale[ch] + beta[ch];
      if (residual != nullptr) v += residual[k];
      y[k] = relu && v < T(0) ? T(0) : v;
    }
  }
}

}  // namespace

template <typename T>
void BatchNormNhwcForwardTrainingCpu(T* y, T* save_mean, T* save_inv_std, T* running_mean, T* running_var, const T* x,
                                     const T* residual, const T* gamma, const T* beta, int64_t m, int64_t c, T momentum,
                                     T eps, bool relu) {
  std::vector<double> sum(c, 0.0), sq(c, 0.0);
  for (int64_t r = 0; r < m; ++r) {
    for (int64_t ch = 0; ch < c; ++ch) sum[ch] += x[r * c + ch];
  }
  const double md = static_cast<double>(m);
  for (int64_t ch = 0; ch < c; ++ch) sum[ch] /= md;  // now the mean
  for (int64_t r = 0; r < m; ++r) {
    for (int64_t ch = 0; ch < c; ++ch) {
      const double d = x[r * c + ch] - sum[ch];
      sq[ch] += d * d;
    }
  }
  std::vector<T> mean_t(c), scale(c);
  const double keep = 1 - static_cast<double>(momentum);
  for (int64_t ch = 0; ch < c; ++ch) {
    const double mean = sum[ch], var = sq[ch] / md;
    const double inv_std = 1.0 / std::sqrt(var + static_cast<double>(eps));
    save_mean[ch] = static_cast<T>(mean);
    save_inv_std[ch] = static_cast<T>(inv_std);
    const double unbiased = m > 1 ? var * md / (md - 1) : var;
    running_mean[ch] = static_cast<T>(keep * running_mean[ch] + momentum * mean);
    running_var[ch] = static_cast<T>(keep * running_var[ch] + momentum * unbiased);
    mean_t[ch] = static_cast<T>(mean);
    scale[ch] = gamma[ch] * static_cast<T>(inv_std);
  }
  ApplyCpu(y, x, residual, mean_t.data(), scale.data(), beta, m, c, relu);
}

template <typename T>
void BatchNormNhwcForwardEvalCpu(T* y, const T* x, const T* residual, const T* gamma, const T* beta,
                                 const T* running_mean, const T* running_var, int64_t m, int64_t c, T eps, bool relu) {
  std::vector<T> scale(c);
  for (int64_t ch = 0; ch < c; ++ch) {
    scale[ch] = static_cast<T>(gamma[ch] / std::sqrt(static_cast<double>(running_var[ch]) + eps));
  }
  ApplyCpu(y, x, residual, running_mean, scale.data(), beta, m, c, relu);
}

template <typename T>
void BatchNormNhwcBackwardCpu(T* dx, T* dg, T* dgamma, T* dbeta, const T* x, const T* dout, const T* out,
                              const T* gamma, const T* save_mean, const T* save_inv_std, int64_t m, int64_t c,
                              bool relu, bool accumulate_param_grads) {
  std::vector<double> sum_g(c, 0.0), sum_g_xhat(c, 0.0);
  auto grad = [&](int64_t k) { return relu && !(out[k] > T(0)) ? T(0) : dout[k]; };
  for (int64_t r = 0; r < m; ++r) {
    for (int64_t ch = 0; ch < c; ++ch) {
      const int64_t k = r * c + ch;
      const double g = grad(k);
      sum_g[ch] += g;
      sum_g_xhat[ch] += g * ((x[k] - static_cast<double>(save_mean[ch])) * save_inv_std[ch]);
    }
  }
  const double md = static_cast<double>(m);
  std::vector<double> k_scale(c), mean_g(c), mean_g_xhat(c);
  for (int64_t ch = 0; ch < c; ++ch) {
    dbeta[ch] = static_cast<T>(accumulate_param_grads ? dbeta[ch] + sum_g[ch] : sum_g[ch]);
    dgamma[ch] = static_cast<T>(accumulate_param_grads ? dgamma[ch] + sum_g_xhat[ch] : sum_g_xhat[ch]);
    k_scale[ch] = static_cast<double>(gamma[ch]) * save_inv_std[ch];
    mean_g[ch] = sum_g[ch] / md;
    mean_g_xhat[ch] = sum_g_xhat[ch] / md;
  }
  // dg before dx, element by element: dg may alias dout, dx may alias x, dout or out (the header's contract).
  for (int64_t r = 0; r < m; ++r) {
    for (int64_t ch = 0; ch < c; ++ch) {
      const int64_t k = r * c + ch;
      const T g = grad(k);
      const double xhat = (x[k] - static_cast<double>(save_mean[ch])) * save_inv_std[ch];
      if (dg != nullptr) dg[k] = g;
      dx[k] = static_cast<T>(k_scale[ch] * (g - mean_g[ch] - xhat * mean_g_xhat[ch]));
    }
  }
}

#define DT_INSTANTIATE_BATCHNORM_NHWC(T)                                                                       \
  template void BatchNormNhwcForwardTrainingCpu<T>(T*, T*, T*, T*, T*, const T*, const T*, const T*, const T*, \
                                                   int64_t, int64_t, T, T, bool);                              \
  template void BatchNormNhwcForwardEvalCpu<T>(T*, const T*, const T*, const T*, const T*, const T*, const T*, \
                                               int64_t, int64_t, T, bool);                                     \
  template void BatchNormNhwcBackwardCpu<T>(T*, T*, T*, T*, const T*, const T*, const T*, const T*, const T*,  \
                                            const T*, int64_t, int64_t, bool, bool);
DT_INSTANTIATE_BATCHNORM_NHWC(float)
DT_INSTANTIATE_BATCHNORM_NHWC(double)
#undef DT_INSTANTIATE_BATCHNORM_NHWC

// ---- Tensor entry points ---------------------------------------------------------------------------------------

namespace {

struct NhwcDims {
  int64_t m = 0, c = 0;
};

// x and every non-null tensor of `same` share x's shape [..., C] and dtype; every tensor of `per_channel` is [C].
// CUDA: x bf16, per-channel f32. CPU: all f32 or all f64. Everything on ctx's device.
Status CheckNhwcArgs(const DeviceContext& ctx, const char* op, const Tensor& x,
                     std::initializer_list<const Tensor*> same, std::initializer_list<const Tensor*> per_channel,
                     NhwcDims* d) {
  DT_CHECK_ARG(x.ndim() >= 2, op << ": x " << x.ToString() << " must be channels-last [..., C] with at least 2 dims");
  d->c = x.dim(-1);
  d->m = d->c > 0 ? x.numel() / d->c : 0;
  DT_CHECK_ARG(d->m > 0 && d->c > 0, op << ": x " << x.ToString() << " has no values per channel");
  for (const Tensor* t : same) {
    if (t == nullptr) continue;
    DT_CHECK_ARG(t->shape() == x.shape(), op << ": " << t->ToString() << " does not match x " << x.ToString());
  }
  for (const Tensor* t : per_channel) {
    DT_CHECK_ARG(t->ndim() == 1 && t->dim(0) == d->c, op << ": per-channel tensor " << t->ToString() << " should be ["
                                                         << d->c << "] for x " << x.ToString());
  }
  DT_CHECK_ARG(x.device() == ctx.type(), op << ": x " << x.ToString() << " is not on " << DeviceName(ctx.type()));
  for (const Tensor* t : same) {
    if (t != nullptr) DT_CHECK_ARG(t->device() == ctx.type(), op << ": device of " << t->ToString());
  }
  for (const Tensor* t : per_channel) DT_CHECK_ARG(t->device() == ctx.type(), op << ": device of " << t->ToString());
  DType param_dtype = x.dtype();
  if (ctx.is_cuda()) {
    DT_CHECK_ARG(x.dtype() == DType::kBF16, op << ": CUDA supports bf16 activations only, got x " << x.ToString());
    param_dtype = DType::kF32;
  } else {
    DT_CHECK_ARG(x.dtype() == DType::kF32 || x.dtype() == DType::kF64,
                 op << ": CPU supports f32/f64, got x " << x.ToString());
  }
  for (const Tensor* t : same) {
    if (t != nullptr) {
      DT_CHECK_ARG(t->dtype() == x.dtype(), op << ": " << t->ToString() << " should have x's dtype: " << x.ToString());
    }
  }
  for (const Tensor* t : per_channel) {
    DT_CHECK_ARG(t->dtype() == param_dtype, op << ": per-channel tensor " << t->ToString() << " should be "
                                               << DTypeName(param_dtype) << " for x " << x.ToString());
  }
  return Status::OK();
}

#if !DT_HAVE_CUDA
Status NoCuda(const char* op) { return Status::Unavailable(std::string(op) + ": CUDA tensor in a build without CUDA"); }
#endif

template <typename T>
const T* OrNull(const Tensor* t) {
  return t == nullptr ? nullptr : t->data<T>();
}

template <typename T>
void TrainingCpu(const Tensor& x, BatchNormTensors* bn, const Tensor* residual, bool relu, Tensor* y, const NhwcDims& d,
                 float momentum, float eps) {
  BatchNormNhwcForwardTrainingCpu(y->data<T>(), bn->save_mean.data<T>(), bn->save_inv_std.data<T>(),
                                  bn->running_mean.data<T>(), bn->running_var.data<T>(), x.data<T>(),
                                  OrNull<T>(residual), bn->gamma.data<T>(), bn->beta.data<T>(), d.m, d.c,
                                  static_cast<T>(momentum), static_cast<T>(eps), relu);
}

template <typename T>
void EvalCpu(const Tensor& x, const BatchNormTensors& bn, const Tensor* residual, bool relu, Tensor* y,
             const NhwcDims& d, float eps) {
  BatchNormNhwcForwardEvalCpu(y->data<T>(), x.data<T>(), OrNull<T>(residual), bn.gamma.data<T>(), bn.beta.data<T>(),
                              bn.running_mean.data<T>(), bn.running_var.data<T>(), d.m, d.c, static_cast<T>(eps), relu);
}

template <typename T>
void BackwardCpu(const Tensor& x, const Tensor& dout, const Tensor* out, const BatchNormTensors& bn, Tensor* dx,
                 Tensor* dg, Tensor* dgamma, Tensor* dbeta, bool accumulate, const NhwcDims& d) {
  BatchNormNhwcBackwardCpu(dx->data<T>(), dg == nullptr ? nullptr : dg->data<T>(), dgamma->data<T>(), dbeta->data<T>(),
                           x.data<T>(), dout.data<T>(), OrNull<T>(out), bn.gamma.data<T>(), bn.save_mean.data<T>(),
                           bn.save_inv_std.data<T>(), d.m, d.c, out != nullptr, accumulate);
}

}  // namespace

Status BatchNormNhwcForwardTraining(DeviceContext& ctx, const Tensor& x, BatchNormTensors* bn, const Tensor* residual,
                                    bool relu, Tensor* y, float momentum, float eps) {
  DT_CHECK_ARG(bn != nullptr && y != nullptr, "BatchNormNhwcForwardTraining: null output");
  NhwcDims d;
  DT_RETURN_IF_ERROR(CheckNhwcArgs(
      ctx, "BatchNormNhwcForwardTraining", x, {y, residual},
      {&bn->gamma, &bn->beta, &bn->running_mean, &bn->running_var, &bn->save_mean, &bn->save_inv_std}, &d));
  if (ctx.is_cuda()) {
#if DT_HAVE_CUDA
    Tensor scratch;
    DT_RETURN_IF_ERROR(Tensor::Empty({BatchNormNhwcScratchDoubles(d.m, d.c)}, DType::kF64, ctx.allocator(), &scratch));
    return BatchNormNhwcForwardTrainingCudaBf16(
        y->data<uint16_t>(), bn->save_mean.data<float>(), bn->save_inv_std.data<float>(),
        bn->running_mean.data<float>(), bn->running_var.data<float>(), x.data<uint16_t>(), OrNull<uint16_t>(residual),
        bn->gamma.data<float>(), bn->beta.data<float>(), d.m, d.c, momentum, eps, relu, scratch.data<double>(),
        ctx.stream());
#else
    return NoCuda("BatchNormNhwcForwardTraining");
#endif
  }
  if (x.dtype() == DType::kF32) {
    TrainingCpu<float>(x, bn, residual, relu, y, d, momentum, eps);
  } else {
    TrainingCpu<double>(x, bn, residual, relu, y, d, momentum, eps);
  }
  return Status::OK();
}

Status BatchNormNhwcForwardEval(DeviceContext& ctx, const Tensor& x, const BatchNormTensors& bn, const Tensor* residual,
                                bool relu, Tensor* y, float eps) {
  DT_CHECK_ARG(y != nullptr, "BatchNormNhwcForwardEval: y is null");
  NhwcDims d;
  DT_RETURN_IF_ERROR(CheckNhwcArgs(ctx, "BatchNormNhwcForwardEval", x, {y, residual},
                                   {&bn.gamma, &bn.beta, &bn.running_mean, &bn.running_var}, &d));
  if (ctx.is_cuda()) {
#if DT_HAVE_CUDA
    return BatchNormNhwcForwardEvalCudaBf16(y->data<uint16_t>(), x.data<uint16_t>(), OrNull<uint16_t>(residual),
                                            bn.gamma.data<float>(), bn.beta.data<float>(),
                                            bn.running_mean.data<float>(), bn.running_var.data<float>(), d.m, d.c, eps,
                                            relu, ctx.stream());
#else
    return NoCuda("BatchNormNhwcForwardEval");
#endif
  }
  if (x.dtype() == DType::kF32) {
    EvalCpu<float>(x, bn, residual, relu, y, d, eps);
  } else {
    EvalCpu<double>(x, bn, residual, relu, y, d, eps);
  }
  return Status::OK();
}

Status BatchNormNhwcBackward(DeviceContext& ctx, const Tensor& x, const Tensor& dout, const Tensor* out,
                             const BatchNormTensors& bn, Tensor* dx, Tensor* dg, Tensor* dgamma, Tensor* dbeta,
                             bool accumulate_param_grads) {
  DT_CHECK_ARG(dx != nullptr && dgamma != nullptr && dbeta != nullptr, "BatchNormNhwcBackward: null output");
  NhwcDims d;
  DT_RETURN_IF_ERROR(CheckNhwcArgs(ctx, "BatchNormNhwcBackward", x, {&dout, out, dx, dg},
                                   {&bn.gamma, &bn.save_mean, &bn.save_inv_std, dgamma, dbeta}, &d));
  if (ctx.is_cuda()) {
#if DT_HAVE_CUDA
    Tensor scratch;
    DT_RETURN_IF_ERROR(Tensor::Empty({BatchNormNhwcScratchDoubles(d.m, d.c)}, DType::kF64, ctx.allocator(), &scratch));
    return BatchNormNhwcBackwardCudaBf16(dx->data<uint16_t>(), dg == nullptr ? nullptr : dg->data<uint16_t>(),
                                         dgamma->data<float>(), dbeta->data<float>(), x.data<uint16_t>(),
                                         dout.data<uint16_t>(), OrNull<uint16_t>(out), bn.gamma.data<float>(),
                                         bn.save_mean.data<float>(), bn.save_inv_std.data<float>(), d.m, d.c,
                                         out != nullptr, accumulate_param_grads, scratch.data<double>(), ctx.stream());
#else
    return NoCuda("BatchNormNhwcBackward");
#endif
  }
  if (x.dtype() == DType::kF32) {
    BackwardCpu<float>(x, dout, out, bn, dx, dg, dgamma, dbeta, accumulate_param_grads, d);
  } else {
    BackwardCpu<double>(x, dout, out, bn, dx, dg, dgamma, dbeta, accumulate_param_grads, d);
  }
  return Status::OK();
}

}  // namespace dtrain::ops
