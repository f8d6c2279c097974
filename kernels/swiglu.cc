#include "kernels/swiglu.h"

#include <cmath>
#include <initializer_list>
#include <vector>

#include "core/check.h"
#include "kernels/fp8.h"
#include "kernels/half.h"

namespace dtrain::ops {

template <typename T>
void SwiGluForwardCpu(T* out, const T* h, int64_t n, int64_t f) {
  for (int64_t i = 0; i < n; ++i) {
    const T* gate = h + i * 2 * f;
    const T* up = gate + f;
    for (int64_t j = 0; j < f; ++j) {
      const T g = gate[j];
      out[i * f + j] = g / (T(1) + std::exp(-g)) * up[j];
    }
  }
}

template <typename T>
void SwiGluBackwardCpu(T* dh, const T* h, const T* dout, int64_t n, int64_t f) {
  for (int64_t i = 0; i < n; ++i) {
    const T* gate = h + i * 2 * f;
    const T* up = gate + f;
    T* dgate = dh + i * 2 * f;
    T* dup = dgate + f;
    for (int64_t j = 0; j < f; ++j) {
      const T g = gate[j], d = dout[i * f + j];
      const T s = T(1) / (T(1) + std::exp(-g));
      dgate[j] = d * up[j] * s * (T(1) + g * (T(1) - s));
      dup[j] = d * g * s;
    }
  }
}

template void SwiGluForwardCpu<float>(float*, const float*, int64_t, int64_t);
template void SwiGluForwardCpu<double>(double*, const double*, int64_t, int64_t);
template void SwiGluBackwardCpu<float>(float*, const float*, const float*, int64_t, int64_t);
template void SwiGluBackwardCpu<double>(double*, const double*, const double*, int64_t, int64_t);

namespace {

// h [..., 2F] with F > 0 in a dtype the device supports; `half_like` tensors are [..., F], `full_like` ones h's
// shape, all of h's dtype on ctx's device.
Status CheckArgs(const DeviceContext& ctx, const char* op, const Tensor& h,
                 std::initializer_list<const Tensor*> half_like, std::initializer_list<const Tensor*> full_like) {
  DT_CHECK_ARG(h.ndim() >= 1 && h.dim(-1) > 0 && h.dim(-1) % 2 == 0,
               op << ": h " << h.ToString() << " needs an even, non-empty last dim 2F (gate | up)");
  DT_CHECK_ARG(h.device() == ctx.type(), op << ": h " << h.ToString() << " not on " << DeviceName(ctx.type()));
  if (ctx.is_cuda()) {
    DT_CHECK_ARG(h.dtype() == DType::kF32 || IsHalfFloat(h.dtype()),
                 op << ": CUDA supports f32, bf16 and f16, got " << h.ToString());
  } else {
    DT_CHECK_ARG(h.dtype() == DType::kF32 || h.dtype() == DType::kF64,
                 op << ": CPU supports f32/f64, got " << h.ToString());
  }
  std::vector<int64_t> half_shape = h.shape();
  half_shape.back() /= 2;
  auto check = [&](const Tensor* t, const std::vector<int64_t>& want, const char* kind) -> Status {
    DT_CHECK_ARG(t != nullptr, op << ": null output");
    DT_CHECK_ARG(t->shape() == want && t->dtype() == h.dtype() && t->device() == ctx.type(),
                 op << ": shapes do not match: h " << h.ToString() << " needs " << kind << " " << DTypeName(h.dtype())
                    << " on the same device, got " << t->ToString());
    return Status::OK();
  };
  for (const Tensor* t : half_like) DT_RETURN_IF_ERROR(check(t, half_shape, "[..., F]"));
  for (const Tensor* t : full_like) DT_RETURN_IF_ERROR(check(t, h.shape(), "[..., 2F]"));
  return Status::OK();
}

}  // namespace

Status SwiGluForward(DeviceContext& ctx, const Tensor& h, Tensor* out, Tensor* amax) {
  DT_RETURN_IF_ERROR(CheckArgs(ctx, "SwiGluForward", h, {out}, {}));
  DT_RETURN_IF_ERROR(CheckAmaxOutput(ctx, "SwiGluForward", amax));
  const int64_t f = h.dim(-1) / 2, n = h.numel() / (2 * f);
  if (ctx.is_cuda()) {
#if DT_HAVE_CUDA
    if (IsHalfFloat(h.dtype())) {
      const auto fn = h.dtype() == DType::kBF16 ? SwiGluForwardCudaBf16 : SwiGluForwardCudaF16;
      return fn(out->data<uint16_t>(), h.data<uint16_t>(), n, f, AmaxData(amax), ctx.stream());
    }
    DT_RETURN_IF_ERROR(SwiGluForwardCuda(out->data<float>(), h.data<float>(), n, f, ctx.stream()));
    return amax != nullptr ? Fp8Amax(ctx, *out, amax) : Status::OK();
#else
    return Status::Unavailable("SwiGluForward: CUDA tensor in a build without CUDA");
#endif
  }
  if (h.dtype() == DType::kF32) {
    SwiGluForwardCpu<float>(out->data<float>(), h.data<float>(), n, f);
  } else {
    SwiGluForwardCpu<double>(out->data<double>(), h.data<double>(), n, f);
  }
  return amax != nullptr ? Fp8Amax(ctx, *out, amax) : Status::OK();
}

Status SwiGluBackward(DeviceContext& ctx, const Tensor& h, const Tensor& dout, Tensor* dh, Tensor* amax) {
  DT_RETURN_IF_ERROR(CheckArgs(ctx, "SwiGluBackward", h, {&dout}, {dh}));
  DT_RETURN_IF_ERROR(CheckAmaxOutput(ctx, "SwiGluBackward", amax));
  const int64_t f = h.dim(-1) / 2, n = h.numel() / (2 * f);
  if (ctx.is_cuda()) {
#if DT_HAVE_CUDA
    if (IsHalfFloat(h.dtype())) {
      const auto fn = h.dtype() == DType::kBF16 ? SwiGluBackwardCudaBf16 : SwiGluBackwardCudaF16;
      return fn(dh->data<uint16_t>(), h.data<uint16_t>(), dout.data<uint16_t>(), n, f, AmaxData(amax), ctx.stream());
    }
    DT_RETURN_IF_ERROR(SwiGluBackwardCuda(dh->data<float>(), h.data<float>(), dout.data<float>(), n, f, ctx.stream()));
    return amax != nullptr ? Fp8Amax(ctx, *dh, amax) : Status::OK();
#else
    return Status::Unavailable("SwiGluBackward: CUDA tensor in a build without CUDA");
#endif
  }
  if (h.dtype() == DType::kF32) {
    SwiGluBackwardCpu<float>(dh->data<float>(), h.data<float>(), dout.data<float>(), n, f);
  } else {
    SwiGluBackwardCpu<double>(dh->data<double>(), h.data<double>(), dout.data<double>(), n, f);
  }
  return amax != nullptr ? Fp8Amax(ctx, *dh, amax) : Status::OK();
}

}  // namespace dtrain::ops
