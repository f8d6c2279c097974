// cuDNN side of Conv2d: descriptors and algorithms per geometry (the plan cache) and the shared workspace.
// Host code only (no kernels): cuDNN launches its own.
#include <algorithm>
#include <array>
#include <climits>
#include <map>
#include <memory>

#include "core/cuda_handles.h"
#include "core/cuda_lib_check.h"
#include "core/logging.h"
#include "core/nvtx.h"
#include "kernels/conv2d.h"
#include "kernels/conv2d_fe.h"
#include "kernels/elementwise.h"

namespace dtrain::ops {

namespace detail {

// Descriptors of one geometry and the algorithm (with its workspace size) chosen for each direction.
struct ConvPlan {
  ConvPlan() = default;
  ~ConvPlan() {
    if (x != nullptr) cudnnDestroyTensorDescriptor(x);
    if (y != nullptr) cudnnDestroyTensorDescriptor(y);
    if (w != nullptr) cudnnDestroyFilterDescriptor(w);
    if (conv != nullptr) cudnnDestroyConvolutionDescriptor(conv);
  }
  ConvPlan(const ConvPlan&) = delete;
  ConvPlan& operator=(const ConvPlan&) = delete;

  cudnnTensorDescriptor_t x = nullptr, y = nullptr;
  cudnnFilterDescriptor_t w = nullptr;
  cudnnConvolutionDescriptor_t conv = nullptr;
  cudnnConvolutionFwdAlgo_t fwd{};
  cudnnConvolutionBwdDataAlgo_t bwd_data{};
  cudnnConvolutionBwdFilterAlgo_t bwd_filter{};
  size_t fwd_ws = 0, bwd_data_ws = 0, bwd_filter_ws = 0;
};

using ConvKey = std::array<int64_t, 9>;  // n, c, h, w, k, r, s, stride, pad

struct CudnnConvPlans {
  std::map<ConvKey, std::unique_ptr<ConvPlan>> plans;
};

int64_t CudnnConvPlanCount(const CudnnConvPlans* plans) { return static_cast<int64_t>(plans->plans.size()); }

}  // namespace detail

namespace {

using detail::ConvPlan;

void DestroyPlans(detail::CudnnConvPlans* p) { std::default_delete<detail::CudnnConvPlans>()(p); }

// The heuristics' best algorithm that ran (SUCCESS), preferring exact fp32 (FMA) math and, when asked,
// only deterministic algorithms; nullptr when none qualifies.
template <typename Perf>
const Perf* Pick(const Perf* perf, int count, bool deterministic) {
  for (int pass = 0; pass < 2; ++pass) {
    for (int i = 0; i < count; ++i) {
      if (perf[i].status != CUDNN_STATUS_SUCCESS) continue;
      if (deterministic && perf[i].determinism != CUDNN_DETERMINISTIC) continue;
      if (pass == 0 && perf[i].mathType != CUDNN_FMA_MATH) continue;
      return &perf[i];
    }
  }
  return nullptr;
}

// Deterministic if cuDNN offers one; otherwise the fastest that runs, with a warning (reproducibility lost).
template <typename Perf>
Status Choose(const Perf* perf, int count, const char* dir, const Perf** out) {
  *out = Pick(perf, count, /*deterministic=*/true);
  if (*out == nullptr) {
    *out = Pick(perf, count, /*deterministic=*/false);
    if (*out != nullptr)
      DT_LOG_WARN(kModel, "conv2d {}: no deterministic cuDNN algorithm, using {}", dir, static_cast<int>((*out)->algo));
  }
  if (*out == nullptr) return Status::Internal(std::string("conv2d ") + dir + ": cuDNN offers no usable algorithm");
  return Status::OK();
}

Status BuildPlan(cudnnHandle_t h, const Conv2dGeometry& g, ConvPlan* p) {
  for (int64_t v : {g.n, g.c, g.h, g.w, g.k, g.r, g.s, g.stride, g.pad}) {
    DT_CHECK_ARG(v <= INT_MAX, "conv2d: dimension " << v << " exceeds cuDNN's int range");
  }
  DT_CHECK_ARG(g.n * g.c * g.h * g.w <= INT_MAX && g.n * g.k * g.out_h() * g.out_w() <= INT_MAX,
               "conv2d: tensors of more than 2^31 elements are not supported by cuDNN's 4-D descriptors");
  const auto i = [](int64_t v) { return static_cast<int>(v); };
  DT_CUDNN_CHECK(cudnnCreateTensorDescriptor(&p->x));
  DT_CUDNN_CHECK(cudnnCreateTensorDescriptor(&p->y));
  DT_CUDNN_CHECK(cudnnCreateFilterDescriptor(&p->w));
  DT_CUDNN_CHECK(cudnnCreateConvolutionDescriptor(&p->conv));
  DT_CUDNN_CHECK(cudnnSetTensor4dDescriptor(p->x, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, i(g.n), i(g.c), i(g.h), i(g.w)));
  DT_CUDNN_CHECK(cudnnSetTensor4dDescriptor(p->y, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, i(g.n), i(g.k), i(g.out_h()),
                                            i(g.out_w())));
  DT_CUDNN_CHECK(cudnnSetFilter4dDescriptor(p->w, CUDNN_DATA_FLOAT, CUDNN_TENSOR_NCHW, i(g.k), i(g.c), i(g.r), i(g.s)));
  DT_CUDNN_CHECK(cudnnSetConvolution2dDescriptor(p->conv, i(g.pad), i(g.pad), i(g.stride), i(g.stride), 1, 1,
                                                 CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT));
  // FMA: plain fp32, no TF32 tensor cores (CUDNN_DEFAULT_MATH would allow TF32 on Ampere and later).
  DT_CUDNN_CHECK(cudnnSetConvolutionMathType(p->conv, CUDNN_FMA_MATH));

  // Heuristics only (no benchmarking): fast, allocation-free, and the same choice on every rank and run.
  int n = 0;
  cudnnConvolutionFwdAlgoPerf_t fwd[CUDNN_CONVOLUTION_FWD_ALGO_COUNT];
  DT_CUDNN_CHECK(
      cudnnGetConvolutionForwardAlgorithm_v7(h, p->x, p->w, p->conv, p->y, CUDNN_CONVOLUTION_FWD_ALGO_COUNT, &n, fwd));
  const cudnnConvolutionFwdAlgoPerf_t* f = nullptr;
  DT_RETURN_IF_ERROR(Choose(fwd, n, "forward", &f));
  p->fwd = f->algo;
  DT_CUDNN_CHECK(cudnnGetConvolutionForwardWorkspaceSize(h, p->x, p->w, p->conv, p->y, p->fwd, &p->fwd_ws));

  cudnnConvolutionBwdDataAlgoPerf_t bd[CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT];
  DT_CUDNN_CHECK(cudnnGetConvolutionBackwardDataAlgorithm_v7(h, p->w, p->y, p->conv, p->x,
                                                             CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT, &n, bd));
  const cudnnConvolutionBwdDataAlgoPerf_t* d = nullptr;
  DT_RETURN_IF_ERROR(Choose(bd, n, "backward data", &d));
  p->bwd_data = d->algo;
  DT_CUDNN_CHECK(
      cudnnGetConvolutionBackwardDataWorkspaceSize(h, p->w, p->y, p->conv, p->x, p->bwd_data, &p->bwd_data_ws));

  cudnnConvolutionBwdFilterAlgoPerf_t bf[CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT];
  DT_CUDNN_CHECK(cudnnGetConvolutionBackwardFilterAlgorithm_v7(h, p->x, p->y, p->conv, p->w,
                                                               CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT, &n, bf));
  const cudnnConvolutionBwdFilterAlgoPerf_t* b = nullptr;
  DT_RETURN_IF_ERROR(Choose(bf, n, "backward filter", &b));
  p->bwd_filter = b->algo;
  DT_CUDNN_CHECK(
      cudnnGetConvolutionBackwardFilterWorkspaceSize(h, p->x, p->y, p->conv, p->w, p->bwd_filter, &p->bwd_filter_ws));

  DT_LOG_DEBUG(
      kModel,
      "conv2d plan x[{},{},{},{}] w[{},{},{},{}] stride {} pad {}: fwd algo {} ({} B), bwd data algo {} ({} B), "
      "bwd filter algo {} ({} B)",
      g.n, g.c, g.h, g.w, g.k, g.c, g.r, g.s, g.stride, g.pad, static_cast<int>(p->fwd), p->fwd_ws,
      static_cast<int>(p->bwd_data), p->bwd_data_ws, static_cast<int>(p->bwd_filter), p->bwd_filter_ws);
  return Status::OK();
}

}  // namespace

// Friend of Conv2dCache: finds or builds the plan of a geometry and grows the shared workspace to fit it.
struct CudnnConvAccess {
  static Status Get(cudnnHandle_t h, Conv2dCache* cache, const Conv2dGeometry& g, const ConvPlan** plan) {
    if (!cache->plans_) {
      cache->plans_ = decltype(cache->plans_)(std::make_unique<detail::CudnnConvPlans>().release(), DestroyPlans);
    }
    const detail::ConvKey key = {g.n, g.c, g.h, g.w, g.k, g.r, g.s, g.stride, g.pad};
    auto& slot = cache->plans_->plans[key];
    if (!slot) {
      auto p = std::make_unique<ConvPlan>();
      Status st = BuildPlan(h, g, p.get());
      if (!st.ok()) {
        cache->plans_->plans.erase(key);
        return st;
      }
      slot = std::move(p);
      const size_t need = std::max({slot->fwd_ws, slot->bwd_data_ws, slot->bwd_filter_ws});
      if (need > cache->ws_bytes_) {
        // Stream-ordered caching allocator: the old block may be handed out again only to later work on
        // the same stream, after the convolutions already queued with it.
        cache->workspace_ = Tensor();
        cache->ws_bytes_ = 0;
        DT_RETURN_IF_ERROR(Tensor::Empty({static_cast<int64_t>(need)}, DType::kU8, cache->alloc_, &cache->workspace_));
        cache->ws_bytes_ = need;
      }
    }
    *plan = slot.get();
    return Status::OK();
  }
  static void* workspace(const Conv2dCache& cache) { return cache.ws_bytes_ > 0 ? cache.workspace_.data() : nullptr; }

