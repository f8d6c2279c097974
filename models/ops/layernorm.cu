#include <algorithm>
#include <cstdint>

#include "models/ops/layernorm.h"
#include "runtime/core/cuda_check.h"
#include "runtime/core/nvtx.h"

namespace dtrain::ops {

namespace {

constexpr int kRowsPerBlock = 8;  // one warp per row, 256 threads
// Column tile of the dgamma/dbeta reduction: 32 columns x kRowLanes row lanes (as in bias.cu).
constexpr int kRowLanes = 16;

__device__ float WarpSum(float v) {
  for (int off = 16; off > 0; off /= 2) v += __shfl_xor_sync(0xffffffffu, v, off);
  return v;
}

__global__ void LayerNormForwardKernel(float* y, float* mean, float* rstd, const float* x, const float* gamma,
                                       const float* beta, int64_t n, int64_t c, float eps) {
  const int64_t row = blockIdx.x * int64_t{kRowsPerBlock} + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (row >= n) return;  // whole warps exit together: the shuffles below stay full-warp
  const float* xr = x + row * c;
  float sum = 0.f;
  for (int64_t j = lane; j < c; j += 32) sum += xr[j];
  const float mu = WarpSum(sum) / c;
  float sq = 0.f;  // two-pass variance (the row is re-read from L1/L2)
  for (int64_t j = lane; j < c; j += 32) sq += (xr[j] - mu) * (xr[j] - mu);
  const float rs = rsqrtf(WarpSum(sq) / c + eps);
  float* yr = y + row * c;
  for (int64_t j = lane; j < c; j += 32) yr[j] = (xr[j] - mu) * rs * gamma[j] + beta[j];
  if (lane == 0) {
    mean[row] = mu;
    rstd[row] = rs;
  }
}

__global__ void LayerNormBackwardDxKernel(float* dx, const float* x, const float* gamma, const float* mean,
                                          const float* rstd, const float* dy, int64_t n, int64_t c) {
  const int64_t row = blockIdx.x * int64_t{kRowsPerBlock} + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (row >= n) return;
  const float* xr = x + row * c;
  const float* dyr = dy + row * c;
  const float mu = mean[row], rs = rstd[row];
  float sum_g = 0.f, sum_gx = 0.f;
  for (int64_t j = lane; j < c; j += 32) {
    const float g = dyr[j] * gamma[j];
    sum_g += g;
    sum_gx += g * (xr[j] - mu) * rs;
  }
  const float mean_g = WarpSum(sum_g) / c, mean_gx = WarpSum(sum_gx) / c;
  float* dxr = dx + row * c;
  for (int64_t j = lane; j < c; j += 32) {
    dxr[j] = rs * (dyr[j] * gamma[j] - mean_g - (xr[j] - mu) * rs * mean_gx);
  }
}

// Block (32, kRowLanes) owns 32 columns; lanes stride over rows, then the partial sums are added in a fixed
// order: dgamma/dbeta are bitwise reproducible.
__global__ void LayerNormBackwardParamsKernel(float* dgamma, float* dbeta, const float* x, const float* mean,
                                              const float* rstd, const float* dy, int64_t n, int64_t c) {
  __shared__ float part_g[kRowLanes][33], part_b[kRowLanes][33];
  const int64_t col = blockIdx.x * int64_t{32} + threadIdx.x;
  float sg = 0.f, sb = 0.f;
  if (col < c) {
    for (int64_t row = threadIdx.y; row < n; row += kRowLanes) {
      const float d = dy[row * c + col];
      sg += d * (x[row * c + col] - mean[row]) * rstd[row];
      sb += d;
    }
  }
  part_g[threadIdx.y][threadIdx.x] = sg;
  part_b[threadIdx.y][threadIdx.x] = sb;
  __syncthreads();
  if (threadIdx.y == 0 && col < c) {
    float tg = 0.f, tb = 0.f;
    for (int r = 0; r < kRowLanes; ++r) {
      tg += part_g[r][threadIdx.x];
      tb += part_b[r][threadIdx.x];
    }
    dgamma[col] += tg;
    dbeta[col] += tb;
  }
}

unsigned RowBlocks(int64_t n) { return static_cast<unsigned>((n + kRowsPerBlock - 1) / kRowsPerBlock); }

}  // namespace

Status LayerNormForwardCuda(float* y, float* mean, float* rstd, const float* x, const float* gamma, const float* beta,
                            int64_t n, int64_t c, float eps, cudaStream_t stream) {
  DT_NVTX_FN();
  if (n == 0) return Status::OK();
  LayerNormForwardKernel<<<RowBlocks(n), kRowsPerBlock * 32, 0, stream>>>(y, mean, rstd, x, gamma, beta, n, c, eps);
  DT_CUDA_CHECK_LAUNCH();
  return Status::OK();
}

Status LayerNormBackwardCuda(float* dx, float* dgamma, float* dbeta, const float* x, const float* gamma,
                             const float* mean, const float* rstd, const float* dy, int64_t n, int64_t c,
                             cudaStream_t stream) {
  DT_NVTX_FN();
  if (n == 0 || c == 0) return Status::OK();
  LayerNormBackwardDxKernel<<<RowBlocks(n), kRowsPerBlock * 32, 0, stream>>>(dx, x, gamma, mean, rstd, dy, n, c);
  DT_CUDA_CHECK_LAUNCH();
  const dim3 block(32, kRowLanes);
  LayerNormBackwardParamsKernel<<<static_cast<unsigned>((c + 31) / 32), block, 0, stream>>>(dgamma, dbeta, x, mean,
                                                                                            rstd, dy, n, c);
  DT_CUDA_CHECK_LAUNCH();
  return Status::OK();
}

}  // namespace dtrain::ops
