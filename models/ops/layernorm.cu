// LayerNorm kernels, f32, bf16 and fp16 activations (fp32 math, f32 gamma/beta/mean/rstd and parameter gradients).
// Row kernels use one warp per row with V-element (128-bit when aligned) accesses; the row is re-read from
// L1/L2 rather than held in registers, so any C works.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <cstdint>

#include "core/cuda_check.h"
#include "core/nvtx.h"
#include "models/ops/bf16_vec.cuh"
#include "models/ops/layernorm.h"

namespace dtrain::ops {

namespace {

using detail::LoadV;
using detail::StoreV;
using detail::ToF32;
using detail::WarpSum;

constexpr int kRowsPerBlock = 8;  // one warp per row, 256 threads
constexpr int kCacheSlots = 4;    // V-wide vectors of a row a lane may hold in registers (the cached forward)
// Column tile of the dgamma/dbeta reduction: 32 * V columns x kRowLanes row lanes (as in bias.cu), over row chunks.
constexpr int kRowLanes = 8;
constexpr int64_t kChunkRows = 128;
constexpr int64_t kMaxChunks = 64;

template <int V, typename T>
__global__ void LayerNormForwardKernel(T* y, float* mean, float* rstd, const T* x, const float* gamma,
                                       const float* beta, int64_t n, int64_t c, float eps) {
  const int64_t row = blockIdx.x * int64_t{kRowsPerBlock} + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (row >= n) return;  // whole warps exit together: the shuffles below stay full-warp
  const T* xr = x + row * c;
  float v[V];
  float sum = 0.f;
  for (int64_t j = lane * V; j < c; j += 32 * V) {
    LoadV<V>(xr + j, v);
#pragma unroll
    for (int k = 0; k < V; ++k) sum += v[k];
  }
  const float mu = WarpSum(sum) / c;
  float sq = 0.f;  // two-pass variance (the row is re-read from L1/L2)
  for (int64_t j = lane * V; j < c; j += 32 * V) {
    LoadV<V>(xr + j, v);
#pragma unroll
    for (int k = 0; k < V; ++k) sq += (v[k] - mu) * (v[k] - mu);
  }
  const float rs = rsqrtf(WarpSum(sq) / c + eps);
  T* yr = y + row * c;
  for (int64_t j = lane * V; j < c; j += 32 * V) {
    LoadV<V>(xr + j, v);
#pragma unroll
    for (int k = 0; k < V; ++k) v[k] = (v[k] - mu) * rs * gamma[j + k] + beta[j + k];
    StoreV<V>(yr + j, v);
  }
  if (lane == 0) {
    mean[row] = mu;
    rstd[row] = rs;
  }
}

template <int V, typename T>
__global__ void LayerNormBackwardDxKernel(T* dx, const T* x, const float* gamma, const float* mean, const float* rstd,
                                          const T* dy, int64_t n, int64_t c, bool accumulate) {
  const int64_t row = blockIdx.x * int64_t{kRowsPerBlock} + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (row >= n) return;
  const T* xr = x + row * c;
  const T* dyr = dy + row * c;
  const float mu = mean[row], rs = rstd[row];
  float xv[V], gv[V];
  float sum_g = 0.f, sum_gx = 0.f;
  for (int64_t j = lane * V; j < c; j += 32 * V) {
    LoadV<V>(xr + j, xv);
    LoadV<V>(dyr + j, gv);
#pragma unroll
    for (int k = 0; k < V; ++k) {
      const float g = gv[k] * gamma[j + k];
      sum_g += g;
      sum_gx += g * (xv[k] - mu) * rs;
    }
  }
  const float mean_g = WarpSum(sum_g) / c, mean_gx = WarpSum(sum_gx) / c;
  T* dxr = dx + row * c;
  for (int64_t j = lane * V; j < c; j += 32 * V) {
    LoadV<V>(xr + j, xv);
    LoadV<V>(dyr + j, gv);
#pragma unroll
    for (int k = 0; k < V; ++k) gv[k] = rs * (gv[k] * gamma[j + k] - mean_g - (xv[k] - mu) * rs * mean_gx);
    if (accumulate) {
      LoadV<V>(dxr + j, xv);
#pragma unroll
      for (int k = 0; k < V; ++k) gv[k] += xv[k];
    }
    StoreV<V>(dxr + j, gv);
  }
}

// The forward with the warp's row held in registers (C <= 32 * V * kCache: GPT-2's 768 in bf16 is 3 of 4 slots):
// x is read from memory once instead of three times. Each lane visits its columns in the same order as above, so the
// results are bitwise the same. (The same caching in the dx kernel was slower on H200: 41 vs 36 us per call at
// 16384 x 768, its 64 cached floats per lane cost occupancy.)
template <int V, int kCache, typename T>
__global__ void LayerNormForwardCachedKernel(T* y, float* mean, float* rstd, const T* x, const float* gamma,
                                             const float* beta, int64_t n, int64_t c, float eps) {
  const int64_t row = blockIdx.x * int64_t{kRowsPerBlock} + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (row >= n) return;
  const T* xr = x + row * c;
  float v[kCache][V];
  float sum = 0.f;
#pragma unroll
  for (int it = 0; it < kCache; ++it) {
    const int64_t j = (int64_t{it} * 32 + lane) * V;
    if (j >= c) continue;
    LoadV<V>(xr + j, v[it]);
#pragma unroll
    for (int k = 0; k < V; ++k) sum += v[it][k];
  }
  const float mu = WarpSum(sum) / c;
  float sq = 0.f;
#pragma unroll
  for (int it = 0; it < kCache; ++it) {
    if ((int64_t{it} * 32 + lane) * V >= c) continue;
#pragma unroll
    for (int k = 0; k < V; ++k) sq += (v[it][k] - mu) * (v[it][k] - mu);
  }
  const float rs = rsqrtf(WarpSum(sq) / c + eps);
  T* yr = y + row * c;
#pragma unroll
  for (int it = 0; it < kCache; ++it) {
    const int64_t j = (int64_t{it} * 32 + lane) * V;
    if (j >= c) continue;
#pragma unroll
    for (int k = 0; k < V; ++k) v[it][k] = (v[it][k] - mu) * rs * gamma[j + k] + beta[j + k];
    StoreV<V>(yr + j, v[it]);
  }
  if (lane == 0) {
    mean[row] = mu;
    rstd[row] = rs;
  }
}

// Block (32, kRowLanes), blockIdx = (column tile, row chunk): lane (x, y) strides over the chunk's rows for its V
// columns (one V-wide load of x and dy per row), then the partial sums are added in a fixed order (independent of
// V). One chunk: added to dgamma/dbeta; more: written to part[chunk][2C] and added up in order by
// LayerNormParamsFinishKernel. Bitwise reproducible either way.
template <int V, typename T>
__global__ void LayerNormBackwardParamsKernel(float* dgamma, float* dbeta, float* part, const T* x, const float* mean,
                                              const float* rstd, const T* dy, int64_t n, int64_t c,
                                              int64_t chunk_rows) {
  __shared__ float part_g[kRowLanes][32 * V + 1], part_b[kRowLanes][32 * V + 1];
  const int64_t col = (blockIdx.x * int64_t{32} + threadIdx.x) * V;
  const int64_t row0 = blockIdx.y * chunk_rows, row1 = min(n, row0 + chunk_rows);
  float sg[V] = {}, sb[V] = {};
  if (col < c) {
#pragma unroll 2
    for (int64_t row = row0 + threadIdx.y; row < row1; row += kRowLanes) {
      float d[V], xv[V];
      LoadV<V>(dy + row * c + col, d);
      LoadV<V>(x + row * c + col, xv);
      const float mu = mean[row], rs = rstd[row];
#pragma unroll
      for (int k = 0; k < V; ++k) {
        sg[k] += d[k] * (xv[k] - mu) * rs;
        sb[k] += d[k];
      }
    }
  }
#pragma unroll
  for (int k = 0; k < V; ++k) {
    part_g[threadIdx.y][threadIdx.x * V + k] = sg[k];
    part_b[threadIdx.y][threadIdx.x * V + k] = sb[k];
  }
  __syncthreads();
  // Thread t of the block finishes tile columns t, t + blockDim, ...
  for (int k = threadIdx.y * 32 + threadIdx.x; k < 32 * V; k += 32 * kRowLanes) {
    const int64_t cc = blockIdx.x * int64_t{32} * V + k;
    if (cc >= c) break;
    float tg = 0.f, tb = 0.f;
    for (int r = 0; r < kRowLanes; ++r) {
      tg += part_g[r][k];
      tb += part_b[r][k];
    }
    if (gridDim.y == 1) {
      dgamma[cc] += tg;
      dbeta[cc] += tb;
    } else {
      part[blockIdx.y * 2 * c + cc] = tg;
      part[blockIdx.y * 2 * c + c + cc] = tb;
    }
  }
}

__global__ void LayerNormParamsFinishKernel(float* dgamma, float* dbeta, const float* part, int64_t chunks, int64_t c) {
  const int64_t col = blockIdx.x * int64_t{blockDim.x} + threadIdx.x;
  if (col >= c) return;
  float tg = 0.f, tb = 0.f;
#pragma unroll 16
  for (int64_t k = 0; k < chunks; ++k) {  // unrolled: the loads overlap; the adds stay in chunk order
    tg += part[k * 2 * c + col];
    tb += part[k * 2 * c + c + col];
  }
  dgamma[col] += tg;
  dbeta[col] += tb;
}

unsigned RowBlocks(int64_t n) { return static_cast<unsigned>((n + kRowsPerBlock - 1) / kRowsPerBlock); }
int64_t NumChunks(int64_t n) { return std::clamp<int64_t>((n + kChunkRows - 1) / kChunkRows, 1, kMaxChunks); }

template <typename T>
Status LaunchForward(T* y, float* mean, float* rstd, const T* x, const float* gamma, const float* beta, int64_t n,
                     int64_t c, float eps, cudaStream_t stream) {
  if (n == 0) return Status::OK();
  constexpr int kV = 16 / sizeof(T);
  if (detail::VecWidth<T>(c, {y, x}) == kV && c <= 32 * kV * kCacheSlots) {
    LayerNormForwardCachedKernel<kV, kCacheSlots>
        <<<RowBlocks(n), kRowsPerBlock * 32, 0, stream>>>(y, mean, rstd, x, gamma, beta, n, c, eps);
  } else if (detail::VecWidth<T>(c, {y, x}) == kV) {
    LayerNormForwardKernel<kV>
        <<<RowBlocks(n), kRowsPerBlock * 32, 0, stream>>>(y, mean, rstd, x, gamma, beta, n, c, eps);
  } else {
    LayerNormForwardKernel<1>
        <<<RowBlocks(n), kRowsPerBlock * 32, 0, stream>>>(y, mean, rstd, x, gamma, beta, n, c, eps);
  }
  DT_CUDA_CHECK_LAUNCH();
  return Status::OK();
}

template <typename T>
Status LaunchBackward(T* dx, float* dgamma, float* dbeta, const T* x, const float* gamma, const float* mean,
                      const float* rstd, const T* dy, int64_t n, int64_t c, float* scratch, bool accumulate_dx,
                      cudaStream_t stream) {
  if (n == 0 || c == 0) return Status::OK();
  constexpr int kV = 16 / sizeof(T);
  if (detail::VecWidth<T>(c, {dx, x, dy}) == kV) {
    LayerNormBackwardDxKernel<kV>
        <<<RowBlocks(n), kRowsPerBlock * 32, 0, stream>>>(dx, x, gamma, mean, rstd, dy, n, c, accumulate_dx);
  } else {
    LayerNormBackwardDxKernel<1>
        <<<RowBlocks(n), kRowsPerBlock * 32, 0, stream>>>(dx, x, gamma, mean, rstd, dy, n, c, accumulate_dx);
  }
  DT_CUDA_CHECK_LAUNCH();
  const int64_t chunks = scratch == nullptr ? 1 : NumChunks(n);
  const int64_t chunk_rows = (n + chunks - 1) / chunks;
  if (detail::VecWidth<T>(c, {x, dy}) == kV) {
    const dim3 grid(static_cast<unsigned>((c + 32 * kV - 1) / (32 * kV)), static_cast<unsigned>(chunks));
    LayerNormBackwardParamsKernel<kV>
        <<<grid, dim3(32, kRowLanes), 0, stream>>>(dgamma, dbeta, scratch, x, mean, rstd, dy, n, c, chunk_rows);
  } else {
    const dim3 grid(static_cast<unsigned>((c + 31) / 32), static_cast<unsigned>(chunks));
    LayerNormBackwardParamsKernel<1>
        <<<grid, dim3(32, kRowLanes), 0, stream>>>(dgamma, dbeta, scratch, x, mean, rstd, dy, n, c, chunk_rows);
  }
  DT_CUDA_CHECK_LAUNCH();
  if (chunks > 1) {
    // 64 threads a block: C = 768 spreads over 12 SMs instead of 3.
    LayerNormParamsFinishKernel<<<static_cast<unsigned>((c + 63) / 64), 64, 0, stream>>>(dgamma, dbeta, scratch, chunks,
                                                                                         c);
    DT_CUDA_CHECK_LAUNCH();
  }
  return Status::OK();
}

}  // namespace

int64_t LayerNormBackwardScratchFloats(int64_t n, int64_t c) { return NumChunks(n) * 2 * c; }

Status LayerNormForwardCuda(float* y, float* mean, float* rstd, const float* x, const float* gamma, const float* beta,
                            int64_t n, int64_t c, float eps, cudaStream_t stream) {
  DT_NVTX_FN();
  return LaunchForward(y, mean, rstd, x, gamma, beta, n, c, eps, stream);
}

Status LayerNormForwardCudaBf16(uint16_t* y, float* mean, float* rstd, const uint16_t* x, const float* gamma,
                                const float* beta, int64_t n, int64_t c, float eps, cudaStream_t stream) {
  DT_NVTX_FN();
  return LaunchForward(detail::AsBf16(y), mean, rstd, detail::AsBf16(x), gamma, beta, n, c, eps, stream);
}

Status LayerNormForwardCudaF16(uint16_t* y, float* mean, float* rstd, const uint16_t* x, const float* gamma,
                               const float* beta, int64_t n, int64_t c, float eps, cudaStream_t stream) {
  DT_NVTX_FN();
  return LaunchForward(detail::AsF16(y), mean, rstd, detail::AsF16(x), gamma, beta, n, c, eps, stream);
}

Status LayerNormBackwardCuda(float* dx, float* dgamma, float* dbeta, const float* x, const float* gamma,
                             const float* mean, const float* rstd, const float* dy, int64_t n, int64_t c,
                             cudaStream_t stream) {
  DT_NVTX_FN();
  return LaunchBackward(dx, dgamma, dbeta, x, gamma, mean, rstd, dy, n, c, nullptr, false, stream);
}

Status LayerNormBackwardCuda(float* dx, float* dgamma, float* dbeta, const float* x, const float* gamma,
                             const float* mean, const float* rstd, const float* dy, int64_t n, int64_t c,
                             float* scratch, bool accumulate_dx, cudaStream_t stream) {
  DT_NVTX_FN();
  return LaunchBackward(dx, dgamma, dbeta, x, gamma, mean, rstd, dy, n, c, scratch, accumulate_dx, stream);
}

Status LayerNormBackwardCudaBf16(uint16_t* dx, float* dgamma, float* dbeta, const uint16_t* x, const float* gamma,
                                 const float* mean, const float* rstd, const uint16_t* dy, int64_t n, int64_t c,
                                 float* scratch, bool accumulate_dx, cudaStream_t stream) {
  DT_NVTX_FN();
  return LaunchBackward(detail::AsBf16(dx), dgamma, dbeta, detail::AsBf16(x), gamma, mean, rstd, detail::AsBf16(dy), n,
                        c, scratch, accumulate_dx, stream);
}

Status LayerNormBackwardCudaF16(uint16_t* dx, float* dgamma, float* dbeta, const uint16_t* x, const float* gamma,
                                const float* mean, const float* rstd, const uint16_t* dy, int64_t n, int64_t c,
                                float* scratch, bool accumulate_dx, cudaStream_t stream) {
  DT_NVTX_FN();
  return LaunchBackward(detail::AsF16(dx), dgamma, dbeta, detail::AsF16(x), gamma, mean, rstd, detail::AsF16(dy), n, c,
                        scratch, accumulate_dx, stream);
}

}  // namespace dtrain::ops
