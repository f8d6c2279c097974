#include "kernels/layout.h"

#include <vector>

#include "core/check.h"

namespace dtrain::ops {

template <typename T>
void NchwToNhwcCpu(T* out, const T* in, int64_t n, int64_t c, int64_t h, int64_t w) {
  const int64_t hw = h * w;
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t p = 0; p < hw; ++p) {
      for (int64_t ch = 0; ch < c; ++ch) out[(i * hw + p) * c + ch] = in[(i * c + ch) * hw + p];
    }
  }
}

template <typename T>
void NhwcToNchwCpu(T* out, const T* in, int64_t n, int64_t c, int64_t h, int64_t w, bool accumulate) {
  const int64_t hw = h * w;
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t ch = 0; ch < c; ++ch) {
      for (int64_t p = 0; p < hw; ++p) {
        const T v = in[(i * hw + p) * c + ch];
        T& o = out[(i * c + ch) * hw + p];
        o = accumulate ? o + v : v;
      }
    }
  }
}

template void NchwToNhwcCpu<float>(float*, const float*, int64_t, int64_t, int64_t, int64_t);
template void NchwToNhwcCpu<double>(double*, const double*, int64_t, int64_t, int64_t, int64_t);
template void NhwcToNchwCpu<float>(float*, const float*, int64_t, int64_t, int64_t, int64_t, bool);
template void NhwcToNchwCpu<double>(double*, const double*, int64_t, int64_t, int64_t, int64_t, bool);

namespace {

// Checks that `out` is `in` permuted by `perm` (out.dim(i) == in.dim(perm[i])), both 4-D on ctx's device, with the
// dtypes the device supports: CPU f32/f64 equal, CUDA `cuda_in` -> `cuda_out`.
Status CheckLayoutArgs(const DeviceContext& ctx, const char* op, const Tensor& in, const Tensor* out,
                       const int (&perm)[4], DType cuda_in, DType cuda_out) {
  DT_CHECK_ARG(out != nullptr, op << ": out is null");
  DT_CHECK_ARG(in.ndim() == 4 && out->ndim() == 4,
               op << ": in " << in.ToString() << " and out " << out->ToString() << " must be 4-D");
  const std::vector<int64_t> want = {in.dim(perm[0]), in.dim(perm[1]), in.dim(perm[2]), in.dim(perm[3])};
  DT_CHECK_ARG(out->shape() == want, op << ": out " << out->ToString() << " should be [" << want[0] << "," << want[1]
                                        << "," << want[2] << "," << want[3] << "] for in " << in.ToString());
  DT_CHECK_ARG(in.device() == ctx.type() && out->device() == ctx.type(),
               op << ": " << in.ToString() << ", " << out->ToString() << " not all on " << DeviceName(ctx.type()));
  if (ctx.is_cuda()) {
    DT_CHECK_ARG(in.dtype() == cuda_in && out->dtype() == cuda_out, op << ": CUDA converts " << DTypeName(cuda_in)
                                                                       << " -> " << DTypeName(cuda_out) << ", got "
                                                                       << in.ToString() << " -> " << out->ToString());
  } else {
    DT_CHECK_ARG((in.dtype() == DType::kF32 || in.dtype() == DType::kF64) && out->dtype() == in.dtype(),
                 op << ": CPU supports f32/f64 with equal dtypes, got " << in.ToString() << " -> " << out->ToString());
  }
  return Status::OK();
}

}  // namespace

Status NchwToNhwc(DeviceContext& ctx, const Tensor& in, Tensor* out) {
  constexpr int kPerm[4] = {0, 2, 3, 1};  // out [N,H,W,C] from in [N,C,H,W]
  DT_RETURN_IF_ERROR(CheckLayoutArgs(ctx, "NchwToNhwc", in, out, kPerm, DType::kF32, DType::kBF16));
  const int64_t n = in.dim(0), c = in.dim(1), h = in.dim(2), w = in.dim(3);
  if (ctx.is_cuda()) {
#if DT_HAVE_CUDA
    return NchwToNhwcCudaF32ToBf16(out->data<uint16_t>(), in.data<float>(), n, c, h, w, ctx.stream());
#else
    return Status::Unavailable("NchwToNhwc: CUDA tensor in a build without CUDA");
#endif
  }
  if (in.dtype() == DType::kF32) {
    NchwToNhwcCpu(out->data<float>(), in.data<float>(), n, c, h, w);
  } else {
    NchwToNhwcCpu(out->data<double>(), in.data<double>(), n, c, h, w);
  }
  return Status::OK();
}

Status NhwcToNchw(DeviceContext& ctx, const Tensor& in, Tensor* out, bool accumulate) {
  constexpr int kPerm[4] = {0, 3, 1, 2};  // out [N,C,H,W] from in [N,H,W,C]
  DT_RETURN_IF_ERROR(CheckLayoutArgs(ctx, "NhwcToNchw", in, out, kPerm, DType::kBF16, DType::kF32));
  const int64_t n = out->dim(0), c = out->dim(1), h = out->dim(2), w = out->dim(3);
  if (ctx.is_cuda()) {
#if DT_HAVE_CUDA
    return NhwcToNchwCudaBf16ToF32(out->data<float>(), in.data<uint16_t>(), n, c, h, w, accumulate, ctx.stream());
#else
    return Status::Unavailable("NhwcToNchw: CUDA tensor in a build without CUDA");
#endif
  }
  if (in.dtype() == DType::kF32) {
    NhwcToNchwCpu(out->data<float>(), in.data<float>(), n, c, h, w, accumulate);
  } else {
    NhwcToNchwCpu(out->data<double>(), in.data<double>(), n, c, h, w, accumulate);
  }
  return Status::OK();
}

}  // namespace dtrain::ops
