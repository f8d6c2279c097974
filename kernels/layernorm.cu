// LayerNorm kernels, f32, bf16 and fp16 activations (fp32 math, f32 gamma/beta/mean/rstd and parameter gradients).
// Row kernels use one warp per row with V-element (128-bit when aligned) accesses of x, y, dy, dx and gamma/beta;
// the row is re-read from L1/L2 rather than held in registers, so any C works. The backward of rows up to
// 4 * 32 * V columns with 128-bit accesses (GPT-2's 768 and 1024 in bf16) is one fused pass, rows double-buffered
// in shared memory: dx plus per-block dgamma/dbeta partial sums, added up in block order by a small finish kernel;
// other rows take a dx pass and a column-tile pass.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <cstdint>

#include "core/cuda_check.h"
#include "core/nvtx.h"
#include "kernels/bf16_vec.cuh"
#include "kernels/layernorm.h"

namespace dtrain::ops {

namespace {

using detail::CpAsync16;
using detail::CpAsyncCommit;
using detail::CpAsyncWait;
using detail::LoadF32;
using detail::LoadV;
using detail::StoreF32;
using detail::StoreV;
using detail::ToF32;
using detail::WarpSum;

constexpr int kRowsPerBlock = 8;  // one warp per row, 256 threads
constexpr int kCacheSlots = 4;    // V-wide vectors of a row a lane may hold in registers (the cached forward)
// Column tile of the dgamma/dbeta reduction: 32 * V columns x kRowLanes row lanes (as in bias.cu), over row chunks.
constexpr int kRowLanes = 8;
constexpr int64_t kChunkRows = 128;
constexpr int64_t kMaxChunks = 64;
// The fused backward: rows per block (8 per warp; GPT-2's 16384 rows make 256 blocks, one wave at 2 blocks an SM).
constexpr int64_t kFusedRows = 64;
constexpr int kFinishLanes = 16;  // chunk lanes of the finish kernel's (32, kFinishLanes) blocks

template <int V, typename T>
__global__ void LayerNormForwardKernel(T* y, float* mean, float* rstd, const T* x, const float* gamma,
                                       const float* beta, int64_t n, int64_t c, float eps, float* amax) {
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
  unsigned m = 0;
  for (int64_t j = lane * V; j < c; j += 32 * V) {
    float g[V], b[V];
    LoadV<V>(xr + j, v);
    LoadF32<V>(gamma + j, g);
    LoadF32<V>(beta + j, b);
#pragma unroll
    for (int k = 0; k < V; ++k) v[k] = (v[k] - mu) * rs * g[k] + b[k];
    StoreV<V>(yr + j, v);
    if (amax != nullptr) detail::FoldAmax<V, T>(m, v);
  }
  detail::WarpAmaxToGlobal(amax, m);
  if (lane == 0) {
    mean[row] = mu;
    rstd[row] = rs;
  }
}

template <int V, typename T>
__global__ void LayerNormBackwardDxKernel(T* dx, const T* x, const float* gamma, const float* mean, const float* rstd,
                                          const T* dy, int64_t n, int64_t c, bool accumulate, float* amax) {
  const int64_t row = blockIdx.x * int64_t{kRowsPerBlock} + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (row >= n) return;
  const T* xr = x + row * c;
  const T* dyr = dy + row * c;
  const float mu = mean[row], rs = rstd[row];
  float xv[V], gv[V], gam[V];
  float sum_g = 0.f, sum_gx = 0.f;
  for (int64_t j = lane * V; j < c; j += 32 * V) {
    LoadV<V>(xr + j, xv);
    LoadV<V>(dyr + j, gv);
    LoadF32<V>(gamma + j, gam);
#pragma unroll
    for (int k = 0; k < V; ++k) {
      const float g = gv[k] * gam[k];
      sum_g += g;
      sum_gx += g * (xv[k] - mu) * rs;
    }
  }
  const float mean_g = WarpSum(sum_g) / c, mean_gx = WarpSum(sum_gx) / c;
  T* dxr = dx + row * c;
  unsigned m = 0;
  for (int64_t j = lane * V; j < c; j += 32 * V) {
    LoadV<V>(xr + j, xv);
    LoadV<V>(dyr + j, gv);
    LoadF32<V>(gamma + j, gam);
#pragma unroll
    for (int k = 0; k < V; ++k) gv[k] = rs * (gv[k] * gam[k] - mean_g - (xv[k] - mu) * rs * mean_gx);
    if (accumulate) {
      LoadV<V>(dxr + j, xv);
#pragma unroll
      for (int k = 0; k < V; ++k) gv[k] += xv[k];
    }
    StoreV<V>(dxr + j, gv);
    if (amax != nullptr) detail::FoldAmax<V, T>(m, gv);
  }
  detail::WarpAmaxToGlobal(amax, m);
}

// The forward with the warp's row held in registers (C <= 32 * V * kCache: GPT-2's 768 in bf16 is 3 of 4 slots):
// x is read from memory once instead of three times. Each lane visits its columns in the same order as above, so the
// results are bitwise the same. (The same caching in the dx kernel was slower on H200: 41 vs 36 us per call at
// 16384 x 768, its 64 cached floats per lane cost occupancy.) gamma and beta are read as whole vectors too: as 8
// scalar loads each, a warp's 32-byte-strided lanes cost L1 four times the wavefronts, which bounded this kernel.
template <int V, int kCache, typename T>
__global__ void LayerNormForwardCachedKernel(T* y, float* mean, float* rstd, const T* x, const float* gamma,
                                             const float* beta, int64_t n, int64_t c, float eps, float* amax) {
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
  unsigned m = 0;
#pragma unroll
  for (int it = 0; it < kCache; ++it) {
    const int64_t j = (int64_t{it} * 32 + lane) * V;
    if (j >= c) continue;
    float g[V], b[V];
    LoadF32<V>(gamma + j, g);
    LoadF32<V>(beta + j, b);
#pragma unroll
    for (int k = 0; k < V; ++k) v[it][k] = (v[it][k] - mu) * rs * g[k] + b[k];
    StoreV<V>(yr + j, v[it]);
    if (amax != nullptr) detail::FoldAmax<V, T>(m, v[it]);
  }
  detail::WarpAmaxToGlobal(amax, m);
  if (lane == 0) {
    mean[row] = mu;
    rstd[row] = rs;
  }
}

// The fused backward, for C <= kSlots * 32 * V with 128-bit accesses (V = 16 / sizeof(T)): block b takes rows
// [b * kFusedRows, (b + 1) * kFusedRows), warp w of it rows w, w + kRowsPerBlock, ... of those. Each lane owns the
// same columns in every row (the dx kernel's, visited in the same order: dx is bitwise the dx kernel's), so it keeps
// their gamma and its dgamma/dbeta sums in registers. While a warp works on one row from its shared stage, its next
// row (x, dy, and dx when accumulating) is in flight into the other stage through cp.async; each lane reads back only
// the 16-byte pieces it copied, so its own wait is all the synchronisation a stage needs. Then the block's warps add
// their sums in a fixed tree (4 + 4, 2 + 2, 1 + 1) and write them to part[b][2C]; LayerNormParamsFinishKernel adds
// the blocks in order. Bitwise reproducible.
template <int kSlots, typename T>
constexpr size_t FusedSharedBytes() {
  constexpr size_t kCols = kSlots * 32 * (16 / sizeof(T));
  constexpr size_t stages = kRowsPerBlock * 2 * 3 * kCols * sizeof(T), red = kRowsPerBlock / 2 * 2 * kCols * 4;
  return stages > red ? stages : red;
}

template <int kSlots, typename T>
__global__ void __launch_bounds__(kRowsPerBlock * 32, 2)
    LayerNormBackwardFusedKernel(T* dx, float* part, const T* x, const float* gamma, const float* mean,
                                 const float* rstd, const T* dy, int64_t n, int64_t c, bool accumulate, float* amax) {
  constexpr int V = 16 / sizeof(T);
  constexpr int kCols = kSlots * 32 * V;
  extern __shared__ __align__(16) unsigned char smem[];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  T* stages = reinterpret_cast<T*>(smem) + warp * 2 * 3 * kCols;  // [2][x, dy, dx][kCols] of this warp
  auto fetch = [&](int64_t row, int stage) {
    T* dst = stages + stage * 3 * kCols;
#pragma unroll
    for (int it = 0; it < kSlots; ++it) {
      const int64_t j = (int64_t{it} * 32 + lane) * V;
      if (j >= c) continue;
      CpAsync16(dst + j, x + row * c + j, true);
      CpAsync16(dst + kCols + j, dy + row * c + j, true);
      if (accumulate) CpAsync16(dst + 2 * kCols + j, dx + row * c + j, true);
    }
    CpAsyncCommit();
  };
  float gam[kSlots][V], sg[kSlots][V], sb[kSlots][V];
#pragma unroll
  for (int it = 0; it < kSlots; ++it) {
#pragma unroll
    for (int k = 0; k < V; ++k) gam[it][k] = sg[it][k] = sb[it][k] = 0.f;
    const int64_t j = (int64_t{it} * 32 + lane) * V;
    if (j < c) LoadF32<V>(gamma + j, gam[it]);
  }
  const int64_t first = blockIdx.x * kFusedRows + warp, row1 = min(n, (blockIdx.x + int64_t{1}) * kFusedRows);
  if (first < row1) fetch(first, 0);
  int stage = 0;
  unsigned m = 0;  // max |dx| over this lane's stores (with amax)
  for (int64_t row = first; row < row1; row += kRowsPerBlock, stage ^= 1) {
    if (row + kRowsPerBlock < row1) {
      fetch(row + kRowsPerBlock, stage ^ 1);
      CpAsyncWait<1>();
    } else {
      CpAsyncWait<0>();
    }
    const T* xs = stages + stage * 3 * kCols;
    const float mu = mean[row], rs = rstd[row];
    float sum_g = 0.f, sum_gx = 0.f;
#pragma unroll
    for (int it = 0; it < kSlots; ++it) {
      const int j = (it * 32 + lane) * V;
      if (j >= c) continue;
      float xv[V], d[V];
      LoadV<V>(xs + j, xv);
      LoadV<V>(xs + kCols + j, d);
#pragma unroll
      for (int k = 0; k < V; ++k) {
        const float g = d[k] * gam[it][k];
        sum_g += g;
        sum_gx += g * (xv[k] - mu) * rs;
        sg[it][k] += d[k] * (xv[k] - mu) * rs;
        sb[it][k] += d[k];
      }
    }
    const float mean_g = WarpSum(sum_g) / c, mean_gx = WarpSum(sum_gx) / c;
    T* dxr = dx + row * c;
#pragma unroll
    for (int it = 0; it < kSlots; ++it) {
      const int j = (it * 32 + lane) * V;
      if (j >= c) continue;
      float xv[V], d[V];
      LoadV<V>(xs + j, xv);
      LoadV<V>(xs + kCols + j, d);
#pragma unroll
      for (int k = 0; k < V; ++k) d[k] = rs * (d[k] * gam[it][k] - mean_g - (xv[k] - mu) * rs * mean_gx);
      if (accumulate) {
        LoadV<V>(xs + 2 * kCols + j, xv);
#pragma unroll
        for (int k = 0; k < V; ++k) d[k] += xv[k];
      }
      StoreV<V>(dxr + j, d);
      if (amax != nullptr) detail::FoldAmax<V, T>(m, d);
    }
  }
  detail::WarpAmaxToGlobal(amax, m);
  __syncthreads();  // the stages become the reduction's buffer: red[kRowsPerBlock / 2][2 * kCols]
  float* red = reinterpret_cast<float*>(smem);
  for (int half = kRowsPerBlock / 2; half > 0; half /= 2) {
    if (warp >= half && warp < 2 * half) {
#pragma unroll
      for (int it = 0; it < kSlots; ++it) {
        const int j = (it * 32 + lane) * V;
        StoreF32<V>(red + (warp - half) * 2 * kCols + j, sg[it]);
        StoreF32<V>(red + (warp - half) * 2 * kCols + kCols + j, sb[it]);
      }
    }
    __syncthreads();
    if (warp < half) {
#pragma unroll
      for (int it = 0; it < kSlots; ++it) {
        const int j = (it * 32 + lane) * V;
        float tg[V], tb[V];
        LoadF32<V>(red + warp * 2 * kCols + j, tg);
        LoadF32<V>(red + warp * 2 * kCols + kCols + j, tb);
#pragma unroll
        for (int k = 0; k < V; ++k) {
          sg[it][k] += tg[k];
          sb[it][k] += tb[k];
        }
      }
    }
    __syncthreads();
  }
  if (warp == 0) {
    float* out = part + blockIdx.x * 2 * c;
#pragma unroll
    for (int it = 0; it < kSlots; ++it) {
      const int64_t j = (int64_t{it} * 32 + lane) * V;
      if (j >= c) continue;
      StoreF32<V>(out + j, sg[it]);
      StoreF32<V>(out + c + j, sb[it]);
    }
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

// part[chunks][2C] (dgamma's C sums, then dbeta's) -> dgamma/dbeta +=. Block (32, kFinishLanes) for 32 of the 2C
// columns: lane y adds chunks y, y + kFinishLanes, ... in order, then lane 0 adds the lanes' sums in order.
__global__ void LayerNormParamsFinishKernel(float* dgamma, float* dbeta, const float* part, int64_t chunks, int64_t c) {
  __shared__ float lanes[kFinishLanes][33];
  const int64_t col = blockIdx.x * int64_t{32} + threadIdx.x;
  float t = 0.f;
  if (col < 2 * c) {
#pragma unroll 8
    for (int64_t k = threadIdx.y; k < chunks; k += kFinishLanes) t += part[k * 2 * c + col];
  }
  lanes[threadIdx.y][threadIdx.x] = t;
  __syncthreads();
  if (threadIdx.y != 0 || col >= 2 * c) return;
  float sum = 0.f;
  for (int r = 0; r < kFinishLanes; ++r) sum += lanes[r][threadIdx.x];
  if (col < c) {
    dgamma[col] += sum;
  } else {
    dbeta[col - c] += sum;
  }
}

unsigned RowBlocks(int64_t n) { return static_cast<unsigned>((n + kRowsPerBlock - 1) / kRowsPerBlock); }
int64_t NumChunks(int64_t n) { return std::clamp<int64_t>((n + kChunkRows - 1) / kChunkRows, 1, kMaxChunks); }
int64_t FusedBlocks(int64_t n) { return (n + kFusedRows - 1) / kFusedRows; }

template <typename T>
Status LaunchForward(T* y, float* mean, float* rstd, const T* x, const float* gamma, const float* beta, int64_t n,
                     int64_t c, float eps, float* amax, cudaStream_t stream) {
  if (amax != nullptr) DT_CUDA_CHECK(cudaMemsetAsync(amax, 0, sizeof(float), stream));
  if (n == 0) return Status::OK();
  constexpr int kV = 16 / sizeof(T);
  const int v = detail::VecWidth<T>(c, {y, x, gamma, beta});
  if (v == kV && c <= 32 * kV * kCacheSlots) {
    LayerNormForwardCachedKernel<kV, kCacheSlots>
        <<<RowBlocks(n), kRowsPerBlock * 32, 0, stream>>>(y, mean, rstd, x, gamma, beta, n, c, eps, amax);
  } else if (v == kV) {
    LayerNormForwardKernel<kV>
        <<<RowBlocks(n), kRowsPerBlock * 32, 0, stream>>>(y, mean, rstd, x, gamma, beta, n, c, eps, amax);
  } else {
    LayerNormForwardKernel<1>
        <<<RowBlocks(n), kRowsPerBlock * 32, 0, stream>>>(y, mean, rstd, x, gamma, beta, n, c, eps, amax);
  }
  DT_CUDA_CHECK_LAUNCH();
  return Status::OK();
}

template <int kSlots, typename T>
Status LaunchFused(T* dx, float* part, const T* x, const float* gamma, const float* mean, const float* rstd,
                   const T* dy, int64_t n, int64_t c, bool accumulate_dx, float* amax, cudaStream_t stream) {
  constexpr size_t kBytes = FusedSharedBytes<kSlots, T>();
  const auto kernel = LayerNormBackwardFusedKernel<kSlots, T>;
  DT_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(kBytes)));
  kernel<<<static_cast<unsigned>(FusedBlocks(n)), kRowsPerBlock * 32, kBytes, stream>>>(dx, part, x, gamma, mean, rstd,
                                                                                        dy, n, c, accumulate_dx, amax);
  DT_CUDA_CHECK_LAUNCH();
  return Status::OK();
}

template <typename T>
Status LaunchBackward(T* dx, float* dgamma, float* dbeta, const T* x, const float* gamma, const float* mean,
                      const float* rstd, const T* dy, int64_t n, int64_t c, float* scratch, bool accumulate_dx,
                      float* amax, cudaStream_t stream) {
  if (amax != nullptr) DT_CUDA_CHECK(cudaMemsetAsync(amax, 0, sizeof(float), stream));
  if (n == 0 || c == 0) return Status::OK();
  constexpr int kV = 16 / sizeof(T);
  const dim3 finish_grid(static_cast<unsigned>((2 * c + 31) / 32)), finish_block(32, kFinishLanes);
  const int64_t slots = (c + 32 * kV - 1) / (32 * kV);
  if (scratch != nullptr && slots <= 4 && detail::VecWidth<T>(c, {dx, x, dy, gamma, scratch}) == kV) {
    DT_RETURN_IF_ERROR(slots <= 3
                           ? LaunchFused<3>(dx, scratch, x, gamma, mean, rstd, dy, n, c, accumulate_dx, amax, stream)
                           : LaunchFused<4>(dx, scratch, x, gamma, mean, rstd, dy, n, c, accumulate_dx, amax, stream));
    LayerNormParamsFinishKernel<<<finish_grid, finish_block, 0, stream>>>(dgamma, dbeta, scratch, FusedBlocks(n), c);
    DT_CUDA_CHECK_LAUNCH();
    return Status::OK();
  }
  if (detail::VecWidth<T>(c, {dx, x, dy, gamma}) == kV) {
    LayerNormBackwardDxKernel<kV>
        <<<RowBlocks(n), kRowsPerBlock * 32, 0, stream>>>(dx, x, gamma, mean, rstd, dy, n, c, accumulate_dx, amax);
  } else {
    LayerNormBackwardDxKernel<1>
        <<<RowBlocks(n), kRowsPerBlock * 32, 0, stream>>>(dx, x, gamma, mean, rstd, dy, n, c, accumulate_dx, amax);
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
    LayerNormParamsFinishKernel<<<finish_grid, finish_block, 0, stream>>>(dgamma, dbeta, scratch, chunks, c);
    DT_CUDA_CHECK_LAUNCH();
  }
  return Status::OK();
}

}  // namespace

int64_t LayerNormBackwardScratchFloats(int64_t n, int64_t c) { return std::max(NumChunks(n), FusedBlocks(n)) * 2 * c; }

Status LayerNormForwardCuda(float* y, float* mean, float* rstd, const float* x, const float* gamma, const float* beta,
                            int64_t n, int64_t c, float eps, cudaStream_t stream) {
  DT_NVTX_FN();
  return LaunchForward(y, mean, rstd, x, gamma, beta, n, c, eps, nullptr, stream);
}

Status LayerNormForwardCudaBf16(uint16_t* y, float* mean, float* rstd, const uint16_t* x, const float* gamma,
                                const float* beta, int64_t n, int64_t c, float eps, float* amax, cudaStream_t stream) {
  DT_NVTX_FN();
  return LaunchForward(detail::AsBf16(y), mean, rstd, detail::AsBf16(x), gamma, beta, n, c, eps, amax, stream);
}

Status LayerNormForwardCudaF16(uint16_t* y, float* mean, float* rstd, const uint16_t* x, const float* gamma,
                               const float* beta, int64_t n, int64_t c, float eps, float* amax, cudaStream_t stream) {
  DT_NVTX_FN();
  return LaunchForward(detail::AsF16(y), mean, rstd, detail::AsF16(x), gamma, beta, n, c, eps, amax, stream);
}

Status LayerNormBackwardCuda(float* dx, float* dgamma, float* dbeta, const float* x, const float* gamma,
                             const float* mean, const float* rstd, const float* dy, int64_t n, int64_t c,
                             cudaStream_t stream) {
  DT_NVTX_FN();
  return LaunchBackward(dx, dgamma, dbeta, x, gamma, mean, rstd, dy, n, c, nullptr, false, nullptr, stream);
}

Status LayerNormBackwardCuda(float* dx, float* dgamma, float* dbeta, const float* x, const float* gamma,
                             const float* mean, const float* rstd, const float* dy, int64_t n, int64_t c,
                             float* scratch, bool accumulate_dx, cudaStream_t stream) {
  DT_NVTX_FN();
  return LaunchBackward(dx, dgamma, dbeta, x, gamma, mean, rstd, dy, n, c, scratch, accumulate_dx, nullptr, stream);
}

Status LayerNormBackwardCudaBf16(uint16_t* dx, float* dgamma, float* dbeta, const uint16_t* x, const float* gamma,
                                 const float* mean, const float* rstd, const uint16_t* dy, int64_t n, int64_t c,
                                 float* scratch, bool accumulate_dx, float* amax, cudaStream_t stream) {
  DT_NVTX_FN();
  return LaunchBackward(detail::AsBf16(dx), dgamma, dbeta, detail::AsBf16(x), gamma, mean, rstd, detail::AsBf16(dy), n,
                        c, scratch, accumulate_dx, amax, stream);
}

Status LayerNormBackwardCudaF16(uint16_t* dx, float* dgamma, float* dbeta, const uint16_t* x, const float* gamma,
                                const float* mean, const float* rstd, const uint16_t* dy, int64_t n, int64_t c,
                                float* scratch, bool accumulate_dx, float* amax, cudaStream_t stream) {
  DT_NVTX_FN();
  return LaunchBackward(detail::AsF16(dx), dgamma, dbeta, detail::AsF16(x), gamma, mean, rstd, detail::AsF16(dy), n, c,
                        scratch, accumulate_dx, amax, stream);
}

}  // namespace dtrain::ops
