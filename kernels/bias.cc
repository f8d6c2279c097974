#include "kernels/bias.h"

#include <vector>

#include "core/check.h"
#include "kernels/half.h"

namespace dtrain::ops {

template <typename T>
void BiasAddCpu(T* y, const T* bias, int64_t m, int64_t n) {
  for (int64_t i = 0; i < m; ++i) {
    T* row = y + i * n;
    for (int64_t j = 0; j < n; ++j) row[j] += bias[j];
  }
}

template <typename T>
void BiasGradCpu(T* dbias, const T* dy, int64_t m, int64_t n, bool accumulate) {
  // Row-wise accumulation keeps the reads contiguous; the sums start from zero so that `accumulate`
  // adds exactly one rounded total to dbias (like the GPU kernel).
  std::vector<T> sum(static_cast<size_t>(n), T(0));
  for (int64_t i = 0; i < m; ++i) {
    const T* row = dy + i * n;
    for (int64_t j = 0; j < n; ++j) sum[j] += row[j];
  }
  for (int64_t j = 0; j < n; ++j) dbias[j] = accumulate ? dbias[j] + sum[j] : sum[j];
}

template void BiasAddCpu<float>(float*, const float*, int64_t, int64_t);
template void BiasAddCpu<double>(double*, const double*, int64_t, int64_t);
template void BiasGradCpu<float>(float*, const float*, int64_t, int64_t, bool);
template void BiasGradCpu<double>(double*, const double*, int64_t, int64_t, bool);

namespace {

// Shared checks: mat is 2-D [M,N], vec is [N], both on the context's device, in a supported dtype pair: equal
// f32/f64 on the CPU; f32/f32 on CUDA, or a bf16/f16 mat with an f32 vec (or one of its own dtype when
// half_vec_ok).
Status CheckBiasArgs(const DeviceContext& ctx, const char* op, const Tensor& mat, const Tensor& vec, bool half_vec_ok) {
  DT_CHECK_ARG(mat.ndim() == 2 && vec.ndim() == 1 && vec.dim(0) == mat.dim(1),
               op << ": shapes do not match: matrix " << mat.ToString() << " needs bias ["
                  << (mat.ndim() == 2 ? mat.dim(1) : -1) << "], got " << vec.ToString());
  DT_CHECK_ARG(mat.device() == ctx.type() && vec.device() == ctx.type(),
               op << ": " << mat.ToString() << ", " << vec.ToString() << " not all on " << DeviceName(ctx.type()));
  if (ctx.is_cuda()) {
    const bool ok =
        (mat.dtype() == DType::kF32 && vec.dtype() == DType::kF32) ||
        (IsHalfFloat(mat.dtype()) && (vec.dtype() == DType::kF32 || (half_vec_ok && vec.dtype() == mat.dtype())));
    DT_CHECK_ARG(ok, op << ": CUDA supports f32, or bf16/f16 activations with an f32 bias, got " << mat.ToString()
                        << " and " << vec.ToString());
  } else {
    DT_CHECK_ARG(mat.dtype() == vec.dtype(), op << ": dtypes differ: " << mat.ToString() << " vs " << vec.ToString());
    DT_CHECK_ARG(mat.dtype() == DType::kF32 || mat.dtype() == DType::kF64,
                 op << ": CPU supports f32/f64, got " << mat.ToString());
  }
  return Status::OK();
}

}  // namespace

Status BiasAdd(DeviceContext& ctx, const Tensor& bias, Tensor* y) {
  DT_CHECK_ARG(y != nullptr, "BiasAdd: y is null");
  DT_RETURN_IF_ERROR(CheckBiasArgs(ctx, "BiasAdd", *y, bias, /*half_vec_ok=*/true));
  const int64_t m = y->dim(0), n = y->dim(1);
  if (ctx.is_cuda()) {
#if DT_HAVE_CUDA
    if (y->dtype() == DType::kBF16) {
      return bias.dtype() == DType::kBF16
                 ? BiasAddCudaBf16(y->data<uint16_t>(), bias.data<uint16_t>(), m, n, ctx.stream())
                 : BiasAddCudaBf16(y->data<uint16_t>(), bias.data<float>(), m, n, ctx.stream());
    }
    if (y->dtype() == DType::kF16) {
      return bias.dtype() == DType::kF16
                 ? BiasAddCudaF16(y->data<uint16_t>(), bias.data<uint16_t>(), m, n, ctx.stream())
                 : BiasAddCudaF16(y->data<uint16_t>(), bias.data<float>(), m, n, ctx.stream());
    }
    return BiasAddCuda(y->data<float>(), bias.data<float>(), m, n, ctx.stream());
#else
    return Status::Unavailable("BiasAdd: CUDA tensor in a build without CUDA");
#endif
  }
  if (y->dtype() == DType::kF32) {
    BiasAddCpu(y->data<float>(), bias.data<float>(), m, n);
  } else {
    BiasAddCpu(y->data<double>(), bias.data<double>(), m, n);
  }
  return Status::OK();
}

Status BiasGrad(DeviceContext& ctx, const Tensor& dy, Tensor* dbias, bool accumulate) {
  DT_CHECK_ARG(dbias != nullptr, "BiasGrad: dbias is null");
  DT_RETURN_IF_ERROR(CheckBiasArgs(ctx, "BiasGrad", dy, *dbias, /*half_vec_ok=*/false));
  const int64_t m = dy.dim(0), n = dy.dim(1);
  if (ctx.is_cuda()) {
#if DT_HAVE_CUDA
    // Scratch from the caching allocator: stream-ordered, so it may be reused as soon as this returns.
    Tensor scratch;
    DT_RETURN_IF_ERROR(Tensor::Empty({BiasGradScratchFloats(m, n)}, DType::kF32, ctx.allocator(), &scratch));
    if (IsHalfFloat(dy.dtype())) {
      const auto fn = dy.dtype() == DType::kBF16 ? BiasGradCudaBf16 : BiasGradCudaF16;
      return fn(dbias->data<float>(), dy.data<uint16_t>(), m, n, accumulate, scratch.data<float>(), ctx.stream());
    }
    return BiasGradCuda(dbias->data<float>(), dy.data<float>(), m, n, accumulate, scratch.data<float>(), ctx.stream());
#else
    return Status::Unavailable("BiasGrad: CUDA tensor in a build without CUDA");
#endif
  }
  if (dy.dtype() == DType::kF32) {
    BiasGradCpu(dbias->data<float>(), dy.data<float>(), m, n, accumulate);
  } else {
    BiasGradCpu(dbias->data<double>(), dy.data<double>(), m, n, accumulate);
  }
  return Status::OK();
}

}  // namespace dtrain::ops
