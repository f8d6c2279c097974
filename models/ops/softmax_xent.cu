// Softmax cross-entropy and argmax, one block per row, for f32 logits (f32 dlogits) and bf16 / fp16 logits (f32
// losses, 16-bit dlogits). 128-bit loads when V and the pointers allow; columns >= valid_cols are padding.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <climits>
#include <cstdint>

#include "core/cuda_check.h"
#include "core/nvtx.h"
#include "models/ops/bf16_vec.cuh"
#include "models/ops/softmax_xent.h"

namespace dtrain::ops {

namespace {

using detail::LoadV;
using detail::StoreV;
using detail::ToF32;

constexpr int kMaxThreads = 256;
constexpr int kMaxWarps = kMaxThreads / 32;

// Merges the running (max, sum of exp(x - max)) pair (m, s) with (m2, s2). Empty pairs are (-inf, 0).
__device__ void MergeMaxSum(float& m, float& s, float m2, float s2) {
  const float mn = fmaxf(m, m2);
  if (mn == -INFINITY) {  // both empty or -inf: avoid exp(-inf - -inf) = NaN, but keep a NaN input visible
    if (isnan(m) || isnan(m2)) s = NAN;
    return;
  }
  s = s * expf(m - mn) + s2 * expf(m2 - mn);
  m = mn;
}

// Block-wide (max, sum) reduction; every thread gets the result. blockDim.x is a multiple of 32, <= kMaxThreads.
__device__ void BlockMaxSum(float& m, float& s) {
  __shared__ float sh_m[kMaxWarps], sh_s[kMaxWarps];
  for (int off = 16; off > 0; off /= 2) {
    MergeMaxSum(m, s, __shfl_xor_sync(0xffffffffu, m, off), __shfl_xor_sync(0xffffffffu, s, off));
  }
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, warps = blockDim.x / 32;
  if (lane == 0) {
    sh_m[warp] = m;
    sh_s[warp] = s;
  }
  __syncthreads();
  m = -INFINITY;
  s = 0.f;
  for (int w = 0; w < warps; ++w) MergeMaxSum(m, s, sh_m[w], sh_s[w]);  // same fixed order in every thread
}

// Folds one value into a thread's running (max, sum of exp(x - max)) with one exp: -inf adds nothing, NaN
// poisons the sum.
__device__ __forceinline__ void OnlineAdd(float& m, float& s, float f) {
  if (f > m) {
    s = s * expf(m - f) + 1.f;
    m = f;
  } else if (f != -INFINITY) {
    s += expf(f - m);
  }
}

// One block per row: one online pass for (max, sum) over the valid columns, then the loss and (optionally) the
// gradient row. from_losses: the row's logsumexp is losses[row] + x[t] (the losses of an earlier call on these
// logits, read, not written), so only the gradient pass runs. dlogits may alias logits: the target logit is read,
// and every thread has read its elements, before a barrier (BlockMaxSum's, or the one after sh_lse); the gradient
// pass reads each chunk before the same thread overwrites it.
template <int V, typename T>
__global__ void SoftmaxXentKernel(float* losses, T* dlogits, const T* logits, const int32_t* targets, int64_t v,
                                  int64_t valid_cols, float grad_scale, bool from_losses) {
  const int64_t row = blockIdx.x;
  const T* x = logits + row * v;
  const int32_t t = targets[row];
  const bool valid = t >= 0 && t < valid_cols;  // never read x[t] out of bounds; an invalid target poisons the row
  const float xt = valid && threadIdx.x == 0 ? ToF32(x[t]) : 0.f;
  float m = -INFINITY, s = 0.f;
  float f[V];
  if (from_losses) {  // m = logsumexp, s = 1: p = exp(x - lse)
    __shared__ float sh_lse;
    if (threadIdx.x == 0) sh_lse = valid ? losses[row] + xt : NAN;
    __syncthreads();
    m = sh_lse;
    s = 1.f;
  } else {
    for (int64_t j = threadIdx.x * int64_t{V}; j < valid_cols; j += int64_t{blockDim.x} * V) {
      LoadV<V>(x + j, f);  // j + V <= v: V divides v (the launcher's choice)
#pragma unroll
      for (int k = 0; k < V; ++k) {
        if (j + k < valid_cols) OnlineAdd(m, s, f[k]);
      }
    }
    BlockMaxSum(m, s);
    if (threadIdx.x == 0) losses[row] = valid ? logf(s) + m - xt : NAN;
    if (dlogits == nullptr) return;
  }
  T* dx = dlogits + row * v;
  const float inv_s = 1.f / s;
  for (int64_t j = threadIdx.x * int64_t{V}; j < v; j += int64_t{blockDim.x} * V) {
    LoadV<V>(x + j, f);
#pragma unroll
    for (int k = 0; k < V; ++k) {
      const int64_t col = j + k;
      const float p = col < valid_cols ? (expf(f[k] - m) * inv_s - (col == t ? 1.f : 0.f)) * grad_scale : 0.f;
      f[k] = valid ? p : NAN;
    }
    StoreV<V>(dx + j, f);
  }
}

// (value, index) pairs: larger value wins, ties go to the smaller index; NaN never wins.
__device__ void MergeArgmax(float& best, int& idx, float v2, int i2) {
  if (v2 > best || (v2 == best && i2 < idx)) {
    best = v2;
    idx = i2;
  }
}

template <typename T>
__global__ void ArgmaxKernel(int32_t* out, const T* logits, int64_t v, int64_t valid_cols) {
  __shared__ float sh_v[kMaxWarps];
  __shared__ int sh_i[kMaxWarps];
  const T* x = logits + blockIdx.x * v;
  float best = -INFINITY;
  int idx = INT_MAX;  // "none yet": loses every tie
  for (int64_t j = threadIdx.x; j < valid_cols; j += blockDim.x) {
    const float f = ToF32(x[j]);
    if (f > best) {  // strict: within a thread, indices only grow, so the first maximum is kept
      best = f;
      idx = static_cast<int>(j);
    }
  }
  for (int off = 16; off > 0; off /= 2) {
    MergeArgmax(best, idx, __shfl_xor_sync(0xffffffffu, best, off), __shfl_xor_sync(0xffffffffu, idx, off));
  }
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  if (lane == 0) {
    sh_v[warp] = best;
    sh_i[warp] = idx;
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    for (int w = 1; w < static_cast<int>(blockDim.x / 32); ++w) MergeArgmax(best, idx, sh_v[w], sh_i[w]);
    out[blockIdx.x] = idx == INT_MAX ? 0 : idx;  // only NaN/-inf in the row: 0, like the CPU reference
  }
}

// Threads per row: V rounded up to a warp, at most kMaxThreads (small V, e.g. 10 classes, uses one warp).
int ThreadsFor(int64_t v) { return static_cast<int>(std::min<int64_t>(kMaxThreads, (v + 31) / 32 * 32)); }

Status CheckSizes(const char* op, int64_t b, int64_t v, int64_t valid_cols) {
  DT_CHECK_ARG(b >= 0 && b <= INT_MAX && v > 0 && v <= INT_MAX && valid_cols > 0 && valid_cols <= v,
               op << ": bad size B=" << b << " V=" << v << " valid_cols=" << valid_cols);
  return Status::OK();
}

template <typename T>
Status LaunchXent(float* losses, T* dlogits, const T* logits, const int32_t* targets, int64_t b, int64_t v,
                  int64_t valid_cols, float grad_scale, bool from_losses, cudaStream_t stream) {
  DT_RETURN_IF_ERROR(CheckSizes("SoftmaxCrossEntropyCuda", b, v, valid_cols));
  if (b == 0) return Status::OK();
  constexpr int kV = 16 / sizeof(T);
  if (detail::VecWidth<T>(v, {logits, dlogits}) == kV) {
    SoftmaxXentKernel<kV><<<static_cast<unsigned>(b), ThreadsFor(v / kV), 0, stream>>>(
        losses, dlogits, logits, targets, v, valid_cols, grad_scale, from_losses);
  } else {
    SoftmaxXentKernel<1><<<static_cast<unsigned>(b), ThreadsFor(v), 0, stream>>>(losses, dlogits, logits, targets, v,
                                                                                 valid_cols, grad_scale, from_losses);
  }
  DT_CUDA_CHECK_LAUNCH();
  return Status::OK();
}

template <typename T>
Status LaunchArgmax(int32_t* out, const T* logits, int64_t b, int64_t v, int64_t valid_cols, cudaStream_t stream) {
  DT_RETURN_IF_ERROR(CheckSizes("ArgmaxCuda", b, v, valid_cols));
  if (b == 0) return Status::OK();
  ArgmaxKernel<<<static_cast<unsigned>(b), ThreadsFor(valid_cols), 0, stream>>>(out, logits, v, valid_cols);
  DT_CUDA_CHECK_LAUNCH();
  return Status::OK();
}

}  // namespace

Status SoftmaxCrossEntropyCuda(float* losses, float* dlogits, const float* logits, const int32_t* targets, int64_t b,
                               int64_t v, int64_t valid_cols, float grad_scale, bool from_losses, cudaStream_t stream) {
  DT_NVTX_FN();
  return LaunchXent(losses, dlogits, logits, targets, b, v, valid_cols, grad_scale, from_losses, stream);
}

Status SoftmaxCrossEntropyCudaBf16(float* losses, uint16_t* dlogits, const uint16_t* logits, const int32_t* targets,
                                   int64_t b, int64_t v, int64_t valid_cols, float grad_scale, bool from_losses,
                                   cudaStream_t stream) {
  DT_NVTX_FN();
  return LaunchXent(losses, dlogits == nullptr ? nullptr : detail::AsBf16(dlogits), detail::AsBf16(logits), targets, b,
                    v, valid_cols, grad_scale, from_losses, stream);
}

Status ArgmaxCuda(int32_t* out, const float* logits, int64_t b, int64_t v, int64_t valid_cols, cudaStream_t stream) {
  DT_NVTX_FN();
  return LaunchArgmax(out, logits, b, v, valid_cols, stream);
}

Status ArgmaxCudaBf16(int32_t* out, const uint16_t* logits, int64_t b, int64_t v, int64_t valid_cols,
                      cudaStream_t stream) {
  DT_NVTX_FN();
  return LaunchArgmax(out, detail::AsBf16(logits), b, v, valid_cols, stream);
}

Status SoftmaxCrossEntropyCudaF16(float* losses, uint16_t* dlogits, const uint16_t* logits, const int32_t* targets,
                                  int64_t b, int64_t v, int64_t valid_cols, float grad_scale, bool from_losses,
                                  cudaStream_t stream) {
  DT_NVTX_FN();
  return LaunchXent(losses, dlogits == nullptr ? nullptr : detail::AsF16(dlogits), detail::AsF16(logits), targets, b, v,
                    valid_cols, grad_scale, from_losses, stream);
}

Status ArgmaxCudaF16(int32_t* out, const uint16_t* logits, int64_t b, int64_t v, int64_t valid_cols,
                     cudaStream_t stream) {
  DT_NVTX_FN();
  return LaunchArgmax(out, detail::AsF16(logits), b, v, valid_cols, stream);
}

}  // namespace dtrain::ops
