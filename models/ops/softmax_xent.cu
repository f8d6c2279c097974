#include <algorithm>
#include <climits>
#include <cstdint>

#include "models/ops/softmax_xent.h"
#include "runtime/core/cuda_check.h"
#include "runtime/core/nvtx.h"

namespace dtrain::ops {

namespace {

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

// One block per row: one online pass for (max, sum), then the loss and (optionally) the gradient row.
__global__ void SoftmaxXentKernel(float* losses, float* dlogits, const float* logits, const int32_t* targets, int64_t v,
                                  float grad_scale) {
  const int64_t row = blockIdx.x;
  const float* x = logits + row * v;
  float m = -INFINITY, s = 0.f;
  for (int64_t j = threadIdx.x; j < v; j += blockDim.x) MergeMaxSum(m, s, x[j], 1.f);
  BlockMaxSum(m, s);
  const int32_t t = targets[row];
  const bool valid = t >= 0 && t < v;  // never read x[t] out of bounds; an invalid target poisons the row
  if (threadIdx.x == 0) losses[row] = valid ? logf(s) + m - x[t] : NAN;
  if (dlogits != nullptr) {
    float* dx = dlogits + row * v;
    const float inv_s = 1.f / s;
    for (int64_t j = threadIdx.x; j < v; j += blockDim.x) {
      dx[j] = valid ? (expf(x[j] - m) * inv_s - (j == t ? 1.f : 0.f)) * grad_scale : NAN;
    }
  }
}

// (value, index) pairs: larger value wins, ties go to the smaller index; NaN never wins.
__device__ void MergeArgmax(float& best, int& idx, float v2, int i2) {
  if (v2 > best || (v2 == best && i2 < idx)) {
    best = v2;
    idx = i2;
  }
}

__global__ void ArgmaxKernel(int32_t* out, const float* logits, int64_t v) {
  __shared__ float sh_v[kMaxWarps];
  __shared__ int sh_i[kMaxWarps];
  const float* x = logits + blockIdx.x * v;
  float best = -INFINITY;
  int idx = INT_MAX;  // "none yet": loses every tie
  for (int64_t j = threadIdx.x; j < v; j += blockDim.x) {
    if (x[j] > best) {  // strict: within a thread, indices only grow, so the first maximum is kept
      best = x[j];
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

}  // namespace

Status SoftmaxCrossEntropyCuda(float* losses, float* dlogits, const float* logits, const int32_t* targets, int64_t b,
                               int64_t v, float grad_scale, cudaStream_t stream) {
  DT_NVTX_FN();
  DT_CHECK_ARG(b >= 0 && b <= INT_MAX && v > 0, "SoftmaxCrossEntropyCuda: bad size B=" << b << " V=" << v);
  if (b == 0) return Status::OK();
  SoftmaxXentKernel<<<static_cast<unsigned>(b), ThreadsFor(v), 0, stream>>>(losses, dlogits, logits, targets, v,
                                                                            grad_scale);
  DT_CUDA_CHECK_LAUNCH();
  return Status::OK();
}

Status ArgmaxCuda(int32_t* out, const float* logits, int64_t b, int64_t v, cudaStream_t stream) {
  DT_NVTX_FN();
  DT_CHECK_ARG(b >= 0 && b <= INT_MAX && v > 0 && v <= INT_MAX, "ArgmaxCuda: bad size B=" << b << " V=" << v);
  if (b == 0) return Status::OK();
  ArgmaxKernel<<<static_cast<unsigned>(b), ThreadsFor(v), 0, stream>>>(out, logits, v);
  DT_CUDA_CHECK_LAUNCH();
  return Status::OK();
}

}  // namespace dtrain::ops
