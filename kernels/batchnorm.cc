#include "kernels/batchnorm.h"

#include <cmath>
#include <initializer_list>
#include <string>

#include "core/check.h"

namespace dtrain::ops {

namespace {

// Calls f(index) for every element of channel `ch`, images in order.
template <typename F>
inline void ForChannel(const BatchNormDims& d, int64_t ch, F&& f) {
  for (int64_t i = 0; i < d.n; ++i) {
    const int64_t base = (i * d.c + ch) * d.hw;
    for (int64_t j = 0; j < d.hw; ++j) f(base + j);
  }
}

}  // namespace

template <typename T>
void BatchNormForwardTrainingCpu(T* y, T* save_mean, T* save_inv_std, T* running_mean, T* running_var, const T* x,
                                 const T* gamma, const T* beta, const BatchNormDims& d, T momentum, T eps,
                                 bool accumulate) {
  const double m = static_cast<double>(d.n * d.hw);
  for (int64_t ch = 0; ch < d.c; ++ch) {
    double sum = 0;
    ForChannel(d, ch, [&](int64_t k) { sum += x[k]; });
    const double mean = sum / m;
    double sq = 0;
    ForChannel(d, ch, [&](int64_t k) { sq += (x[k] - mean) * (x[k] - mean); });
    const double var = sq / m;
    const double inv_std = 1.0 / std::sqrt(var + static_cast<double>(eps));
    save_mean[ch] = static_cast<T>(mean);
    save_inv_std[ch] = static_cast<T>(inv_std);
    const double unbiased = m > 1 ? var * m / (m - 1) : var;
    running_mean[ch] = static_cast<T>((1 - static_cast<double>(momentum)) * running_mean[ch] + momentum * mean);
    running_var[ch] = static_cast<T>((1 - static_cast<double>(momentum)) * running_var[ch] + momentum * unbiased);
    const T mean_t = static_cast<T>(mean), scale = gamma[ch] * static_cast<T>(inv_std), shift = beta[ch];
    ForChannel(d, ch, [&](int64_t k) {
      const T out = (x[k] - mean_t) * scale + shift;
      y[k] = accumulate ? y[k] + out : out;
    });
  }
}

template <typename T>
void BatchNormForwardEvalCpu(T* y, const T* x, const T* gamma, const T* beta, const T* running_mean,
                             const T* running_var, const BatchNormDims& d, T eps, bool accumulate) {
  for (int64_t ch = 0; ch < d.c; ++ch) {
    const T mean = running_mean[ch];
    const T scale = static_cast<T>(gamma[ch] / std::sqrt(static_cast<double>(running_var[ch]) + eps));
    const T shift = beta[ch];
    ForChannel(d, ch, [&](int64_t k) {
      const T out = (x[k] - mean) * scale + shift;
      y[k] = accumulate ? y[k] + out : out;
    });
  }
}

template <typename T>
void BatchNormBackwardCpu(T* dx, T* dgamma, T* dbeta, const T* dy, const T* x, const T* gamma, const T* save_mean,
                          const T* save_inv_std, const BatchNormDims& d, bool accumulate_param_grads) {
  const double m = static_cast<double>(d.n * d.hw);
  for (int64_t ch = 0; ch < d.c; ++ch) {
    const double mean = save_mean[ch], inv_std = save_inv_std[ch];
    double sum_dy = 0, sum_dy_xhat = 0;
    ForChannel(d, ch, [&](int64_t k) {
      sum_dy += dy[k];
      sum_dy_xhat += dy[k] * ((x[k] - mean) * inv_std);
    });
    dbeta[ch] = static_cast<T>(accumulate_param_grads ? dbeta[ch] + sum_dy : sum_dy);
    dgamma[ch] = static_cast<T>(accumulate_param_grads ? dgamma[ch] + sum_dy_xhat : sum_dy_xhat);
    const double k_scale = gamma[ch] * inv_std, mean_dy = sum_dy / m, mean_dy_xhat = sum_dy_xhat / m;
    ForChannel(d, ch, [&](int64_t k) {
      const double xhat = (x[k] - mean) * inv_std;
      dx[k] = static_cast<T>(k_scale * (dy[k] - mean_dy - xhat * mean_dy_xhat));
    });
  }
}

#define DT_INSTANTIATE_BATCHNORM(T)                                                                                    \
  template void BatchNormForwardTrainingCpu<T>(T*, T*, T*, T*, T*, const T*, const T*, const T*, const BatchNormDims&, \
                                               T, T, bool);                                                            \
  template void BatchNormForwardEvalCpu<T>(T*, const T*, const T*, const T*, const T*, const T*, const BatchNormDims&, \
                                           T, bool);                                                                   \
  template void BatchNormBackwardCpu<T>(T*, T*, T*, const T*, const T*, const T*, const T*, const T*,                  \
                                        const BatchNormDims&, bool);
DT_INSTANTIATE_BATCHNORM(float)
DT_INSTANTIATE_BATCHNORM(double)
#undef DT_INSTANTIATE_BATCHNORM

// ---- Tensor entry points ---------------------------------------------------------------------------------------

namespace {

// x and every tensor of `same` share x's shape; every tensor of `per_channel` is [C]. All one dtype, on ctx.
Status CheckBnArgs(const DeviceContext& ctx, const char* op, const Tensor& x, std::initializer_list<const Tensor*> same,
                   std::initializer_list<const Tensor*> per_channel, BatchNormDims* d) {
  DT_CHECK_ARG(x.ndim() >= 2, op << ": x " << x.ToString() << " must be [N,C,...]");
  int64_t hw = 1;
  for (int i = 2; i < x.ndim(); ++i) hw *= x.dim(i);
  *d = BatchNormDims{x.dim(0), x.dim(1), hw};
  DT_CHECK_ARG(d->n * d->hw > 0, op << ": x " << x.ToString() << " has no values per channel");
  for (const Tensor* t : same) {
    DT_CHECK_ARG(t->shape() == x.shape(), op << ": " << t->ToString() << " does not match x " << x.ToString());
  }
  for (const Tensor* t : per_channel) {
    DT_CHECK_ARG(t->ndim() == 1 && t->dim(0) == d->c, op << ": per-channel tensor " << t->ToString() << " should be ["
                                                         << d->c << "] for x " << x.ToString());
  }
  for (const Tensor* t : same) DT_CHECK_ARG(t->dtype() == x.dtype(), op << ": dtype of " << t->ToString());
  for (const Tensor* t : per_channel) DT_CHECK_ARG(t->dtype() == x.dtype(), op << ": dtype of " << t->ToString());
  DT_CHECK_ARG(x.device() == ctx.type(), op << ": x " << x.ToString() << " is not on " << DeviceName(ctx.type()));
  for (const Tensor* t : same) DT_CHECK_ARG(t->device() == ctx.type(), op << ": device of " << t->ToString());
  for (const Tensor* t : per_channel) DT_CHECK_ARG(t->device() == ctx.type(), op << ": device of " << t->ToString());
  if (ctx.is_cuda()) {
    DT_CHECK_ARG(x.dtype() == DType::kF32, op << ": CUDA supports f32 only, got " << x.ToString());
  } else {
    DT_CHECK_ARG(x.dtype() == DType::kF32 || x.dtype() == DType::kF64,
                 op << ": CPU supports f32/f64, got " << x.ToString());
  }
  return Status::OK();
}

#if !DT_HAVE_CUDA
Status NoCuda(const char* op) { return Status::Unavailable(std::string(op) + ": CUDA tensor in a build without CUDA"); }
#endif

}  // namespace

Status BatchNormForwardTraining(DeviceContext& ctx, const Tensor& x, BatchNormTensors* bn, Tensor* y, bool accumulate,
                                float momentum, float eps) {
  DT_CHECK_ARG(bn != nullptr && y != nullptr, "BatchNormForwardTraining: null output");
  BatchNormDims d;
  DT_RETURN_IF_ERROR(
      CheckBnArgs(ctx, "BatchNormForwardTraining", x, {y},
                  {&bn->gamma, &bn->beta, &bn->running_mean, &bn->running_var, &bn->save_mean, &bn->save_inv_std}, &d));
  if (ctx.is_cuda()) {
#if DT_HAVE_CUDA
    Tensor scratch;
    DT_RETURN_IF_ERROR(Tensor::Empty({BatchNormScratchDoubles(d)}, DType::kF64, ctx.allocator(), &scratch));
    return BatchNormForwardTrainingCuda(y->data<float>(), bn->save_mean.data<float>(), bn->save_inv_std.data<float>(),
                                        bn->running_mean.data<float>(), bn->running_var.data<float>(), x.data<float>(),
                                        bn->gamma.data<float>(), bn->beta.data<float>(), d, momentum, eps, accumulate,
                                        scratch.data<double>(), ctx.stream());
#else
    return NoCuda("BatchNormForwardTraining");
#endif
  }
  if (x.dtype() == DType::kF32) {
    BatchNormForwardTrainingCpu(y->data<float>(), bn->save_mean.data<float>(), bn->save_inv_std.data<float>(),
                                bn->running_mean.data<float>(), bn->running_var.data<float>(), x.data<float>(),
                                bn->gamma.data<float>(), bn->beta.data<float>(), d, momentum, eps, accumulate);
  } else {
    BatchNormForwardTrainingCpu(y->data<double>(), bn->save_mean.data<double>(), bn->save_inv_std.data<double>(),
                                bn->running_mean.data<double>(), bn->running_var.data<double>(), x.data<double>(),
                                bn->gamma.data<double>(), bn->beta.data<double>(), d, double{momentum}, double{eps},
                                accumulate);
  }
  return Status::OK();
}

Status BatchNormForwardEval(DeviceContext& ctx, const Tensor& x, const BatchNormTensors& bn, Tensor* y, bool accumulate,
                            float eps) {
  DT_CHECK_ARG(y != nullptr, "BatchNormForwardEval: y is null");
  BatchNormDims d;
  DT_RETURN_IF_ERROR(
      CheckBnArgs(ctx, "BatchNormForwardEval", x, {y}, {&bn.gamma, &bn.beta, &bn.running_mean, &bn.running_var}, &d));
  if (ctx.is_cuda()) {
#if DT_HAVE_CUDA
    return BatchNormForwardEvalCuda(y->data<float>(), x.data<float>(), bn.gamma.data<float>(), bn.beta.data<float>(),
                                    bn.running_mean.data<float>(), bn.running_var.data<float>(), d, eps, accumulate,
                                    ctx.stream());
#else
    return NoCuda("BatchNormForwardEval");
#endif
  }
  if (x.dtype() == DType::kF32) {
    BatchNormForwardEvalCpu(y->data<float>(), x.data<float>(), bn.gamma.data<float>(), bn.beta.data<float>(),
                            bn.running_mean.data<float>(), bn.running_var.data<float>(), d, eps, accumulate);
  } else {
    BatchNormForwardEvalCpu(y->data<double>(), x.data<double>(), bn.gamma.data<double>(), bn.beta.data<double>(),
                            bn.running_mean.data<double>(), bn.running_var.data<double>(), d, double{eps}, accumulate);
  }
  return Status::OK();
}

Status BatchNormBackward(DeviceContext& ctx, const Tensor& x, const Tensor& dy, const BatchNormTensors& bn, Tensor* dx,
                         Tensor* dgamma, Tensor* dbeta, bool accumulate_param_grads) {
  DT_CHECK_ARG(dx != nullptr && dgamma != nullptr && dbeta != nullptr, "BatchNormBackward: null output");
  BatchNormDims d;
  DT_RETURN_IF_ERROR(CheckBnArgs(ctx, "BatchNormBackward", x, {&dy, dx},
                                 {&bn.gamma, &bn.save_mean, &bn.save_inv_std, dgamma, dbeta}, &d));
  if (ctx.is_cuda()) {
#if DT_HAVE_CUDA
    Tensor scratch;
    DT_RETURN_IF_ERROR(Tensor::Empty({BatchNormScratchDoubles(d)}, DType::kF64, ctx.allocator(), &scratch));
    return BatchNormBackwardCuda(dx->data<float>(), dgamma->data<float>(), dbeta->data<float>(), dy.data<float>(),
                                 x.data<float>(), bn.gamma.data<float>(), bn.save_mean.data<float>(),
                                 bn.save_inv_std.data<float>(), d, accumulate_param_grads, scratch.data<double>(),
                                 ctx.stream());
#else
    return NoCuda("BatchNormBackward");
#endif
  }
  if (x.dtype() == DType::kF32) {
    BatchNormBackwardCpu(dx->data<float>(), dgamma->data<float>(), dbeta->data<float>(), dy.data<float>(),
                         x.data<float>(), bn.gamma.data<float>(), bn.save_mean.data<float>(),
                         bn.save_inv_std.data<float>(), d, accumulate_param_grads);
  } else {
    BatchNormBackwardCpu(dx->data<double>(), dgamma->data<double>(), dbeta->data<double>(), dy.data<double>(),
                         x.data<double>(), bn.gamma.data<double>(), bn.save_mean.data<double>(),
                         bn.save_inv_std.data<double>(), d, accumulate_param_grads);
  }
  return Status::OK();
}

}  // namespace dtrain::ops
