#include "kernels/elementwise.h"

#include "core/check.h"
#include "kernels/bf16_round.h"
#include "kernels/half.h"

namespace dtrain::ops {

template <typename T>
void AddCpu(T* out, const T* a, const T* b, int64_t n) {
  for (int64_t i = 0; i < n; ++i) out[i] = a[i] + b[i];
}

template void AddCpu<float>(float*, const float*, const float*, int64_t);
template void AddCpu<double>(double*, const double*, const double*, int64_t);

Status Add(DeviceContext& ctx, const Tensor& a, const Tensor& b, Tensor* out) {
  DT_CHECK_ARG(out != nullptr, "Add: out is null");
  DT_RETURN_IF_ERROR(detail::CheckSameShapeDtype(ctx, "Add", a, b, *out));
  const int64_t n = out->numel();
  if (ctx.is_cuda()) {
#if DT_HAVE_CUDA
    if (IsHalfFloat(out->dtype())) {
      const auto fn = out->dtype() == DType::kBF16 ? AddCudaBf16 : AddCudaF16;
      return fn(out->data<uint16_t>(), a.data<uint16_t>(), b.data<uint16_t>(), n, ctx.stream());
    }
    DT_CHECK_ARG(out->dtype() == DType::kF32, "Add: CUDA supports f32/bf16/f16, got " << out->ToString());
    return AddCuda(out->data<float>(), a.data<float>(), b.data<float>(), n, ctx.stream());
#else
    return Status::Unavailable("Add: CUDA tensor in a build without CUDA");
#endif
  }
  if (out->dtype() == DType::kF32) {
    AddCpu(out->data<float>(), a.data<float>(), b.data<float>(), n);
    return Status::OK();
  }
  DT_CHECK_ARG(out->dtype() == DType::kF64, "Add: CPU supports f32/f64, got " << out->ToString());
  AddCpu(out->data<double>(), a.data<double>(), b.data<double>(), n);
  return Status::OK();
}

Status Cast(DeviceContext& ctx, const Tensor& in, Tensor* out) {
  DT_CHECK_ARG(out != nullptr, "Cast: out is null");
  DT_CHECK_ARG(in.numel() == out->numel(), "Cast: numel differs: " << in.ToString() << " -> " << out->ToString());
  DT_CHECK_ARG(in.device() == ctx.type() && out->device() == ctx.type(),
               "Cast: " << in.ToString() << ", " << out->ToString() << " not all on " << DeviceName(ctx.type()));
  if (in.dtype() == out->dtype()) return out->CopyFrom(in, ctx.stream());
  const bool to_half = in.dtype() == DType::kF32 && IsHalfFloat(out->dtype());
  const bool from_half = IsHalfFloat(in.dtype()) && out->dtype() == DType::kF32;
  if (!ctx.is_cuda()) {  // the CPU reference: f32 <-> bf16 (kernels/bf16_round.h, the CUDA kernel's rounding)
    DT_CHECK_ARG((to_half || from_half) && (in.dtype() == DType::kBF16 || out->dtype() == DType::kBF16),
                 "Cast: " << in.ToString() << " -> " << out->ToString() << ": the CPU converts f32 <-> bf16");
    const int64_t n = in.numel();
    if (to_half) {
      for (int64_t i = 0; i < n; ++i) out->data<uint16_t>()[i] = RoundBf16Rne(in.data<float>()[i]);
    } else {
      for (int64_t i = 0; i < n; ++i) out->data<float>()[i] = Bf16BitsToF32(in.data<uint16_t>()[i]);
    }
    return Status::OK();
  }
  DT_CHECK_ARG(to_half || from_half,
               "Cast: " << in.ToString() << " -> " << out->ToString() << ": CUDA converts f32 <-> bf16/f16");
#if DT_HAVE_CUDA
  if (to_half) {
    const auto fn = out->dtype() == DType::kBF16 ? CastF32ToBf16Cuda : CastF32ToF16Cuda;
    return fn(out->data<uint16_t>(), in.data<float>(), in.numel(), ctx.stream());
  }
  const auto fn = in.dtype() == DType::kBF16 ? CastBf16ToF32Cuda : CastF16ToF32Cuda;
  return fn(out->data<float>(), in.data<uint16_t>(), in.numel(), ctx.stream());
#else
  return Status::Unavailable("Cast: CUDA tensor in a build without CUDA");
#endif
}

}  // namespace dtrain::ops

