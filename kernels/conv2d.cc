#include "kernels/conv2d.h"

#include <string>
#include <vector>

#include "core/check.h"
#include "kernels/matmul.h"

namespace dtrain::ops {

namespace detail {
#if DT_HAVE_CUDA
int64_t CudnnConvPlanCount(const CudnnConvPlans* plans);  // conv2d.cu
int64_t FeConvGeometryCount(const FeConvPlans* plans);    // conv2d_fe.cc
#endif
}  // namespace detail

namespace {

// col[(c*R + r)*S + s, oy*OW + ox] = x[c, oy*stride - pad + r, ox*stride - pad + s] (0 outside the image), for
// one image x [C,H,W].
template <typename T>
void Im2Col(T* col, const T* x, const Conv2dGeometry& g) {
  const int64_t oh = g.out_h(), ow = g.out_w();
  for (int64_t c = 0; c < g.c; ++c) {
    for (int64_t r = 0; r < g.r; ++r) {
      for (int64_t s = 0; s < g.s; ++s) {
        T* row = col + ((c * g.r + r) * g.s + s) * oh * ow;
        for (int64_t oy = 0; oy < oh; ++oy) {
          const int64_t iy = oy * g.stride - g.pad + r;
          for (int64_t ox = 0; ox < ow; ++ox) {
            const int64_t ix = ox * g.stride - g.pad + s;
            const bool inside = iy >= 0 && iy < g.h && ix >= 0 && ix < g.w;
            row[oy * ow + ox] = inside ? x[(c * g.h + iy) * g.w + ix] : T(0);
          }
        }
      }
    }
  }
}

// The adjoint of Im2Col: x[c, iy, ix] += every col entry that was read from it.
template <typename T>
void Col2ImAdd(T* x, const T* col, const Conv2dGeometry& g) {
  const int64_t oh = g.out_h(), ow = g.out_w();
  for (int64_t c = 0; c < g.c; ++c) {
    for (int64_t r = 0; r < g.r; ++r) {
      for (int64_t s = 0; s < g.s; ++s) {
        const T* row = col + ((c * g.r + r) * g.s + s) * oh * ow;
        for (int64_t oy = 0; oy < oh; ++oy) {
          const int64_t iy = oy * g.stride - g.pad + r;
          if (iy < 0 || iy >= g.h) continue;
          for (int64_t ox = 0; ox < ow; ++ox) {
            const int64_t ix = ox * g.stride - g.pad + s;
            if (ix >= 0 && ix < g.w) x[(c * g.h + iy) * g.w + ix] += row[oy * ow + ox];
          }
        }
      }
    }
  }
}

}  // namespace

template <typename T>
void Conv2dForwardCpu(T* y, const T* x, const T* w, const Conv2dGeometry& g, bool accumulate) {
  const int64_t crs = g.c * g.r * g.s, ohw = g.out_h() * g.out_w();
  std::vector<T> col(static_cast<size_t>(crs * ohw));
  for (int64_t n = 0; n < g.n; ++n) {
    Im2Col(col.data(), x + n * g.c * g.h * g.w, g);
    // y_n [K, OH*OW] = W [K, CRS] @ col [CRS, OH*OW]
    MatmulCpu<T>(y + n * g.k * ohw, w, false, col.data(), false, g.k, ohw, crs, T(1), accumulate ? T(1) : T(0));
  }
}

template <typename T>
void Conv2dBackwardDataCpu(T* dx, const T* dy, const T* w, const Conv2dGeometry& g, bool accumulate) {
  const int64_t crs = g.c * g.r * g.s, ohw = g.out_h() * g.out_w(), chw = g.c * g.h * g.w;
  if (!accumulate) {
    for (int64_t i = 0; i < g.n * chw; ++i) dx[i] = T(0);
  }
  std::vector<T> dcol(static_cast<size_t>(crs * ohw));
  for (int64_t n = 0; n < g.n; ++n) {
    // dcol [CRS, OH*OW] = W^T @ dy_n [K, OH*OW]
    MatmulCpu<T>(dcol.data(), w, true, dy + n * g.k * ohw, false, crs, ohw, g.k, T(1), T(0));
    Col2ImAdd(dx + n * chw, dcol.data(), g);
  }
}

template <typename T>
void Conv2dBackwardFilterCpu(T* dw, const T* x, const T* dy, const Conv2dGeometry& g, bool accumulate) {
  const int64_t crs = g.c * g.r * g.s, ohw = g.out_h() * g.out_w();
  std::vector<T> col(static_cast<size_t>(crs * ohw));
  for (int64_t n = 0; n < g.n; ++n) {
    Im2Col(col.data(), x + n * g.c * g.h * g.w, g);
    // dW [K, CRS] (+)= dy_n [K, OH*OW] @ col^T
    const bool add = accumulate || n > 0;
    MatmulCpu<T>(dw, dy + n * g.k * ohw, false, col.data(), true, g.k, crs, ohw, T(1), add ? T(1) : T(0));
  }
  if (g.n == 0 && !accumulate) {
    for (int64_t i = 0; i < g.k * crs; ++i) dw[i] = T(0);
  }
}

#define DT_INSTANTIATE_CONV2D(T)                                                               \
  template void Conv2dForwardCpu<T>(T*, const T*, const T*, const Conv2dGeometry&, bool);      \
  template void Conv2dBackwardDataCpu<T>(T*, const T*, const T*, const Conv2dGeometry&, bool); \
  template void Conv2dBackwardFilterCpu<T>(T*, const T*, const T*, const Conv2dGeometry&, bool);
DT_INSTANTIATE_CONV2D(float)
DT_INSTANTIATE_CONV2D(double)
#undef DT_INSTANTIATE_CONV2D

// ---- Conv2dCache -----------------------------------------------------------------------------------------------

Conv2dCache::Conv2dCache(Allocator* alloc) : alloc_(alloc) {}
Conv2dCache::~Conv2dCache() = default;

int64_t Conv2dCache::num_plans() const {
#if DT_HAVE_CUDA
  return (plans_ ? detail::CudnnConvPlanCount(plans_.get()) : 0) +
         (fe_plans_ ? detail::FeConvGeometryCount(fe_plans_.get()) : 0);
#else
  return 0;
#endif
}

// ---- Tensor entry points ---------------------------------------------------------------------------------------

namespace {

enum class Dir { kForward, kBackwardData, kBackwardFilter };

// "[2,4,5,5]"
std::string Dims(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i > 0 ? "," : "") + std::to_string(shape[i]);
  return s + "]";
}

// Checks x, w, y (whichever of them is the output) and fills `g`. f32/f64 are NCHW: x [N,C,H,W], w [K,C,R,S],
// y [N,K,OH,OW]; bf16 is NHWC: x [N,H,W,C], w [K,R,S,C], y [N,OH,OW,K].
Status CheckConvArgs(const DeviceContext& ctx, const char* op, const Tensor& x, const Tensor& w, const Tensor& y,
                     int64_t stride, int64_t pad, Conv2dGeometry* g) {
  DT_CHECK_ARG(x.ndim() == 4 && w.ndim() == 4 && y.ndim() == 4,
               op << ": x " << x.ToString() << ", w " << w.ToString() << ", y " << y.ToString() << " must be 4-D");
  DT_CHECK_ARG(stride >= 1 && pad >= 0, op << ": stride " << stride << " must be >= 1 and pad " << pad << " >= 0");
  // The dtype picks the layout, so it is checked before the shapes are read.
  DT_CHECK_ARG(x.dtype() == w.dtype() && y.dtype() == w.dtype(),
               op << ": dtypes differ: " << x.ToString() << ", " << w.ToString() << ", " << y.ToString());
  const bool nhwc = x.dtype() == DType::kBF16;
  const char* layout = nhwc ? " (bf16 is NHWC: x [N,H,W,C], w [K,R,S,C], y [N,OH,OW,K])" : "";
  if (nhwc) {
    *g = Conv2dGeometry{x.dim(0), x.dim(3), x.dim(1), x.dim(2), w.dim(0), w.dim(1), w.dim(2), stride, pad};
  } else {
    *g = Conv2dGeometry{x.dim(0), x.dim(1), x.dim(2), x.dim(3), w.dim(0), w.dim(2), w.dim(3), stride, pad};
  }
  const int64_t w_c = nhwc ? w.dim(3) : w.dim(1);
  DT_CHECK_ARG(
      w_c == g->c && g->h + 2 * pad >= g->r && g->w + 2 * pad >= g->s,
      op << ": filter " << w.ToString() << " does not fit input " << x.ToString() << " with pad " << pad << layout);
  const std::vector<int64_t> y_shape = nhwc ? std::vector<int64_t>{g->n, g->out_h(), g->out_w(), g->k}
                                            : std::vector<int64_t>{g->n, g->k, g->out_h(), g->out_w()};
  DT_CHECK_ARG(y.shape() == y_shape, op << ": output " << y.ToString() << " should be " << Dims(y_shape) << " for x "
                                        << x.ToString() << ", w " << w.ToString() << ", stride " << stride << ", pad "
                                        << pad << layout);
  DT_CHECK_ARG(x.device() == ctx.type() && w.device() == ctx.type() && y.device() == ctx.type(),
               op << ": " << x.ToString() << ", " << w.ToString() << ", " << y.ToString() << " not all on "
                  << DeviceName(ctx.type()));
  if (ctx.is_cuda()) {
    DT_CHECK_ARG(x.dtype() == DType::kF32 || x.dtype() == DType::kBF16,
                 op << ": CUDA supports f32 (NCHW) and bf16 (NHWC), got " << x.ToString());
  } else {
    DT_CHECK_ARG(x.dtype() == DType::kF32 || x.dtype() == DType::kF64,
                 op << ": CPU supports f32/f64, got " << x.ToString());
  }
  return Status::OK();
}

template <typename T>
void RunCpu(Dir dir, const Tensor& x, const Tensor& w, const Tensor& y, const Conv2dGeometry& g, bool accumulate) {
  switch (dir) {
    case Dir::kForward:
      return Conv2dForwardCpu(y.data<T>(), x.data<T>(), w.data<T>(), g, accumulate);
    case Dir::kBackwardData:
      return Conv2dBackwardDataCpu(x.data<T>(), y.data<T>(), w.data<T>(), g, accumulate);
    case Dir::kBackwardFilter:
      return Conv2dBackwardFilterCpu(w.data<T>(), x.data<T>(), y.data<T>(), g, accumulate);
  }
}

// x, w, y play their forward roles; the output is y (forward), x (backward data) or w (backward filter).
Status Run(DeviceContext& ctx, Conv2dCache* cache, Dir dir, const char* op, const Tensor& x, const Tensor& w,
           const Tensor& y, int64_t stride, int64_t pad, bool accumulate) {
  Conv2dGeometry g;
  DT_RETURN_IF_ERROR(CheckConvArgs(ctx, op, x, w, y, stride, pad, &g));
  if (!ctx.is_cuda()) {
    if (x.dtype() == DType::kF32) {
      RunCpu<float>(dir, x, w, y, g, accumulate);
    } else {
      RunCpu<double>(dir, x, w, y, g, accumulate);
    }
    return Status::OK();
  }
#if DT_HAVE_CUDA
  DT_CHECK_ARG(cache != nullptr && ctx.cudnn() != nullptr, op << ": a CUDA context needs a Conv2dCache and cuDNN");
  if (x.dtype() == DType::kBF16) {
    switch (dir) {
      case Dir::kForward:
        return Conv2dForwardCudaBf16(*ctx.cudnn(), cache, y.data<uint16_t>(), x.data<uint16_t>(), w.data<uint16_t>(), g,
                                     accumulate);
      case Dir::kBackwardData:
        return Conv2dBackwardDataCudaBf16(*ctx.cudnn(), cache, x.data<uint16_t>(), y.data<uint16_t>(),
                                          w.data<uint16_t>(), g, accumulate);
      case Dir::kBackwardFilter:
        return Conv2dBackwardFilterCudaBf16(*ctx.cudnn(), cache, w.data<uint16_t>(), x.data<uint16_t>(),
                                            y.data<uint16_t>(), g, accumulate);
    }
    return Status::Internal("unreachable");
  }
  switch (dir) {
    case Dir::kForward:
      return Conv2dForwardCuda(*ctx.cudnn(), cache, y.data<float>(), x.data<float>(), w.data<float>(), g, accumulate);
    case Dir::kBackwardData:
      return Conv2dBackwardDataCuda(*ctx.cudnn(), cache, x.data<float>(), y.data<float>(), w.data<float>(), g,
                                    accumulate);
    case Dir::kBackwardFilter:
      return Conv2dBackwardFilterCuda(*ctx.cudnn(), cache, w.data<float>(), x.data<float>(), y.data<float>(), g,
                                      accumulate);
  }
  return Status::Internal("unreachable");
#else
  return Status::Unavailable(std::string(op) + ": CUDA tensor in a build without CUDA");
#endif
}

}  // namespace

