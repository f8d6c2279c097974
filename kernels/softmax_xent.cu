// Softmax cross-entropy and argmax, one block per row, for f32 logits (f32 dlogits) and bf16 / fp16 logits (f32
// losses, 16-bit dlogits). 128-bit loads when V and the pointers allow; columns >= valid_cols are padding. Rows of
// more than 512 vectors and at most 112 KB (GPT-2's 50304 bf16 columns) take the row kernel, which reads the logits
// once; others the streaming kernel, which reads them twice.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <climits>
#include <cstdint>

#include "core/cuda_check.h"
#include "core/nvtx.h"
#include "kernels/bf16_vec.cuh"
#include "kernels/softmax_xent.h"

namespace dtrain::ops {

namespace {

using detail::CpAsync16;
using detail::CpAsyncCommit;
using detail::CpAsyncWait;
using detail::LoadV;
using detail::StoreV;
using detail::ToF32;

constexpr int kMaxThreads = 256;  // streaming kernel and argmax: threads per row
constexpr int kMaxWarps = kMaxThreads / 32;
constexpr int kRowThreads = 512;           // row kernel: threads per row (2 blocks an SM)
constexpr int64_t kRowBytes = 112 * 1024;  // row kernel: the largest row (2 fit in an SM's 228 KB of shared memory)

// Merges the running (max, sum of exp(x - max)) pair (m, s) with (m2, s2). Empty pairs are (-inf, 0).
__device__ void MergeMaxSum(float& m, float& s, float m2, float s2) {
  const float mn = fmaxf(m, m2);
  if (mn == -INFINITY) {  // both empty or -inf: avoid exp(-inf - -inf) = NaN, but keep a NaN input visible
    s = isnan(m) || isnan(m2) ? NAN : s + s2;  // symmetric, so every lane of a butterfly agrees
    return;
  }
  s = s * expf(m - mn) + s2 * expf(m2 - mn);
  m = mn;
}

// Butterfly over a warp: every lane ends with the same pair (the merge is symmetric in its operands).
__device__ void WarpMaxSum(float& m, float& s) {
  for (int off = 16; off > 0; off /= 2) {
    MergeMaxSum(m, s, __shfl_xor_sync(0xffffffffu, m, off), __shfl_xor_sync(0xffffffffu, s, off));
  }
}

// Block-wide (max, sum) reduction in a fixed tree (warps, then warp 0 over the warps' pairs); every thread gets the
// result. blockDim.x is a multiple of 32, <= 1024.
__device__ void BlockMaxSum(float& m, float& s) {
  __shared__ float sh_m[32], sh_s[32];
  WarpMaxSum(m, s);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  if (lane == 0) {
    sh_m[warp] = m;
    sh_s[warp] = s;
  }
  __syncthreads();
  if (warp == 0) {
    const bool has = lane < static_cast<int>(blockDim.x / 32);
    m = has ? sh_m[lane] : -INFINITY;
    s = has ? sh_s[lane] : 0.f;
    WarpMaxSum(m, s);
    if (lane == 0) {  // warp 0 has read every slot (the shuffles above are after its reads)
      sh_m[0] = m;
      sh_s[0] = s;
    }
  }
  __syncthreads();
  m = sh_m[0];
  s = sh_s[0];
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

// What the kernels share about a row: its target logit x[t] (thread 0 only; others 0) and whether t is a class.
struct RowTarget {
  int32_t t;
  bool valid;  // an invalid target poisons the row (x[t] is never read out of bounds)
  float xt;
};
template <typename T>
__device__ RowTarget ReadTarget(const T* x, const int32_t* targets, int64_t valid_cols) {
  const int32_t t = targets[blockIdx.x];
  const bool valid = t >= 0 && t < valid_cols;
  return {t, valid, valid && threadIdx.x == 0 ? ToF32(x[t]) : 0.f};
}

// from_losses: the row's (m, s) as (logsumexp, 1), with logsumexp = losses[row] + x[t] (thread 0 reads it, a barrier
// hands it to all). Every thread reaches the barrier.
__device__ void LseFromLoss(const float* losses, const RowTarget& rt, float& m, float& s) {
  __shared__ float sh_lse;
  if (threadIdx.x == 0) sh_lse = rt.valid ? losses[blockIdx.x] + rt.xt : NAN;
  __syncthreads();
  m = sh_lse;
  s = 1.f;
}

// The V gradient values at columns [j, j + V) in place of the logits f: (softmax - onehot) * grad_scale with
// softmax = exp(x - m) / s; 0 in padded columns; NaN everywhere for an invalid target.
template <int V>
__device__ __forceinline__ void GradV(float (&f)[V], int64_t j, float m, float inv_s, const RowTarget& rt,
                                      int64_t valid_cols, float grad_scale) {
#pragma unroll
  for (int k = 0; k < V; ++k) {
    const int64_t col = j + k;
    const float p = col < valid_cols ? (expf(f[k] - m) * inv_s - (col == rt.t ? 1.f : 0.f)) * grad_scale : 0.f;
    f[k] = rt.valid ? p : NAN;
  }
}

// Streaming kernel, one block per row: one online pass for (max, sum) over the valid columns, then the loss and
// (optionally) the gradient row in a second pass over the logits. from_losses: only the gradient pass (the losses of
// an earlier call on these logits are read, not written). dlogits may alias logits: the target logit is read, and
// every thread has read its elements, before a barrier (BlockMaxSum's, or LseFromLoss's); the gradient pass reads
// each chunk before the same thread overwrites it.
template <int V, typename T>
__global__ void SoftmaxXentKernel(float* losses, T* dlogits, const T* logits, const int32_t* targets, int64_t v,
                                  int64_t valid_cols, float grad_scale, bool from_losses) {
  const int64_t row = blockIdx.x;
  const T* x = logits + row * v;
  const RowTarget rt = ReadTarget(x, targets, valid_cols);
  float m = -INFINITY, s = 0.f;
  float f[V];
  if (from_losses) {
    LseFromLoss(losses, rt, m, s);
  } else {
    for (int64_t j = threadIdx.x * int64_t{V}; j < valid_cols; j += int64_t{blockDim.x} * V) {
      LoadV<V>(x + j, f);  // j + V <= v: V divides v (the launcher's choice)
#pragma unroll
      for (int k = 0; k < V; ++k) {
        if (j + k < valid_cols) OnlineAdd(m, s, f[k]);
      }
    }
    BlockMaxSum(m, s);
    if (threadIdx.x == 0) losses[row] = rt.valid ? logf(s) + m - rt.xt : NAN;
    if (dlogits == nullptr) return;
  }
  T* dx = dlogits + row * v;
  const float inv_s = 1.f / s;
  for (int64_t j = threadIdx.x * int64_t{V}; j < v; j += int64_t{blockDim.x} * V) {
    LoadV<V>(x + j, f);
    GradV<V>(f, j, m, inv_s, rt, valid_cols, grad_scale);
    StoreV<V>(dx + j, f);
  }
}

// 2^x in one MUFU instruction (ex2.approx.ftz: ~2 ulp; 2^-inf = 0, results below 2^-126 flush to 0).
__device__ __forceinline__ float Exp2Approx(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}

constexpr float kLog2e = 1.4426950408889634f;

// Row kernel, one block of kRowThreads per row of at most kRowBytes (V * sizeof(T) = 16): each thread copies its
// 128-bit vectors of the row (i = threadIdx.x + k * kRowThreads) into shared memory with cp.async and works on them
// there, so the logits are read from memory once. It is written for instruction count, which bounds the streaming
// kernel on GPT-2's logits (about 30 instructions a column): exp(x - m) is one FFMA and one ex2.approx, the vectors
// wholly inside the classes and away from the target skip the per-column checks, and the per-thread max comes before
// the sum (no rescaling). Same results contract and aliasing rule as the streaming kernel; the exp is ex2.approx
// (relative error ~1e-6 where the streaming kernel's expf is ~1e-7).
template <typename T>
__global__ void __launch_bounds__(kRowThreads, 2)
    SoftmaxXentRowKernel(float* losses, T* dlogits, const T* logits, const int32_t* targets, int64_t v,
                         int64_t valid_cols, float grad_scale, bool from_losses) {
  constexpr int V = 16 / sizeof(T);
  extern __shared__ int4 sh_row[];  // v / V vectors
  const int64_t row = blockIdx.x;
  const T* x = logits + row * v;
  const int nvec = static_cast<int>(v / V);
  for (int i = threadIdx.x; i < nvec; i += kRowThreads) CpAsync16(&sh_row[i], x + int64_t{i} * V, true);
  CpAsyncCommit();
  const RowTarget rt = ReadTarget(x, targets, valid_cols);
  CpAsyncWait<0>();  // a thread reads back only the vectors it copied itself: no barrier needed
  // Vectors [0, full) hold only classes; the rest hold padding (and the last classes when V does not divide U).
  const int full = static_cast<int>(valid_cols / V);
  float m = -INFINITY, s = 0.f;
  float f[V];
  if (from_losses) {
    LseFromLoss(losses, rt, m, s);
  } else {
    for (int i = threadIdx.x; i < nvec; i += kRowThreads) {
      LoadV<V>(reinterpret_cast<const T*>(&sh_row[i]), f);
#pragma unroll
      for (int k = 0; k < V; ++k) {  // fmaxf skips NaN; the sum below picks it up
        if (i < full || int64_t{i} * V + k < valid_cols) m = fmaxf(m, f[k]);
      }
    }
    // exp(x - m) = 2^(x log2e - m log2e); -inf columns give 2^-inf = 0, NaN stays NaN. A thread with no finite
    // column keeps the empty pair (-inf, 0) unless it saw a NaN.
    const float neg_m2 = m == -INFINITY ? 0.f : -m * kLog2e;
    for (int i = threadIdx.x; i < nvec; i += kRowThreads) {
      LoadV<V>(reinterpret_cast<const T*>(&sh_row[i]), f);
#pragma unroll
      for (int k = 0; k < V; ++k) {
        if (i < full || int64_t{i} * V + k < valid_cols) s += Exp2Approx(fmaf(f[k], kLog2e, neg_m2));
      }
    }
    BlockMaxSum(m, s);
    if (threadIdx.x == 0) losses[row] = rt.valid ? logf(s) + m - rt.xt : NAN;
    if (dlogits == nullptr) return;
  }
  T* dx = dlogits + row * v;
  const float neg_m2 = -m * kLog2e, inv_s = 1.f / s, scale = inv_s * grad_scale;
  const int target_vec = rt.valid ? rt.t / V : -1;
  for (int i = threadIdx.x; i < nvec; i += kRowThreads) {
    LoadV<V>(reinterpret_cast<const T*>(&sh_row[i]), f);
    if (i < full && i != target_vec && rt.valid) {
#pragma unroll
      for (int k = 0; k < V; ++k) f[k] = Exp2Approx(fmaf(f[k], kLog2e, neg_m2)) * scale;
    } else {
#pragma unroll
      for (int k = 0; k < V; ++k) {
        const int64_t col = int64_t{i} * V + k;
        const float e = Exp2Approx(fmaf(f[k], kLog2e, neg_m2));
        const float p = col >= valid_cols ? 0.f : col == rt.t ? (e * inv_s - 1.f) * grad_scale : e * scale;
        f[k] = rt.valid ? p : NAN;
      }
    }
    StoreV<V>(dx + int64_t{i} * V, f);
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
  const bool vec = detail::VecWidth<T>(v, {logits, dlogits}) == kV;
  const int64_t vecs = v / kV, bytes = v * static_cast<int64_t>(sizeof(T));
  if (vec && vecs > kRowThreads && bytes <= kRowBytes) {
    auto* kernel = SoftmaxXentRowKernel<T>;
    DT_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(bytes)));
    kernel<<<static_cast<unsigned>(b), kRowThreads, static_cast<size_t>(bytes), stream>>>(
        losses, dlogits, logits, targets, v, valid_cols, grad_scale, from_losses);
  } else if (vec) {
    SoftmaxXentKernel<kV><<<static_cast<unsigned>(b), ThreadsFor(vecs), 0, stream>>>(
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
