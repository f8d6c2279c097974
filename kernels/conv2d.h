#pragma once
// Conv2d: 2-D cross-correlation, like PyTorch nn.Conv2d with bias=False, dilation 1, groups 1.
//
//   y[n,k,oy,ox] = sum_{c,r,s} w[k,c,r,s] * x[n, c, oy*stride - pad + r, ox*stride - pad + s]   (zero padding)
//   OH = (H + 2*pad - R) / stride + 1, OW likewise
//
// Two layouts, chosen by the dtype:
//   - f32 / f64: NCHW.           x [N,C,H,W], w [K,C,R,S], y [N,K,OH,OW]
//   - bf16 (CUDA only): NHWC.    x [N,H,W,C], w [K,R,S,C], y [N,OH,OW,K]   (channels last, for tensor cores)
// dx has x's shape and dw has w's in both. The index formula above holds in both; only the memory order differs.
//
// Backward data computes dx = d(sum dy*y)/dx, backward filter dw = d(sum dy*y)/dw. Bias is not part of the op
// (the CNN's convolutions feed batch norm, whose beta is the bias).
//
// Three layers, like every op in kernels:
//   - Conv2d*Cpu<T> (T = float or double, NCHW): the reference. Per image: im2col into a [C*R*S, OH*OW] scratch
//     matrix, then MatmulCpu (forward: W @ col; filter: dy @ col^T; data: W^T @ dy, then col2im).
//   - Conv2d*Cuda (f32 NCHW): cuDNN's legacy convolution API on the handle's stream (ctx.cudnn(), bound to
//     ctx.stream()), with CUDNN_FMA_MATH (no TF32: results agree with the CPU to fp32 rounding). Algorithms come
//     from the cudnnGet*Algorithm_v7 heuristics, chosen once per geometry and cached in a Conv2dCache; backward data
//     and backward filter take only algorithms cuDNN reports as CUDNN_DETERMINISTIC (every forward algorithm is).
//   - Conv2d*CudaBf16 (bf16 NHWC): cuDNN's graph API through the vendored cudnn-frontend (kernels/conv2d_fe.h:
//     on an H200 its engines run the CNN's bf16 convolutions 3-3.5x faster than the legacy API's), fp32 compute,
//     tensor cores; heuristics mode A, deterministic engines only, one plan per (geometry, direction) cached in the
//     Conv2dCache. The result is the fp32 sum rounded once to bf16; with `accumulate` it is computed into a scratch
//     buffer and then added to the old output in fp32 (rounded once more).
//   Both are bitwise reproducible on one GPU. All plans of a cache share its ONE workspace, grown as needed from
//   the allocator (the caching allocator: no cudaMalloc once every geometry has been seen).
//   - Conv2dForward / Conv2dBackwardData / Conv2dBackwardFilter: the Tensor entry points; they check shapes (in
//     the dtype's layout), dtypes and devices (InvalidArgument naming the shapes) and dispatch CPU f32/f64 -> *Cpu,
//     CUDA f32 -> *Cuda, CUDA bf16 -> *CudaBf16.
// `accumulate` adds the result to the output (weight gradients across micro-steps, a residual skip into dx);
// otherwise the output is overwritten and never read (it may hold NaN on entry). Outputs must not alias inputs.

#include <cstdint>
#include <memory>

#include "core/allocator.h"
#include "core/cuda_fwd.h"
#include "core/device_context.h"
#include "core/status.h"
#include "core/tensor.h"

namespace dtrain::ops {

// The sizes of a convolution, whatever the layout: N images of C channels of H x W pixels, K filters of R x S.
struct Conv2dGeometry {
  int64_t n = 0, c = 0, h = 0, w = 0;  // input: N, C, H, W
  int64_t k = 0, r = 0, s = 0;         // filter: K, R, S (and C)
  int64_t stride = 1, pad = 0;
  int64_t out_h() const { return (h + 2 * pad - r) / stride + 1; }
  int64_t out_w() const { return (w + 2 * pad - s) / stride + 1; }
};

// ---- CPU references ------------------------------------------------------------------------------------------
template <typename T>
void Conv2dForwardCpu(T* y, const T* x, const T* w, const Conv2dGeometry& g, bool accumulate);
template <typename T>
void Conv2dBackwardDataCpu(T* dx, const T* dy, const T* w, const Conv2dGeometry& g, bool accumulate);
template <typename T>
void Conv2dBackwardFilterCpu(T* dw, const T* x, const T* dy, const Conv2dGeometry& g, bool accumulate);

// ---- cuDNN state ---------------------------------------------------------------------------------------------
namespace detail {
struct CudnnConvPlans;  // descriptors and chosen algorithms per geometry (conv2d.cu)
struct FeConvPlans;     // bf16 graph-API plans per geometry (conv2d_fe.cc)
}  // namespace detail

// Per-model cuDNN state of Conv2d: the algorithm cache (one entry per geometry and dtype: a training batch and an
// eval batch give two entries per layer shape) and the shared workspace. Owned by the model that runs the convs;
// used only on its context's compute stream (stream order keeps the shared workspace safe). Not thread-safe.
// On a CPU context it holds nothing. Destroy it before the DeviceContext.
class Conv2dCache {
 public:
  // `alloc`: where the workspace comes from (ctx.allocator()); must outlive the cache.
  explicit Conv2dCache(Allocator* alloc);
  ~Conv2dCache();
  Conv2dCache(const Conv2dCache&) = delete;
  Conv2dCache& operator=(const Conv2dCache&) = delete;

