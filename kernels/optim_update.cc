#include "kernels/optim_update.h"

#include <cmath>
#include <string>

#include "core/check.h"
#include "kernels/bf16_round.h"

namespace dtrain::ops {

namespace detail {
AdamWCoefs MakeAdamWCoefs(const AdamWHyper& h) {
  const double t = static_cast<double>(h.step);
  AdamWCoefs c;
  c.decay = 1.0 - h.lr * h.weight_decay;
  c.one_minus_b1 = 1.0 - h.beta1;
  c.one_minus_b2 = 1.0 - h.beta2;
  c.step_size = h.lr / (1.0 - std::pow(h.beta1, t));
  c.bc2_sqrt = std::sqrt(1.0 - std::pow(h.beta2, t));
  return c;
}
}  // namespace detail

SgdKernelArgs StagedArgsFor(const SgdHyper& h) {
  SgdKernelArgs a;
  a.lr = static_cast<float>(h.lr);
  a.momentum = static_cast<float>(h.momentum);
  a.weight_decay = static_cast<float>(h.weight_decay);
  a.grad_scale = static_cast<float>(h.grad_scale);
  a.nesterov = h.nesterov ? 1 : 0;
  return a;
}

AdamWKernelArgs StagedArgsFor(const AdamWHyper& h) {
  const detail::AdamWCoefs c = detail::MakeAdamWCoefs(h);
  AdamWKernelArgs a;
  a.decay = static_cast<float>(c.decay);
  a.beta1 = static_cast<float>(h.beta1);
  a.one_minus_b1 = static_cast<float>(c.one_minus_b1);
  a.beta2 = static_cast<float>(h.beta2);
  a.one_minus_b2 = static_cast<float>(c.one_minus_b2);
  a.step_size = static_cast<float>(c.step_size);
  a.bc2_sqrt = static_cast<float>(c.bc2_sqrt);
  a.eps = static_cast<float>(h.eps);
  a.grad_scale = static_cast<float>(h.grad_scale);
  a.sr_key = SrKey(h.sr_seed, static_cast<uint64_t>(h.step));
  return a;
}

// ---- CPU references: the same operations, in the same order, as the kernels in optim_update.cu.

template <typename T>
void SgdUpdateCpu(T* params, const T* grads, T* momentum_buf, int64_t n, const SgdHyper& h, const T* scale,
                  const T* skip) {
  if (skip != nullptr && *skip != T(0)) return;
  const T s = static_cast<T>(h.grad_scale) * (scale != nullptr ? *scale : T(1));
  const T lr = static_cast<T>(h.lr);
  const T momentum = static_cast<T>(h.momentum);
  const T wd = static_cast<T>(h.weight_decay);
  for (int64_t i = 0; i < n; ++i) {
    T g = grads[i] * s;
    if (wd != T(0)) g += wd * params[i];
    const T buf = momentum * momentum_buf[i] + g;
    momentum_buf[i] = buf;
    params[i] -= lr * (h.nesterov ? g + momentum * buf : buf);
  }
}

template <typename T>
void AdamWUpdateCpu(T* params, const T* grads, T* exp_avg, T* exp_avg_sq, int64_t n, const AdamWHyper& h,
                    const T* scale, const T* skip) {
  if (skip != nullptr && *skip != T(0)) return;
  const detail::AdamWCoefs c = detail::MakeAdamWCoefs(h);
  const T s = static_cast<T>(h.grad_scale) * (scale != nullptr ? *scale : T(1));
  const T decay = static_cast<T>(c.decay);
  const T b1 = static_cast<T>(h.beta1), omb1 = static_cast<T>(c.one_minus_b1);
  const T b2 = static_cast<T>(h.beta2), omb2 = static_cast<T>(c.one_minus_b2);
  const T step_size = static_cast<T>(c.step_size), bc2_sqrt = static_cast<T>(c.bc2_sqrt);
  const T eps = static_cast<T>(h.eps);
  for (int64_t i = 0; i < n; ++i) {
    const T g = grads[i] * s;
    const T p = params[i] * decay;
    const T m = b1 * exp_avg[i] + omb1 * g;
    const T v = b2 * exp_avg_sq[i] + omb2 * (g * g);
    exp_avg[i] = m;
    exp_avg_sq[i] = v;
    const T denom = std::sqrt(v) / bc2_sqrt + eps;
    params[i] = p - step_size * (m / denom);
  }
}

namespace {

// The mixed update's loads and stores: f32 as is, bf16 (raw bits) widened exactly and rounded stochastically with
// the 16 bits `r`.
inline float LoadF32(float x) { return x; }
inline float LoadF32(uint16_t x) { return Bf16BitsToF32(x); }
inline void Store(float* dst, float x, uint32_t /*r*/) { *dst = x; }
inline void Store(uint16_t* dst, float x, uint32_t r) { *dst = RoundBf16Sr(x, r); }
// A param, and with `lo` (train.master_weights split: bf16 params only) the fp32 master its two halves hold.
inline float LoadParam(const float* p, const uint16_t* /*lo*/, int64_t i) { return p[i]; }
inline float LoadParam(const uint16_t* p, const uint16_t* lo, int64_t i) {
  return lo != nullptr ? JoinF32(p[i], lo[i]) : Bf16BitsToF32(p[i]);
}
inline void StoreParam(float* p, uint16_t* /*lo*/, int64_t i, float x, uint32_t /*r*/) { p[i] = x; }
inline void StoreParam(uint16_t* p, uint16_t* lo, int64_t i, float x, uint32_t r) {
  if (lo != nullptr) {
    SplitF32(x, &p[i], &lo[i]);
  } else {
    p[i] = RoundBf16Sr(x, r);
  }
}

}  // namespace

// The operations of AdamWMixedKernel (optim_update.cu) in its order, on the same f32 constants (StagedArgsFor).
template <typename P, typename G, typename S>
void AdamWUpdateMixedCpu(P* params, const G* grads, S* exp_avg, S* exp_avg_sq, int64_t n, const AdamWHyper& h,
                         const float* scale, const float* skip, uint16_t* master_low) {
  if (skip != nullptr && *skip != 0.0f) return;
  const AdamWKernelArgs a = StagedArgsFor(h);
  const float s = a.grad_scale * (scale != nullptr ? *scale : 1.0f);
  for (int64_t i = 0; i < n; ++i) {
    const float g = LoadF32(grads[i]) * s;
    const float p = LoadParam(params, master_low, i) * a.decay;
    const float m = a.beta1 * LoadF32(exp_avg[i]) + a.one_minus_b1 * g;
    const float v = a.beta2 * LoadF32(exp_avg_sq[i]) + a.one_minus_b2 * (g * g);
    const float denom = std::sqrt(v) / a.bc2_sqrt + a.eps;
    const float pn = p - a.step_size * (m / denom);
    const uint64_t z = SrBits(a.sr_key, static_cast<uint64_t>(h.sr_offset + i));
    Store(&exp_avg[i], m, static_cast<uint32_t>(z >> 32));
    Store(&exp_avg_sq[i], v, static_cast<uint32_t>(z >> 16));
    StoreParam(params, master_low, i, pn, static_cast<uint32_t>(z >> 48));
  }
}

template <typename T>
void GradClipCoefCpu(const T* sum_squares, double max_norm, T* norm, T* coef) {
  const T nrm = std::sqrt(*sum_squares);
  *norm = nrm;
  if (max_norm <= 0.0) {
    *coef = T(1);
    return;
  }
  const T c = static_cast<T>(max_norm) / (nrm + T(1e-6));
  *coef = c > T(1) ? T(1) : c;  // NaN stays NaN
}

template void SgdUpdateCpu<float>(float*, const float*, float*, int64_t, const SgdHyper&, const float*, const float*);
template void SgdUpdateCpu<double>(double*, const double*, double*, int64_t, const SgdHyper&, const double*,
                                   const double*);
template void AdamWUpdateCpu<float>(float*, const float*, float*, float*, int64_t, const AdamWHyper&, const float*,
                                    const float*);
template void AdamWUpdateCpu<double>(double*, const double*, double*, double*, int64_t, const AdamWHyper&,
                                     const double*, const double*);
#define DT_ADAMW_MIXED_CPU(P, G, S)                                                                          \
  template void AdamWUpdateMixedCpu<P, G, S>(P*, const G*, S*, S*, int64_t, const AdamWHyper&, const float*, \
                                             const float*, uint16_t*);
DT_ADAMW_MIXED_CPU(float, float, uint16_t)
DT_ADAMW_MIXED_CPU(uint16_t, float, float)
DT_ADAMW_MIXED_CPU(uint16_t, float, uint16_t)
DT_ADAMW_MIXED_CPU(float, uint16_t, float)
DT_ADAMW_MIXED_CPU(float, uint16_t, uint16_t)
DT_ADAMW_MIXED_CPU(uint16_t, uint16_t, float)
DT_ADAMW_MIXED_CPU(uint16_t, uint16_t, uint16_t)
#undef DT_ADAMW_MIXED_CPU
template void GradClipCoefCpu<float>(const float*, double, float*, float*);
template void GradClipCoefCpu<double>(const double*, double, double*, double*);

// ---- Tensor level ----------------------------------------------------------------------------

namespace {

// `t` must be on ctx's device with the dtype of `like`, and `numel` elements (any when numel < 0).
Status CheckLike(const DeviceContext& ctx, const Tensor& like, const Tensor& t, int64_t numel, const char* what) {
  DT_CHECK_ARG(t.defined() || t.numel() == 0, what << " is undefined");
  DT_CHECK_ARG(t.device() == ctx.type(),
               what << " " << t.ToString() << " is not on the context's device (" << DeviceName(ctx.type()) << ")");
  DT_CHECK_ARG(t.dtype() == like.dtype(), what << " " << t.ToString() << " has another dtype than " << like.ToString());
  DT_CHECK_ARG(numel < 0 || t.numel() == numel, what << " " << t.ToString() << " must have " << numel << " elements");
  return Status::OK();
}

Status CheckDType(const Tensor& t) {
  if (t.device() == DeviceType::kCUDA) {
    DT_CHECK_ARG(t.dtype() == DType::kF32, "optimizer updates on CUDA support f32 only, got " << t.ToString());
  } else {
    DT_CHECK_ARG(t.dtype() == DType::kF32 || t.dtype() == DType::kF64,
                 "optimizer updates on the CPU support f32 and f64, got " << t.ToString());
  }
  return Status::OK();
}

// An optional device scalar like params (`scale` or `skip`).
Status CheckScale(const DeviceContext& ctx, const Tensor& params, const Tensor* scale, const char* what) {
  if (scale == nullptr) return Status::OK();
  return CheckLike(ctx, params, *scale, 1, what);
}

template <typename T>
const T* ScalePtr(const Tensor* scale) {
  return scale != nullptr ? scale->data<T>() : nullptr;
}

Status EnsureScalarLike(DeviceContext& ctx, const Tensor& like, Tensor* t, const char* what) {
  DT_CHECK_ARG(t != nullptr, what << " is null");
  if (!t->defined()) return Tensor::Empty({1}, like.dtype(), ctx.allocator(), t);
  return CheckLike(ctx, like, *t, 1, what);
}

}  // namespace

Status CheckUpdateTensors(const DeviceContext& ctx, const Tensor* params, const Tensor& grads,
                          std::initializer_list<UpdateStateArg> state, const Tensor* scale, const Tensor* skip,
                          const Tensor* staged) {
  DT_CHECK_ARG(params != nullptr, "params is null");
  const int64_t n = params->numel();
  DT_RETURN_IF_ERROR(CheckLike(ctx, *params, *params, n, "params"));
  DT_RETURN_IF_ERROR(CheckDType(*params));
  DT_RETURN_IF_ERROR(CheckLike(ctx, *params, grads, n, "grads"));
  for (const UpdateStateArg& s : state) {
    DT_CHECK_ARG(s.tensor != nullptr, s.name << " is null");
    DT_RETURN_IF_ERROR(CheckLike(ctx, *params, *s.tensor, n, s.name));
  }
  DT_RETURN_IF_ERROR(CheckScale(ctx, *params, scale, "scale"));
  DT_RETURN_IF_ERROR(CheckScale(ctx, *params, skip, "skip"));
  if (staged != nullptr) {
    // A staged-args buffer (see "Staged hyper-parameters"): on the params' device, large enough.
    DT_CHECK_ARG(staged->device() == params->device() && staged->nbytes() >= kStagedArgsBytes,
                 "staged optimizer args " << staged->ToString() << " must hold " << kStagedArgsBytes << " bytes on "
                                          << DeviceName(params->device()));
  }
  return Status::OK();
}

Status SgdUpdate(DeviceContext& ctx, const SgdHyper& h, Tensor* params, const Tensor& grads, Tensor* momentum_buf,
                 const Tensor* scale, const Tensor* skip, const Tensor* staged) {
  DT_RETURN_IF_ERROR(CheckUpdateTensors(ctx, params, grads, {{"momentum_buf", momentum_buf}}, scale, skip, staged));
  const int64_t n = params->numel();
  if (params->device() == DeviceType::kCPU) {
    if (params->dtype() == DType::kF64) {
      SgdUpdateCpu(params->data<double>(), grads.data<double>(), momentum_buf->data<double>(), n, h,
                   ScalePtr<double>(scale), ScalePtr<double>(skip));
    } else {
      SgdUpdateCpu(params->data<float>(), grads.data<float>(), momentum_buf->data<float>(), n, h,
                   ScalePtr<float>(scale), ScalePtr<float>(skip));
    }
    return Status::OK();
  }
#if DT_HAVE_CUDA
  return SgdUpdateCuda(params->data<float>(), grads.data<float>(), momentum_buf->data<float>(), n, h,
                       ScalePtr<float>(scale), ctx.stream(), ScalePtr<float>(skip),
                       staged != nullptr ? static_cast<const SgdKernelArgs*>(staged->data()) : nullptr);
#else
  return Status::Unavailable("SgdUpdate on CUDA tensors, but dtrain was built without CUDA");
#endif
}

namespace {

// The CPU mixed update for params P and state S, on grads of either dtype.
template <typename P, typename S>
void AdamWMixedCpu(Tensor* params, const Tensor& grads, Tensor* exp_avg, Tensor* exp_avg_sq, const AdamWHyper& h,
                   const float* sc, const float* sk, uint16_t* lo) {
  const int64_t n = params->numel();
  P* p = params->data<P>();
  S *m = exp_avg->data<S>(), *v = exp_avg_sq->data<S>();
  if (grads.dtype() == DType::kBF16) {
    AdamWUpdateMixedCpu(p, grads.data<uint16_t>(), m, v, n, h, sc, sk, lo);
  } else {
    AdamWUpdateMixedCpu(p, grads.data<float>(), m, v, n, h, sc, sk, lo);
  }
}

// AdamWUpdate's mixed storage: params, grads and state (both tensors alike) each f32 or bf16, scale/skip f32.
Status AdamWUpdateMixed(DeviceContext& ctx, const AdamWHyper& h, Tensor* params, const Tensor& grads, Tensor* exp_avg,
                        Tensor* exp_avg_sq, const Tensor* scale, const Tensor* skip, const Tensor* staged,
                        Tensor* master_low) {
  const int64_t n = params->numel();
  auto f32_or_bf16 = [](const Tensor& t) { return t.dtype() == DType::kF32 || t.dtype() == DType::kBF16; };
  DT_CHECK_ARG(f32_or_bf16(*params) && params->device() == ctx.type(),
               "AdamW params " << params->ToString() << " must be f32 or bf16 on " << DeviceName(ctx.type()));
  DT_CHECK_ARG(f32_or_bf16(grads),
               "AdamW with bf16 params, grads or state takes f32 or bf16 grads, got " << grads.ToString());
  DT_RETURN_IF_ERROR(CheckLike(ctx, grads, grads, n, "grads"));
  DT_CHECK_ARG(exp_avg->dtype() == exp_avg_sq->dtype() && f32_or_bf16(*exp_avg),
               "AdamW state exp_avg " << exp_avg->ToString() << " and exp_avg_sq " << exp_avg_sq->ToString()
                                      << " must both be f32 or both bf16");
  DT_RETURN_IF_ERROR(CheckLike(ctx, *exp_avg, *exp_avg, n, "exp_avg"));
  DT_RETURN_IF_ERROR(CheckLike(ctx, *exp_avg, *exp_avg_sq, n, "exp_avg_sq"));
  for (const Tensor* t : {scale, skip}) {
    DT_CHECK_ARG(t == nullptr || (t->dtype() == DType::kF32 && t->numel() == 1 && t->device() == ctx.type()),
                 "AdamW " << (t == scale ? "scale " : "skip ") << t->ToString() << " must be one f32 element on "
                          << DeviceName(ctx.type()));
  }
  DT_CHECK_ARG(h.sr_offset >= 0, "AdamW sr_offset must be >= 0, got " << h.sr_offset);
  const bool p16 = params->dtype() == DType::kBF16, s16 = exp_avg->dtype() == DType::kBF16;
  if (master_low != nullptr) {
    DT_CHECK_ARG(p16 && master_low->dtype() == DType::kBF16,
                 "AdamW master_low " << master_low->ToString() << " takes bf16 params (the high halves), got "
                                     << params->ToString());
    DT_RETURN_IF_ERROR(CheckLike(ctx, *master_low, *master_low, n, "master_low"));
  }
  uint16_t* lo = master_low != nullptr ? master_low->data<uint16_t>() : nullptr;
  if (ctx.type() == DeviceType::kCPU) {
    const float *sc = ScalePtr<float>(scale), *sk = ScalePtr<float>(skip);
    if (p16 && s16) {
      AdamWMixedCpu<uint16_t, uint16_t>(params, grads, exp_avg, exp_avg_sq, h, sc, sk, lo);
    } else if (p16) {
      AdamWMixedCpu<uint16_t, float>(params, grads, exp_avg, exp_avg_sq, h, sc, sk, lo);
    } else if (s16) {
      AdamWMixedCpu<float, uint16_t>(params, grads, exp_avg, exp_avg_sq, h, sc, sk, nullptr);
    } else {
      AdamWMixedCpu<float, float>(params, grads, exp_avg, exp_avg_sq, h, sc, sk, nullptr);
    }
    return Status::OK();
  }
#if DT_HAVE_CUDA
  if (staged != nullptr) {
    DT_CHECK_ARG(staged->device() == params->device() && staged->nbytes() >= kStagedArgsBytes,
                 "staged optimizer args " << staged->ToString() << " must hold " << kStagedArgsBytes << " bytes");
  }
  return AdamWUpdateMixedCuda(params->data(), p16, grads.data(), grads.dtype() == DType::kBF16, exp_avg->data(),
                              exp_avg_sq->data(), s16, n, h, ScalePtr<float>(scale), ctx.stream(),
                              ScalePtr<float>(skip),
                              staged != nullptr ? static_cast<const AdamWKernelArgs*>(staged->data()) : nullptr, lo);
#else
  (void)staged;
  return Status::Unavailable("AdamWUpdate on CUDA tensors, but dtrain was built without CUDA");
#endif
}

}  // namespace

Status AdamWUpdate(DeviceContext& ctx, const AdamWHyper& h, Tensor* params, const Tensor& grads, Tensor* exp_avg,
                   Tensor* exp_avg_sq, const Tensor* scale, const Tensor* skip, const Tensor* staged,
                   Tensor* master_low) {
  DT_CHECK_ARG(h.step >= 1, "AdamW step counts from 1, got " << h.step);
  DT_CHECK_ARG(params != nullptr && exp_avg != nullptr && exp_avg_sq != nullptr,
               "AdamW params, exp_avg and exp_avg_sq must not be null");
  if (params->dtype() == DType::kBF16 || grads.dtype() == DType::kBF16 || exp_avg->dtype() == DType::kBF16 ||
      exp_avg_sq->dtype() == DType::kBF16 || master_low != nullptr) {
    return AdamWUpdateMixed(ctx, h, params, grads, exp_avg, exp_avg_sq, scale, skip, staged, master_low);
  }
  DT_RETURN_IF_ERROR(
      CheckUpdateTensors(ctx, params, grads, {{"exp_avg", exp_avg}, {"exp_avg_sq", exp_avg_sq}}, scale, skip, staged));
  const int64_t n = params->numel();
  if (params->device() == DeviceType::kCPU) {
    if (params->dtype() == DType::kF64) {
      AdamWUpdateCpu(params->data<double>(), grads.data<double>(), exp_avg->data<double>(), exp_avg_sq->data<double>(),
                     n, h, ScalePtr<double>(scale), ScalePtr<double>(skip));
    } else {
      AdamWUpdateCpu(params->data<float>(), grads.data<float>(), exp_avg->data<float>(), exp_avg_sq->data<float>(), n,
                     h, ScalePtr<float>(scale), ScalePtr<float>(skip));
    }
    return Status::OK();
  }
#if DT_HAVE_CUDA
  return AdamWUpdateCuda(params->data<float>(), grads.data<float>(), exp_avg->data<float>(), exp_avg_sq->data<float>(),
                         n, h, ScalePtr<float>(scale), ctx.stream(), ScalePtr<float>(skip),
                         staged != nullptr ? static_cast<const AdamWKernelArgs*>(staged->data()) : nullptr);
#else
  return Status::Unavailable("AdamWUpdate on CUDA tensors, but dtrain was built without CUDA");
#endif
}

Status GradClipCoef(DeviceContext& ctx, const Tensor& sum_squares, double max_norm, Tensor* norm, Tensor* coef) {
  DT_RETURN_IF_ERROR(CheckLike(ctx, sum_squares, sum_squares, 1, "sum_squares"));
  DT_RETURN_IF_ERROR(CheckDType(sum_squares));
  DT_RETURN_IF_ERROR(EnsureScalarLike(ctx, sum_squares, norm, "norm"));
  DT_RETURN_IF_ERROR(EnsureScalarLike(ctx, sum_squares, coef, "coef"));
  if (sum_squares.device() == DeviceType::kCPU) {
    if (sum_squares.dtype() == DType::kF64) {
      GradClipCoefCpu(sum_squares.data<double>(), max_norm, norm->data<double>(), coef->data<double>());
    } else {
      GradClipCoefCpu(sum_squares.data<float>(), max_norm, norm->data<float>(), coef->data<float>());
    }
    return Status::OK();
  }
#if DT_HAVE_CUDA
  return GradClipCoefCuda(sum_squares.data<float>(), max_norm, norm->data<float>(), coef->data<float>(), ctx.stream());
#else
  return Status::Unavailable("GradClipCoef on a CUDA tensor, but dtrain was built without CUDA");
#endif
}

}  // namespace dtrain::ops