namespace dtrain::ops::detail {

Status CheckSameShapeDtype(const DeviceContext& ctx, const char* op, const Tensor& a, const Tensor& b,
                           const Tensor& out) {
  DT_CHECK_ARG(a.shape() == out.shape() && b.shape() == out.shape(),
               op << ": shapes do not match: " << a.ToString() << ", " << b.ToString() << " -> " << out.ToString());
  DT_CHECK_ARG(a.dtype() == out.dtype() && b.dtype() == out.dtype(),
               op << ": dtypes differ: " << a.ToString() << ", " << b.ToString() << " -> " << out.ToString());
  DT_CHECK_ARG(a.device() == ctx.type() && b.device() == ctx.type() && out.device() == ctx.type(),
               op << ": " << a.ToString() << ", " << b.ToString() << ", " << out.ToString() << " not all on "
                  << DeviceName(ctx.type()));
  return Status::OK();
}

namespace {

// `a` and `b` must match `out` in shape and dtype, all on the context's device with a supported dtype.
Status CheckSame(const DeviceContext& ctx, const char* op, const Tensor& a, const Tensor& b, const Tensor& out) {
  DT_RETURN_IF_ERROR(CheckSameShapeDtype(ctx, op, a, b, out));
  if (ctx.is_cuda()) {
    DT_CHECK_ARG(out.dtype() == DType::kF32, op << ": CUDA supports f32 only, got " << out.ToString());
  } else {
    DT_CHECK_ARG(out.dtype() == DType::kF32 || out.dtype() == DType::kF64,
                 op << ": CPU supports f32/f64, got " << out.ToString());
  }
  return Status::OK();
}

}  // namespace
Status RunUnary(DeviceContext& ctx, const UnaryOp& op, const Tensor& x, Tensor* y) {
  DT_CHECK_ARG(y != nullptr, op.name << ": output is null");
  DT_RETURN_IF_ERROR(CheckSame(ctx, op.name, x, x, *y));
  if (ctx.is_cuda()) {
    if (op.cuda_f32 == nullptr)
      return Status::Unavailable(std::string(op.name) + ": CUDA tensor in a build without CUDA");
    return op.cuda_f32(y->data<float>(), x.data<float>(), x.numel(), ctx.stream());
  }
  if (x.dtype() == DType::kF32) {
    op.cpu_f32(y->data<float>(), x.data<float>(), x.numel());
  } else {
    op.cpu_f64(y->data<double>(), x.data<double>(), x.numel());
  }
  return Status::OK();
}

Status RunBinary(DeviceContext& ctx, const BinaryOp& op, const Tensor& a, const Tensor& b, Tensor* out) {
  DT_CHECK_ARG(out != nullptr, op.name << ": output is null");
  DT_RETURN_IF_ERROR(CheckSame(ctx, op.name, a, b, *out));
  if (ctx.is_cuda()) {
    if (op.cuda_f32 == nullptr)
      return Status::Unavailable(std::string(op.name) + ": CUDA tensor in a build without CUDA");
    return op.cuda_f32(out->data<float>(), a.data<float>(), b.data<float>(), a.numel(), ctx.stream());
  }
  if (a.dtype() == DType::kF32) {
    op.cpu_f32(out->data<float>(), a.data<float>(), b.data<float>(), a.numel());
  } else {
    op.cpu_f64(out->data<double>(), a.data<double>(), b.data<double>(), a.numel());
  }
  return Status::OK();
}

}  // namespace dtrain::ops::detail