  int64_t num_plans() const;                            // (geometry, dtype) pairs seen so far
  size_t workspace_bytes() const { return ws_bytes_; }  // current workspace size

 private:
  friend struct CudnnConvAccess;  // conv2d.cu
  Allocator* alloc_;
  std::unique_ptr<detail::CudnnConvPlans, void (*)(detail::CudnnConvPlans*)> plans_{nullptr, nullptr};
  std::unique_ptr<detail::FeConvPlans, void (*)(detail::FeConvPlans*)> fe_plans_{nullptr, nullptr};
  Tensor workspace_;  // u8, grown (never shrunk) to the largest workspace any cached algorithm needs
  size_t ws_bytes_ = 0;
};

// ---- CUDA launchers (CUDA builds only). Work is queued on the stream `cudnn` is bound to. ---------------------
// f32, NCHW: x [N,C,H,W], w [K,C,R,S], y [N,K,OH,OW].
Status Conv2dForwardCuda(const CudnnHandle& cudnn, Conv2dCache* cache, float* y, const float* x, const float* w,
                         const Conv2dGeometry& g, bool accumulate);
Status Conv2dBackwardDataCuda(const CudnnHandle& cudnn, Conv2dCache* cache, float* dx, const float* dy, const float* w,
                              const Conv2dGeometry& g, bool accumulate);
Status Conv2dBackwardFilterCuda(const CudnnHandle& cudnn, Conv2dCache* cache, float* dw, const float* x,
                                const float* dy, const Conv2dGeometry& g, bool accumulate);
// bf16 (raw bits), NHWC: x [N,H,W,C], w [K,R,S,C], y [N,OH,OW,K].
Status Conv2dForwardCudaBf16(const CudnnHandle& cudnn, Conv2dCache* cache, uint16_t* y, const uint16_t* x,
                             const uint16_t* w, const Conv2dGeometry& g, bool accumulate);
Status Conv2dBackwardDataCudaBf16(const CudnnHandle& cudnn, Conv2dCache* cache, uint16_t* dx, const uint16_t* dy,
                                  const uint16_t* w, const Conv2dGeometry& g, bool accumulate);
Status Conv2dBackwardFilterCudaBf16(const CudnnHandle& cudnn, Conv2dCache* cache, uint16_t* dw, const uint16_t* x,
                                    const uint16_t* dy, const Conv2dGeometry& g, bool accumulate);

// ---- Tensor entry points -------------------------------------------------------------------------------------
// Shapes below are f32/f64 (NCHW); bf16 takes the NHWC ones of the header comment. `cache` is required on a CUDA
// context, ignored on the CPU.
// x [N,C,H,W], w [K,C,R,S], y [N,K,OH,OW].
Status Conv2dForward(DeviceContext& ctx, Conv2dCache* cache, const Tensor& x, const Tensor& w, int64_t stride,
                     int64_t pad, Tensor* y, bool accumulate = false);
// dy [N,K,OH,OW], w [K,C,R,S], dx [N,C,H,W].
Status Conv2dBackwardData(DeviceContext& ctx, Conv2dCache* cache, const Tensor& dy, const Tensor& w, int64_t stride,
                          int64_t pad, Tensor* dx, bool accumulate = false);
// x [N,C,H,W], dy [N,K,OH,OW], dw [K,C,R,S].
Status Conv2dBackwardFilter(DeviceContext& ctx, Conv2dCache* cache, const Tensor& x, const Tensor& dy, int64_t stride,
                            int64_t pad, Tensor* dw, bool accumulate = false);

}  // namespace dtrain::ops