Status Conv2dForward(DeviceContext& ctx, Conv2dCache* cache, const Tensor& x, const Tensor& w, int64_t stride,
                     int64_t pad, Tensor* y, bool accumulate) {
  DT_CHECK_ARG(y != nullptr, "Conv2dForward: y is null");
  return Run(ctx, cache, Dir::kForward, "Conv2dForward", x, w, *y, stride, pad, accumulate);
}

Status Conv2dBackwardData(DeviceContext& ctx, Conv2dCache* cache, const Tensor& dy, const Tensor& w, int64_t stride,
                          int64_t pad, Tensor* dx, bool accumulate) {
  DT_CHECK_ARG(dx != nullptr, "Conv2dBackwardData: dx is null");
  return Run(ctx, cache, Dir::kBackwardData, "Conv2dBackwardData", *dx, w, dy, stride, pad, accumulate);
}

Status Conv2dBackwardFilter(DeviceContext& ctx, Conv2dCache* cache, const Tensor& x, const Tensor& dy, int64_t stride,
                            int64_t pad, Tensor* dw, bool accumulate) {
  DT_CHECK_ARG(dw != nullptr, "Conv2dBackwardFilter: dw is null");
  return Run(ctx, cache, Dir::kBackwardFilter, "Conv2dBackwardFilter", x, *dw, dy, stride, pad, accumulate);
}

}  // namespace dtrain::ops
