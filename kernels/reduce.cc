#include "kernels/reduce.h"

#include "core/check.h"
#include "kernels/bf16_round.h"

namespace dtrain::ops {

// ---- CPU references --------------------------------------------------------------------------

template <typename T>
double SumSquaresCpu(const T* x, int64_t n) {
  double acc = 0.0;
  for (int64_t i = 0; i < n; ++i) {
    const double v = static_cast<double>(x[i]);
    acc += v * v;
  }
  return acc;
}

double SumSquaresCpuBf16(const uint16_t* x, int64_t n) {
  double acc = 0.0;
  for (int64_t i = 0; i < n; ++i) {
    const double v = static_cast<double>(Bf16BitsToF32(x[i]));
    acc += v * v;
  }
  return acc;
}

template <typename T>
void ScaleCpu(T* x, int64_t n, T s) {
  for (int64_t i = 0; i < n; ++i) x[i] *= s;
}

template double SumSquaresCpu<float>(const float*, int64_t);
template double SumSquaresCpu<double>(const double*, int64_t);
template void ScaleCpu<float>(float*, int64_t, float);
template void ScaleCpu<double>(double*, int64_t, double);

// ---- Tensor level ----------------------------------------------------------------------------

namespace {

Status CheckOnContext(const DeviceContext& ctx, const Tensor& t, const char* what) {
  DT_CHECK_ARG(t.defined() || t.numel() == 0, what << " is undefined");
  DT_CHECK_ARG(t.device() == ctx.type(),
               what << " " << t.ToString() << " is not on the context's device (" << DeviceName(ctx.type()) << ")");
  return Status::OK();
}

// SumSquares' out: x's dtype, f32 for a bf16 x.
Status EnsureScalarLike(DeviceContext& ctx, const Tensor& x, Tensor* out) {
  const DType dt = x.dtype() == DType::kBF16 ? DType::kF32 : x.dtype();
  if (!out->defined()) return Tensor::Empty({1}, dt, ctx.allocator(), out);
  DT_CHECK_ARG(out->numel() == 1 && out->dtype() == dt && out->device() == x.device(),
               "out " << out->ToString() << " must be a 1-element " << DTypeName(dt) << " tensor on "
                      << DeviceName(x.device()) << " (for x " << x.ToString() << ")");
  return Status::OK();
}

}  // namespace

Status SumSquares(DeviceContext& ctx, const Tensor& x, Tensor* out, bool accumulate) {
  DT_CHECK_ARG(out != nullptr, "out is null");
  DT_CHECK_ARG(!accumulate || out->defined(), "accumulating SumSquares needs a defined out");
  DT_RETURN_IF_ERROR(CheckOnContext(ctx, x, "x"));
  DT_RETURN_IF_ERROR(EnsureScalarLike(ctx, x, out));
  if (x.device() == DeviceType::kCPU) {
    switch (x.dtype()) {
      case DType::kF32: {
        float* o = out->data<float>();
        const double base = accumulate ? static_cast<double>(o[0]) : 0.0;
        o[0] = static_cast<float>(base + SumSquaresCpu(x.data<float>(), x.numel()));
        return Status::OK();
      }
      case DType::kF64: {
        double* o = out->data<double>();
        o[0] = (accumulate ? o[0] : 0.0) + SumSquaresCpu(x.data<double>(), x.numel());
        return Status::OK();
      }
      case DType::kBF16: {
        float* o = out->data<float>();
        const double base = accumulate ? static_cast<double>(o[0]) : 0.0;
        o[0] = static_cast<float>(base + SumSquaresCpuBf16(x.data<uint16_t>(), x.numel()));
        return Status::OK();
      }
      default:
        return Status::InvalidArgument("SumSquares: unsupported dtype " + std::string(DTypeName(x.dtype())));
    }
  }
#if DT_HAVE_CUDA
  DT_CHECK_ARG(x.dtype() == DType::kF32 || x.dtype() == DType::kBF16,
               "SumSquares on CUDA supports f32 and bf16, got " << x.ToString());
  // Freed when this returns: the caching allocator may reuse it only for later work on ctx.stream().
  Tensor workspace;
  DT_RETURN_IF_ERROR(Tensor::Empty({kSumSquaresWorkspaceElems}, DType::kF64, ctx.allocator(), &workspace));
  if (x.dtype() == DType::kBF16) {
    return SumSquaresCudaBf16(x.data<uint16_t>(), x.numel(), workspace.data<double>(), out->data<float>(), ctx.stream(),
                              accumulate);
  }
  return SumSquaresCuda(x.data<float>(), x.numel(), workspace.data<double>(), out->data<float>(), ctx.stream(),
                        accumulate);
#else
  return Status::Unavailable("SumSquares on a CUDA tensor, but dtrain was built without CUDA");
#endif
}

Status Scale(DeviceContext& ctx, Tensor* x, float s) {
  DT_CHECK_ARG(x != nullptr, "x is null");
  DT_RETURN_IF_ERROR(CheckOnContext(ctx, *x, "x"));
  if (x->device() == DeviceType::kCPU) {
    switch (x->dtype()) {
      case DType::kF32:
        ScaleCpu(x->data<float>(), x->numel(), s);
        return Status::OK();
      case DType::kF64:
        ScaleCpu(x->data<double>(), x->numel(), static_cast<double>(s));
        return Status::OK();
      default:
        return Status::InvalidArgument("Scale: unsupported dtype " + std::string(DTypeName(x->dtype())));
    }
  }
#if DT_HAVE_CUDA
  DT_CHECK_ARG(x->dtype() == DType::kF32, "Scale on CUDA supports f32 only, got " << x->ToString());
  return ScaleCuda(x->data<float>(), x->numel(), s, ctx.stream());
#else
  return Status::Unavailable("Scale on a CUDA tensor, but dtrain was built without CUDA");
#endif
}

}  // namespace dtrain::ops
