// CUDA kernels of kernels/reduce.h: a deterministic two-pass sum of squares and an in-place scale.
#include <algorithm>

#include "core/cuda_check.h"
#include "core/nvtx.h"
#include "kernels/bf16_round.h"
#include "kernels/reduce.h"

namespace dtrain::ops {
namespace {

constexpr int kThreads = 256;                    // pass 1 and elementwise blocks (a multiple of 32)
constexpr int kFinalThreads = 1024;              // pass 2: one block over the partials
constexpr int64_t kMaxElementwiseBlocks = 8192;  // grid-stride beyond this
static_assert(kSumSquaresWorkspaceElems <= 1024 * 1024, "pass 2 loops over the partials");

// Sum of `v` over the block, valid in thread 0. blockDim.x must be a multiple of 32. The order of
// additions depends only on blockDim.x, so the result is deterministic.
__device__ double BlockSum(double v) {
  __shared__ double warp_sums[32];
  for (int off = 16; off > 0; off >>= 1) v += __shfl_down_sync(0xffffffffu, v, off);
  const int lane = threadIdx.x & 31;
  const int warp = threadIdx.x >> 5;
  if (lane == 0) warp_sums[warp] = v;
  __syncthreads();
  const int num_warps = blockDim.x >> 5;
  v = threadIdx.x < num_warps ? warp_sums[threadIdx.x] : 0.0;
  if (warp == 0) {
    for (int off = 16; off > 0; off >>= 1) v += __shfl_down_sync(0xffffffffu, v, off);
  }
  return v;
}

__device__ __forceinline__ double Widen(float x) { return static_cast<double>(x); }
__device__ __forceinline__ double Widen(uint16_t x) { return static_cast<double>(Bf16BitsToF32(x)); }

// Pass 1: block b writes the sum of squares of its grid-stride slice to partials[b].
template <typename T>
__global__ void SumSquaresPartialKernel(const T* __restrict__ x, int64_t n, double* __restrict__ partials) {
  double acc = 0.0;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    const double v = Widen(x[i]);
    acc += v * v;
  }
  acc = BlockSum(acc);
  if (threadIdx.x == 0) partials[blockIdx.x] = acc;
}

// Pass 2: one block sums the partials in a fixed order (and adds *out when accumulating).
__global__ void SumPartialsKernel(const double* __restrict__ partials, int num_partials, float* __restrict__ out,
                                  bool accumulate) {
  double acc = 0.0;
  for (int i = threadIdx.x; i < num_partials; i += blockDim.x) acc += partials[i];
  acc = BlockSum(acc);
  if (threadIdx.x == 0) *out = static_cast<float>(accumulate ? static_cast<double>(*out) + acc : acc);
}

__global__ void ScaleKernel(float* __restrict__ x, int64_t n, float s) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) x[i] *= s;
}

template <typename T>
Status LaunchSumSquares(const T* x, int64_t n, double* workspace, float* out, cudaStream_t stream, bool accumulate) {
  DT_NVTX_FN();
  DT_CHECK_ARG(n >= 0, "negative element count " << n);
  DT_CHECK_ARG(workspace != nullptr && out != nullptr, "null workspace or out");
  // The grid depends only on n, so a given input always reduces in the same order.
  const int blocks = static_cast<int>(std::clamp<int64_t>((n + kThreads - 1) / kThreads, 1, kSumSquaresWorkspaceElems));
  SumSquaresPartialKernel<<<blocks, kThreads, 0, stream>>>(x, n, workspace);
  DT_CUDA_CHECK_LAUNCH();
  SumPartialsKernel<<<1, kFinalThreads, 0, stream>>>(workspace, blocks, out, accumulate);
  DT_CUDA_CHECK_LAUNCH();
  return Status::OK();
}

}  // namespace

Status SumSquaresCuda(const float* x, int64_t n, double* workspace, float* out, cudaStream_t stream, bool accumulate) {
  return LaunchSumSquares(x, n, workspace, out, stream, accumulate);
}

Status SumSquaresCudaBf16(const uint16_t* x, int64_t n, double* workspace, float* out, cudaStream_t stream,
                          bool accumulate) {
  return LaunchSumSquares(x, n, workspace, out, stream, accumulate);
}

Status ScaleCuda(float* x, int64_t n, float s, cudaStream_t stream) {
  DT_NVTX_FN();
  DT_CHECK_ARG(n >= 0, "negative element count " << n);
  if (n == 0) return Status::OK();
  const int blocks = static_cast<int>(std::min<int64_t>((n + kThreads - 1) / kThreads, kMaxElementwiseBlocks));
  ScaleKernel<<<blocks, kThreads, 0, stream>>>(x, n, s);
  DT_CUDA_CHECK_LAUNCH();
  return Status::OK();
}

}  // namespace dtrain::ops