  // bf16: one direction through the graph API (conv2d_fe.h). With `accumulate`, the result goes to a scratch
  // buffer of `out_numel` elements first and is then added to `out` (the graph's output is always overwritten).
  static Status RunBf16(const CudnnHandle& cudnn, Conv2dCache* cache, detail::ConvDirection dir,
                        const Conv2dGeometry& g, const uint16_t* a, const uint16_t* b, uint16_t* out, int64_t out_numel,
                        bool accumulate) {
    if (!cache->fe_plans_) {
      cache->fe_plans_ = decltype(cache->fe_plans_)(detail::NewFeConvPlans(), detail::DeleteFeConvPlans);
    }
    Tensor scratch;
    if (accumulate) DT_RETURN_IF_ERROR(Tensor::Empty({out_numel}, DType::kBF16, cache->alloc_, &scratch));
    uint16_t* dst = accumulate ? scratch.data<uint16_t>() : out;
    DT_RETURN_IF_ERROR(detail::FeConvRun(cudnn.get(), cache->fe_plans_.get(), cache->alloc_, &cache->workspace_,
                                         &cache->ws_bytes_, dir, g, a, b, dst));
    if (!accumulate) return Status::OK();
    cudaStream_t stream = nullptr;
    DT_CUDNN_CHECK(cudnnGetStream(cudnn.get(), &stream));
    // The scratch block returns to the stream-ordered cache when this returns; the add below is queued first.
    return AddCudaBf16(out, out, dst, out_numel, stream);
  }
};

Status Conv2dForwardCuda(const CudnnHandle& cudnn, Conv2dCache* cache, float* y, const float* x, const float* w,
                         const Conv2dGeometry& g, bool accumulate) {
  DT_NVTX_FN();
  const ConvPlan* p = nullptr;
  DT_RETURN_IF_ERROR(CudnnConvAccess::Get(cudnn.get(), cache, g, &p));
  const float alpha = 1.f, beta = accumulate ? 1.f : 0.f;
  DT_CUDNN_CHECK(cudnnConvolutionForward(cudnn.get(), &alpha, p->x, x, p->w, w, p->conv, p->fwd,
                                         CudnnConvAccess::workspace(*cache), p->fwd_ws, &beta, p->y, y));
  return Status::OK();
}

Status Conv2dBackwardDataCuda(const CudnnHandle& cudnn, Conv2dCache* cache, float* dx, const float* dy, const float* w,
                              const Conv2dGeometry& g, bool accumulate) {
  DT_NVTX_FN();
  const ConvPlan* p = nullptr;
  DT_RETURN_IF_ERROR(CudnnConvAccess::Get(cudnn.get(), cache, g, &p));
  const float alpha = 1.f, beta = accumulate ? 1.f : 0.f;
  DT_CUDNN_CHECK(cudnnConvolutionBackwardData(cudnn.get(), &alpha, p->w, w, p->y, dy, p->conv, p->bwd_data,
                                              CudnnConvAccess::workspace(*cache), p->bwd_data_ws, &beta, p->x, dx));
  return Status::OK();
}

Status Conv2dBackwardFilterCuda(const CudnnHandle& cudnn, Conv2dCache* cache, float* dw, const float* x,
                                const float* dy, const Conv2dGeometry& g, bool accumulate) {
  DT_NVTX_FN();
  const ConvPlan* p = nullptr;
  DT_RETURN_IF_ERROR(CudnnConvAccess::Get(cudnn.get(), cache, g, &p));
  const float alpha = 1.f, beta = accumulate ? 1.f : 0.f;
  DT_CUDNN_CHECK(cudnnConvolutionBackwardFilter(cudnn.get(), &alpha, p->x, x, p->y, dy, p->conv, p->bwd_filter,
                                                CudnnConvAccess::workspace(*cache), p->bwd_filter_ws, &beta, p->w, dw));
  return Status::OK();
}

// ---- bf16, channels-last (cuDNN's graph API) -----------------------------------------------------------------

Status Conv2dForwardCudaBf16(const CudnnHandle& cudnn, Conv2dCache* cache, uint16_t* y, const uint16_t* x,
                             const uint16_t* w, const Conv2dGeometry& g, bool accumulate) {
  DT_NVTX_FN();
  return CudnnConvAccess::RunBf16(cudnn, cache, detail::ConvDirection::kForward, g, x, w, y,
                                  g.n * g.k * g.out_h() * g.out_w(), accumulate);
}

Status Conv2dBackwardDataCudaBf16(const CudnnHandle& cudnn, Conv2dCache* cache, uint16_t* dx, const uint16_t* dy,
                                  const uint16_t* w, const Conv2dGeometry& g, bool accumulate) {
  DT_NVTX_FN();
  return CudnnConvAccess::RunBf16(cudnn, cache, detail::ConvDirection::kBackwardData, g, dy, w, dx,
                                  g.n * g.c * g.h * g.w, accumulate);
}

Status Conv2dBackwardFilterCudaBf16(const CudnnHandle& cudnn, Conv2dCache* cache, uint16_t* dw, const uint16_t* x,
                                    const uint16_t* dy, const Conv2dGeometry& g, bool accumulate) {
  DT_NVTX_FN();
  return CudnnConvAccess::RunBf16(cudnn, cache, detail::ConvDirection::kBackwardFilter, g, dy, x, dw,
                                  g.k * g.c * g.r * g.s, accumulate);
}

}  // namespace dtrain::ops
