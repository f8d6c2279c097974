#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <cstdint>

#include "core/cuda_check.h"
#include "core/nvtx.h"
#include "kernels/bf16_vec.cuh"
#include "kernels/bias.h"

namespace dtrain::ops {

namespace {

using detail::LoadV;
using detail::StoreV;
using detail::ToF32;

constexpr int kThreads = 256;
// Column tile of the bias-gradient reduction: 32 * V columns (one coalesced warp per row) x kRowLanes rows.
constexpr int kRowLanes = 8;
// Rows per chunk of the two-stage reduction and the cap on chunks (the scratch holds chunks x N floats).
constexpr int64_t kChunkRows = 128;
constexpr int64_t kMaxChunks = 64;

// y[m, :] += bias; V consecutive elements of one row per step (N % V == 0 keeps them in one row).
template <int V, typename T, typename B>
__global__ void BiasAddKernel(T* y, const B* bias, int64_t m, int64_t n) {
  detail::GridStrideVec<V>(m * n, [&](int64_t i, auto w) {
    constexpr int W = decltype(w)::value;
    float v[W];
    LoadV<W>(y + i, v);
    const int64_t col = i % n;
#pragma unroll
    for (int j = 0; j < W; ++j) v[j] += ToF32(bias[col + j]);
    StoreV<W>(y + i, v);
  });
}

// Block (32, kRowLanes), blockIdx = (column tile, row chunk): lane (x, y) sums rows y, y + kRowLanes, ... of its V
// columns within the chunk (one V-wide load per row: a warp reads 32 * V consecutive elements), then the kRowLanes
// partial sums are added in a fixed order. The order does not depend on V. With one chunk the
// total goes to dbias; otherwise to out[chunk * n + col], reduced by BiasGradFinishKernel. Bitwise reproducible.
template <int V, typename T>
__global__ void BiasGradKernel(float* out, const T* dy, int64_t m, int64_t n, int64_t chunk_rows, bool accumulate) {
  __shared__ float partial[kRowLanes][32 * V + 1];
  const int64_t col = (blockIdx.x * int64_t{32} + threadIdx.x) * V;
  const int64_t row0 = blockIdx.y * chunk_rows, row1 = min(m, row0 + chunk_rows);
  float sum[V] = {};
  if (col < n) {
#pragma unroll 4
    for (int64_t row = row0 + threadIdx.y; row < row1; row += kRowLanes) {
      float v[V];
      LoadV<V>(dy + row * n + col, v);
#pragma unroll
      for (int j = 0; j < V; ++j) sum[j] += v[j];
    }
  }
#pragma unroll
  for (int j = 0; j < V; ++j) partial[threadIdx.y][threadIdx.x * V + j] = sum[j];
  __syncthreads();
  // Each of the block's threads finishes columns of the tile: thread t takes tile columns t, t + blockDim, ...
  const int tid = threadIdx.y * 32 + threadIdx.x;
  for (int k = tid; k < 32 * V; k += 32 * kRowLanes) {
    const int64_t c = blockIdx.x * int64_t{32} * V + k;
    if (c >= n) break;
    float total = 0.f;
    for (int r = 0; r < kRowLanes; ++r) total += partial[r][k];
    if (gridDim.y == 1) {
      out[c] = accumulate ? out[c] + total : total;
    } else {
      out[blockIdx.y * n + c] = total;
    }
  }
}

// Block (32, kFinishGroups): lane (x, y) adds chunks y, y + kFinishGroups, ... of column blockIdx.x * 32 + x (all
// its loads independent: one memory round trip), then row y = 0 adds the groups' sums in order. Fixed order:
// bitwise reproducible.
constexpr int kFinishGroups = 8;
__global__ void BiasGradFinishKernel(float* dbias, const float* chunks, int64_t num_chunks, int64_t n,
                                     bool accumulate) {
  __shared__ float partial[kFinishGroups][32];
  const int64_t col = blockIdx.x * int64_t{32} + threadIdx.x;
  float total = 0.f;
  if (col < n) {
#pragma unroll 8
    for (int64_t c = threadIdx.y; c < num_chunks; c += kFinishGroups) total += chunks[c * n + col];
  }
  partial[threadIdx.y][threadIdx.x] = total;
  __syncthreads();
  if (threadIdx.y != 0 || col >= n) return;
  for (int g = 1; g < kFinishGroups; ++g) total += partial[g][threadIdx.x];
  dbias[col] = accumulate ? dbias[col] + total : total;
}

int64_t NumChunks(int64_t m) { return std::clamp<int64_t>((m + kChunkRows - 1) / kChunkRows, 1, kMaxChunks); }

template <typename T, typename B>
Status LaunchBiasAdd(T* y, const B* bias, int64_t m, int64_t n, cudaStream_t stream) {
  if (m == 0 || n == 0) return Status::OK();
  constexpr int kV = 16 / sizeof(T);
  if (detail::VecWidth<T>(n, {y}) == kV) {
    BiasAddKernel<kV><<<detail::GridFor(m * n / kV, kThreads), kThreads, 0, stream>>>(y, bias, m, n);
  } else {
    BiasAddKernel<1><<<detail::GridFor(m * n, kThreads), kThreads, 0, stream>>>(y, bias, m, n);
  }
  DT_CUDA_CHECK_LAUNCH();
  return Status::OK();
}

template <typename T>
Status LaunchBiasGrad(float* dbias, const T* dy, int64_t m, int64_t n, bool accumulate, float* scratch,
                      cudaStream_t stream) {
  if (n == 0) return Status::OK();
  const int64_t chunks = scratch == nullptr ? 1 : NumChunks(m);
  const int64_t chunk_rows = chunks == 1 ? std::max<int64_t>(m, 1) : (m + chunks - 1) / chunks;
  float* out = chunks == 1 ? dbias : scratch;
  constexpr int kV = 16 / sizeof(T);
  if (detail::VecWidth<T>(n, {dy}) == kV) {
    const dim3 grid(static_cast<unsigned>((n + 32 * kV - 1) / (32 * kV)), static_cast<unsigned>(chunks));
    BiasGradKernel<kV><<<grid, dim3(32, kRowLanes), 0, stream>>>(out, dy, m, n, chunk_rows, accumulate);
  } else {
    const dim3 grid(static_cast<unsigned>((n + 31) / 32), static_cast<unsigned>(chunks));
    BiasGradKernel<1><<<grid, dim3(32, kRowLanes), 0, stream>>>(out, dy, m, n, chunk_rows, accumulate);
  }
  DT_CUDA_CHECK_LAUNCH();
  if (chunks > 1) {
    BiasGradFinishKernel<<<static_cast<unsigned>((n + 31) / 32), dim3(32, kFinishGroups), 0, stream>>>(
        dbias, scratch, chunks, n, accumulate);
    DT_CUDA_CHECK_LAUNCH();
  }
  return Status::OK();
}

}  // namespace

int64_t BiasGradScratchFloats(int64_t m, int64_t n) { return NumChunks(m) * n; }

Status BiasGradFinishCuda(float* dbias, const float* partials, int64_t chunks, int64_t n, bool accumulate,
                          cudaStream_t stream) {
  DT_NVTX_FN();
  DT_CHECK_ARG(chunks >= 0 && n >= 0, "BiasGradFinishCuda: chunks=" << chunks << ", n=" << n);
  if (n == 0) return Status::OK();
  BiasGradFinishKernel<<<static_cast<unsigned>((n + 31) / 32), dim3(32, kFinishGroups), 0, stream>>>(
      dbias, partials, chunks, n, accumulate);
  DT_CUDA_CHECK_LAUNCH();
  return Status::OK();
}

Status BiasAddCuda(float* y, const float* bias, int64_t m, int64_t n, cudaStream_t stream) {
  DT_NVTX_FN();
  return LaunchBiasAdd(y, bias, m, n, stream);
}

Status BiasAddCudaBf16(uint16_t* y, const float* bias, int64_t m, int64_t n, cudaStream_t stream) {
  DT_NVTX_FN();
  return LaunchBiasAdd(detail::AsBf16(y), bias, m, n, stream);
}

Status BiasAddCudaBf16(uint16_t* y, const uint16_t* bias, int64_t m, int64_t n, cudaStream_t stream) {
  DT_NVTX_FN();
  return LaunchBiasAdd(detail::AsBf16(y), detail::AsBf16(bias), m, n, stream);
}

Status BiasGradCuda(float* dbias, const float* dy, int64_t m, int64_t n, bool accumulate, cudaStream_t stream) {
  DT_NVTX_FN();
  return LaunchBiasGrad(dbias, dy, m, n, accumulate, nullptr, stream);
}

Status BiasGradCuda(float* dbias, const float* dy, int64_t m, int64_t n, bool accumulate, float* scratch,
                    cudaStream_t stream) {
  DT_NVTX_FN();
  return LaunchBiasGrad(dbias, dy, m, n, accumulate, scratch, stream);
}

Status BiasGradCudaBf16(float* dbias, const uint16_t* dy, int64_t m, int64_t n, bool accumulate, float* scratch,
                        cudaStream_t stream) {
  DT_NVTX_FN();
  return LaunchBiasGrad(dbias, detail::AsBf16(dy), m, n, accumulate, scratch, stream);
}

Status BiasAddCudaF16(uint16_t* y, const float* bias, int64_t m, int64_t n, cudaStream_t stream) {
  DT_NVTX_FN();
  return LaunchBiasAdd(detail::AsF16(y), bias, m, n, stream);
}

Status BiasAddCudaF16(uint16_t* y, const uint16_t* bias, int64_t m, int64_t n, cudaStream_t stream) {
  DT_NVTX_FN();
  return LaunchBiasAdd(detail::AsF16(y), detail::AsF16(bias), m, n, stream);
}

Status BiasGradCudaF16(float* dbias, const uint16_t* dy, int64_t m, int64_t n, bool accumulate, float* scratch,
                       cudaStream_t stream) {
  DT_NVTX_FN();
  return LaunchBiasGrad(dbias, detail::AsF16(dy), m, n, accumulate, scratch, stream);
}

}  // namespace dtrain::ops
