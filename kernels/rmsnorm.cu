// RMSNorm kernels, f32, bf16 and fp16 activations (fp32 math, f32 rstd; f32 weight and dweight, or either bf16
// beside bf16 x).
// Rows use one warp each (8 rows per 256-thread block) with V-element accesses (128-bit when aligned). Rows of up to
// kMaxCols = 2048 columns (Llama-3.2-1B's hidden in any dtype) are held by the lanes in registers: each lane owns
// columns (it * 32 + lane) * V + [0, V) for it < kCols / (32 V), so its share is at most 64 floats whatever V is.
// The forward then reads x once; the backward keeps its lane's dweight sums in registers across the block's rows,
// re-reads the row for dx from L1 instead of holding it, and leaves one partial sum per block, added up in block order
// by a small finish kernel. Wider rows take a dx pass and a column pass over row chunks. dweight takes no atomics; the
// optional fused amax (max |y| or |dx| as stored, kernels/fp8.h's Fp8Amax) is one atomicMax per warp at most.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "core/cuda_check.h"
#include "core/nvtx.h"
#include "kernels/bf16_vec.cuh"
#include "kernels/rmsnorm.h"

namespace dtrain::ops {

namespace {

using detail::FromF32;
using detail::LoadF32;
using detail::LoadV;
using detail::StoreF32;
using detail::StoreV;
using detail::ToF32;
using detail::WarpSum;

constexpr int kRowsPerBlock = 8;    // one warp per row, 256 threads
constexpr int64_t kMaxCols = 2048;  // widest row held in registers (64 floats a lane)
constexpr int64_t kFusedRows = 64;  // rows per block of the one-pass backward (16384 rows: 256 blocks)
constexpr int kRowLanes = 8;        // the column pass: (32, kRowLanes) blocks over row chunks (as in layernorm.cu)
constexpr int64_t kChunkRows = 128;
constexpr int64_t kMaxChunks = 64;
constexpr int kFinishLanes = 16;  // chunk lanes of the finish kernel's (32, kFinishLanes) blocks

// V weights as floats: f32 weights (V / 4 128-bit loads when V % 4 == 0), or bf16 ones (bf16 master weights, widened
// exactly: the same floats as an f32 copy of them, so both give the same y and dx bit for bit).
template <int V>
__device__ __forceinline__ void LoadWeight(const float* p, float (&f)[V]) {
  LoadF32<V>(p, f);
}
template <int V>
__device__ __forceinline__ void LoadWeight(const __nv_bfloat16* p, float (&f)[V]) {
  LoadV<V>(p, f);
}

// Forward, row held in registers: kCols >= c (lanes skip columns past c).
template <int kCols, int V, typename T, typename W>
__global__ void __launch_bounds__(kRowsPerBlock * 32)
    RmsNormForwardCachedKernel(T* y, float* rstd, const T* x, const W* weight, int64_t n, int64_t c, float eps,
                               float* amax) {
  constexpr int kSlots = kCols / (32 * V);
  const int64_t row = blockIdx.x * int64_t{kRowsPerBlock} + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (row >= n) return;  // whole warps exit together: the shuffles below stay full-warp
  const T* xr = x + row * c;
  float v[kSlots][V];
  float sq = 0.f;
#pragma unroll
  for (int it = 0; it < kSlots; ++it) {
    const int64_t j = (int64_t{it} * 32 + lane) * V;
    if (j >= c) continue;
    LoadV<V>(xr + j, v[it]);
#pragma unroll
    for (int k = 0; k < V; ++k) sq += v[it][k] * v[it][k];
  }
  const float rs = rsqrtf(WarpSum(sq) / c + eps);
  T* yr = y + row * c;
  unsigned m = 0;  // max |y| over this lane's stores (with amax)
#pragma unroll
  for (int it = 0; it < kSlots; ++it) {
    const int64_t j = (int64_t{it} * 32 + lane) * V;
    if (j >= c) continue;
    float w[V];
    LoadWeight<V>(weight + j, w);
#pragma unroll
    for (int k = 0; k < V; ++k) v[it][k] = v[it][k] * rs * w[k];
    StoreV<V>(yr + j, v[it]);
    if (amax != nullptr) detail::FoldAmax<V, T>(m, v[it]);
  }
  detail::WarpAmaxToGlobal(amax, m);
  if (lane == 0) rstd[row] = rs;
}

// Forward, any c: the row is re-read (from L1/L2) for y.
template <int V, typename T, typename W>
__global__ void RmsNormForwardKernel(T* y, float* rstd, const T* x, const W* weight, int64_t n, int64_t c, float eps,
                                     float* amax) {
  const int64_t row = blockIdx.x * int64_t{kRowsPerBlock} + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (row >= n) return;
  const T* xr = x + row * c;
  float v[V];
  float sq = 0.f;
  for (int64_t j = lane * V; j < c; j += 32 * V) {
    LoadV<V>(xr + j, v);
#pragma unroll
    for (int k = 0; k < V; ++k) sq += v[k] * v[k];
  }
  const float rs = rsqrtf(WarpSum(sq) / c + eps);
  T* yr = y + row * c;
  unsigned m = 0;
  for (int64_t j = lane * V; j < c; j += 32 * V) {
    float w[V];
    LoadV<V>(xr + j, v);
    LoadWeight<V>(weight + j, w);
#pragma unroll
    for (int k = 0; k < V; ++k) v[k] = v[k] * rs * w[k];
    StoreV<V>(yr + j, v);
    if (amax != nullptr) detail::FoldAmax<V, T>(m, v);
  }
  detail::WarpAmaxToGlobal(amax, m);
  if (lane == 0) rstd[row] = rs;
}

// The one-pass backward (kCols >= c): block b takes rows [b * kFusedRows, (b + 1) * kFusedRows), warp w of it rows
// w, w + kRowsPerBlock, ... of those. Per row: mean_gx = rs / c * sum_c dy * weight * x (one read of x, dy), then
// dx and the lane's dweight sums (a second read, from L1). The block's warps then add their sums in a fixed tree
// (4 + 4, 2 + 2, 1 + 1) through shared memory and warp 0 writes part[b][c]. Bitwise reproducible. With amax (zeroed by
// the launcher): max |dx| as stored.
template <int kCols, int V, typename T, typename W>
__global__ void __launch_bounds__(kRowsPerBlock * 32)
    RmsNormBackwardFusedKernel(T* dx, float* part, const T* x, const W* weight, const float* rstd, const T* dy,
                               int64_t n, int64_t c, bool accumulate, float* amax) {
  constexpr int kSlots = kCols / (32 * V);
  __shared__ __align__(16) float red[kRowsPerBlock / 2][kCols];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  float acc[kSlots][V];
#pragma unroll
  for (int it = 0; it < kSlots; ++it) {
#pragma unroll
    for (int k = 0; k < V; ++k) acc[it][k] = 0.f;
  }
  const int64_t row1 = min(n, (blockIdx.x + int64_t{1}) * kFusedRows);
  unsigned m = 0;  // max |dx| over this lane's stores (with amax)
  for (int64_t row = blockIdx.x * kFusedRows + warp; row < row1; row += kRowsPerBlock) {
    const T* xr = x + row * c;
    const T* dyr = dy + row * c;
    const float rs = rstd[row];
    float sum_gx = 0.f;
#pragma unroll
    for (int it = 0; it < kSlots; ++it) {
      const int64_t j = (int64_t{it} * 32 + lane) * V;
      if (j >= c) continue;
      float xv[V], d[V], w[V];
      LoadV<V>(xr + j, xv);
      LoadV<V>(dyr + j, d);
      LoadWeight<V>(weight + j, w);
#pragma unroll
      for (int k = 0; k < V; ++k) sum_gx += d[k] * w[k] * xv[k];
    }
    const float mean_gx = WarpSum(sum_gx) * rs / c;  // mean_c(g * xhat)
    T* dxr = dx + row * c;
#pragma unroll
    for (int it = 0; it < kSlots; ++it) {
      const int64_t j = (int64_t{it} * 32 + lane) * V;
      if (j >= c) continue;
      float xv[V], d[V], w[V];
      LoadV<V>(xr + j, xv);
      LoadV<V>(dyr + j, d);
      LoadWeight<V>(weight + j, w);
#pragma unroll
      for (int k = 0; k < V; ++k) {
        const float xhat = xv[k] * rs;
        acc[it][k] += d[k] * xhat;
        d[k] = rs * (d[k] * w[k] - xhat * mean_gx);
      }
      if (accumulate) {
        LoadV<V>(dxr + j, xv);
#pragma unroll
        for (int k = 0; k < V; ++k) d[k] += xv[k];
      }
      StoreV<V>(dxr + j, d);
      if (amax != nullptr) detail::FoldAmax<V, T>(m, d);
    }
  }
  detail::WarpAmaxToGlobal(amax, m);
  for (int half = kRowsPerBlock / 2; half > 0; half /= 2) {
    if (warp >= half && warp < 2 * half) {
#pragma unroll
      for (int it = 0; it < kSlots; ++it) StoreF32<V>(&red[warp - half][(it * 32 + lane) * V], acc[it]);
    }
    __syncthreads();
    if (warp < half) {
#pragma unroll
      for (int it = 0; it < kSlots; ++it) {
        float t[V];
        LoadF32<V>(&red[warp][(it * 32 + lane) * V], t);
#pragma unroll
        for (int k = 0; k < V; ++k) acc[it][k] += t[k];
      }
    }
    __syncthreads();
  }
  if (warp == 0) {
    float* out = part + blockIdx.x * c;
#pragma unroll
    for (int it = 0; it < kSlots; ++it) {
      const int64_t j = (int64_t{it} * 32 + lane) * V;
      if (j >= c) continue;
#pragma unroll
      for (int k = 0; k < V; ++k) out[j + k] = acc[it][k];  // scalar: part rows of c floats need not be aligned
    }
  }
}

// dx of rows wider than kMaxCols (any V): two reads of the row, the second from L1/L2.
template <int V, typename T, typename W>
__global__ void RmsNormBackwardDxKernel(T* dx, const T* x, const W* weight, const float* rstd, const T* dy, int64_t n,
                                        int64_t c, bool accumulate, float* amax) {
  const int64_t row = blockIdx.x * int64_t{kRowsPerBlock} + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (row >= n) return;
  const T* xr = x + row * c;
  const T* dyr = dy + row * c;
  const float rs = rstd[row];
  float xv[V], d[V], w[V];
  float sum_gx = 0.f;
  for (int64_t j = lane * V; j < c; j += 32 * V) {
    LoadV<V>(xr + j, xv);
    LoadV<V>(dyr + j, d);
    LoadWeight<V>(weight + j, w);
#pragma unroll
    for (int k = 0; k < V; ++k) sum_gx += d[k] * w[k] * xv[k];
  }
  const float mean_gx = WarpSum(sum_gx) * rs / c;
  T* dxr = dx + row * c;
  unsigned m = 0;
  for (int64_t j = lane * V; j < c; j += 32 * V) {
    LoadV<V>(xr + j, xv);
    LoadV<V>(dyr + j, d);
    LoadWeight<V>(weight + j, w);
#pragma unroll
    for (int k = 0; k < V; ++k) d[k] = rs * (d[k] * w[k] - xv[k] * rs * mean_gx);
    if (accumulate) {
      LoadV<V>(dxr + j, xv);
#pragma unroll
      for (int k = 0; k < V; ++k) d[k] += xv[k];
    }
    StoreV<V>(dxr + j, d);
    if (amax != nullptr) detail::FoldAmax<V, T>(m, d);
  }
  detail::WarpAmaxToGlobal(amax, m);
}

// dweight partial sums of rows wider than kMaxCols. Block (32, kRowLanes), blockIdx = (column tile of 32 V, row
// chunk): lane (x, y) strides over the chunk's rows for its V columns, then the lanes' sums are added in a fixed
// order and written to part[chunk][c].
template <int V, typename T>
__global__ void RmsNormBackwardParamsKernel(float* part, const T* x, const float* rstd, const T* dy, int64_t n,
                                            int64_t c, int64_t chunk_rows) {
  __shared__ float lanes[kRowLanes][32 * V + 1];
  const int64_t col = (blockIdx.x * int64_t{32} + threadIdx.x) * V;
  const int64_t row0 = blockIdx.y * chunk_rows, row1 = min(n, row0 + chunk_rows);
  float s[V] = {};
  if (col < c) {
    for (int64_t row = row0 + threadIdx.y; row < row1; row += kRowLanes) {
      float d[V], xv[V];
      LoadV<V>(dy + row * c + col, d);
      LoadV<V>(x + row * c + col, xv);
      const float rs = rstd[row];
#pragma unroll
      for (int k = 0; k < V; ++k) s[k] += d[k] * xv[k] * rs;
    }
  }
#pragma unroll
  for (int k = 0; k < V; ++k) lanes[threadIdx.y][threadIdx.x * V + k] = s[k];
  __syncthreads();
  for (int k = threadIdx.y * 32 + threadIdx.x; k < 32 * V; k += 32 * kRowLanes) {
    const int64_t cc = blockIdx.x * int64_t{32} * V + k;
    if (cc >= c) break;
    float t = 0.f;
    for (int r = 0; r < kRowLanes; ++r) t += lanes[r][k];
    part[blockIdx.y * c + cc] = t;
  }
}

// part[parts][c] -> dweight +=. Block (32, kFinishLanes) for 32 columns: lane y adds parts y, y + kFinishLanes, ...
// in order, then lane 0 adds the lanes' sums in order.
template <typename D>
__global__ void RmsNormParamsFinishKernel(D* dweight, const float* part, int64_t parts, int64_t c) {
  __shared__ float lanes[kFinishLanes][33];
  const int64_t col = blockIdx.x * int64_t{32} + threadIdx.x;
  float t = 0.f;
  if (col < c) {
#pragma unroll 8
    for (int64_t k = threadIdx.y; k < parts; k += kFinishLanes) t += part[k * c + col];
  }
  lanes[threadIdx.y][threadIdx.x] = t;
  __syncthreads();
  if (threadIdx.y != 0 || col >= c) return;
  float sum = 0.f;
  for (int r = 0; r < kFinishLanes; ++r) sum += lanes[r][threadIdx.x];
  dweight[col] = FromF32<D>(ToF32(dweight[col]) + sum);
}

// dweight += the parts' sums: f32, or bf16 (bf16 gradients: rounded to nearest once).
void LaunchParamsFinish(void* dweight, bool dweight_bf16, const float* part, int64_t parts, int64_t c,
                        cudaStream_t stream) {
  const dim3 grid(static_cast<unsigned>((c + 31) / 32)), block(32, kFinishLanes);
  if (dweight_bf16) {
    RmsNormParamsFinishKernel<<<grid, block, 0, stream>>>(static_cast<__nv_bfloat16*>(dweight), part, parts, c);
  } else {
    RmsNormParamsFinishKernel<<<grid, block, 0, stream>>>(static_cast<float*>(dweight), part, parts, c);
  }
}

unsigned RowBlocks(int64_t n) { return static_cast<unsigned>((n + kRowsPerBlock - 1) / kRowsPerBlock); }
int64_t NumChunks(int64_t n) { return std::clamp<int64_t>((n + kChunkRows - 1) / kChunkRows, 1, kMaxChunks); }
int64_t FusedBlocks(int64_t n) { return (n + kFusedRows - 1) / kFusedRows; }

// Calls launch(std::integral_constant<int, kCols>, std::integral_constant<int, V>) for the register-held kernels:
// kCols 1024 or 2048 with 128-bit accesses, 2048 with scalar ones. Returns false when c > kMaxCols.
template <typename T, typename Launch>
bool DispatchCached(int64_t c, bool vec, Launch launch) {
  constexpr int kV = 16 / sizeof(T);
  if (c > kMaxCols) return false;
  if (!vec) {
    launch(std::integral_constant<int, 2048>{}, std::integral_constant<int, 1>{});
  } else if (c <= 1024) {
    launch(std::integral_constant<int, 1024>{}, std::integral_constant<int, kV>{});
  } else {
    launch(std::integral_constant<int, 2048>{}, std::integral_constant<int, kV>{});
  }
  return true;
}

template <typename T, typename W>
Status LaunchForward(T* y, float* rstd, const T* x, const W* weight, int64_t n, int64_t c, float eps, float* amax,
                     cudaStream_t stream) {
  if (amax != nullptr) DT_CUDA_CHECK(cudaMemsetAsync(amax, 0, sizeof(float), stream));
  if (n == 0) return Status::OK();
  constexpr int kV = 16 / sizeof(T);
  const bool vec = detail::VecWidth<T>(c, {y, x, weight}) == kV;
  const bool cached = DispatchCached<T>(c, vec, [&](auto cols, auto v) {
    RmsNormForwardCachedKernel<decltype(cols)::value, decltype(v)::value>
        <<<RowBlocks(n), kRowsPerBlock * 32, 0, stream>>>(y, rstd, x, weight, n, c, eps, amax);
  });
  if (!cached && vec) {
    RmsNormForwardKernel<kV><<<RowBlocks(n), kRowsPerBlock * 32, 0, stream>>>(y, rstd, x, weight, n, c, eps, amax);
  } else if (!cached) {
    RmsNormForwardKernel<1><<<RowBlocks(n), kRowsPerBlock * 32, 0, stream>>>(y, rstd, x, weight, n, c, eps, amax);
  }
  DT_CUDA_CHECK_LAUNCH();
  return Status::OK();
}

template <typename T, typename W>
Status LaunchBackward(T* dx, void* dweight, bool dweight_bf16, const T* x, const W* weight, const float* rstd,
                      const T* dy, int64_t n, int64_t c, float* scratch, bool accumulate_dx, float* amax,
                      cudaStream_t stream) {
  if (amax != nullptr) DT_CUDA_CHECK(cudaMemsetAsync(amax, 0, sizeof(float), stream));
  if (n == 0) return Status::OK();
  if (scratch == nullptr) return Status::InvalidArgument("RmsNormBackwardCuda: scratch is null");
  constexpr int kV = 16 / sizeof(T);
  const bool vec = detail::VecWidth<T>(c, {dx, x, dy, weight}) == kV;
  const bool fused = DispatchCached<T>(c, vec, [&](auto cols, auto v) {
    RmsNormBackwardFusedKernel<decltype(cols)::value, decltype(v)::value>
        <<<static_cast<unsigned>(FusedBlocks(n)), kRowsPerBlock * 32, 0, stream>>>(dx, scratch, x, weight, rstd, dy, n,
                                                                                   c, accumulate_dx, amax);
  });
  if (fused) {
    DT_CUDA_CHECK_LAUNCH();
    LaunchParamsFinish(dweight, dweight_bf16, scratch, FusedBlocks(n), c, stream);
    DT_CUDA_CHECK_LAUNCH();
    return Status::OK();
  }
  const int64_t chunks = NumChunks(n), chunk_rows = (n + chunks - 1) / chunks;
  if (vec) {
    RmsNormBackwardDxKernel<kV>
        <<<RowBlocks(n), kRowsPerBlock * 32, 0, stream>>>(dx, x, weight, rstd, dy, n, c, accumulate_dx, amax);
    DT_CUDA_CHECK_LAUNCH();
    const dim3 grid(static_cast<unsigned>((c + 32 * kV - 1) / (32 * kV)), static_cast<unsigned>(chunks));
    RmsNormBackwardParamsKernel<kV><<<grid, dim3(32, kRowLanes), 0, stream>>>(scratch, x, rstd, dy, n, c, chunk_rows);
  } else {
    RmsNormBackwardDxKernel<1>
        <<<RowBlocks(n), kRowsPerBlock * 32, 0, stream>>>(dx, x, weight, rstd, dy, n, c, accumulate_dx, amax);
    DT_CUDA_CHECK_LAUNCH();
    const dim3 grid(static_cast<unsigned>((c + 31) / 32), static_cast<unsigned>(chunks));
    RmsNormBackwardParamsKernel<1><<<grid, dim3(32, kRowLanes), 0, stream>>>(scratch, x, rstd, dy, n, c, chunk_rows);
  }
  DT_CUDA_CHECK_LAUNCH();
  LaunchParamsFinish(dweight, dweight_bf16, scratch, chunks, c, stream);
  DT_CUDA_CHECK_LAUNCH();
  return Status::OK();
}

}  // namespace

int64_t RmsNormBackwardScratchFloats(int64_t n, int64_t c) { return std::max(NumChunks(n), FusedBlocks(n)) * c; }

Status RmsNormForwardCuda(float* y, float* rstd, const float* x, const float* weight, int64_t n, int64_t c, float eps,
                          cudaStream_t stream) {
  DT_NVTX_FN();
  return LaunchForward(y, rstd, x, weight, n, c, eps, nullptr, stream);
}

Status RmsNormForwardCudaBf16(uint16_t* y, float* rstd, const uint16_t* x, const float* weight, int64_t n, int64_t c,
                              float eps, float* amax, cudaStream_t stream) {
  DT_NVTX_FN();
  return LaunchForward(detail::AsBf16(y), rstd, detail::AsBf16(x), weight, n, c, eps, amax, stream);
}

Status RmsNormForwardCudaF16(uint16_t* y, float* rstd, const uint16_t* x, const float* weight, int64_t n, int64_t c,
                             float eps, float* amax, cudaStream_t stream) {
  DT_NVTX_FN();
  return LaunchForward(detail::AsF16(y), rstd, detail::AsF16(x), weight, n, c, eps, amax, stream);
}

Status RmsNormBackwardCuda(float* dx, float* dweight, const float* x, const float* weight, const float* rstd,
                           const float* dy, int64_t n, int64_t c, float* scratch, bool accumulate_dx,
                           cudaStream_t stream) {
  DT_NVTX_FN();
  return LaunchBackward(dx, dweight, false, x, weight, rstd, dy, n, c, scratch, accumulate_dx, nullptr, stream);
}

Status RmsNormBackwardCudaBf16(uint16_t* dx, void* dweight, bool dweight_bf16, const uint16_t* x, const float* weight,
                               const float* rstd, const uint16_t* dy, int64_t n, int64_t c, float* scratch,
                               bool accumulate_dx, float* amax, cudaStream_t stream) {
  DT_NVTX_FN();
  return LaunchBackward(detail::AsBf16(dx), dweight, dweight_bf16, detail::AsBf16(x), weight, rstd, detail::AsBf16(dy),
                        n, c, scratch, accumulate_dx, amax, stream);
}

Status RmsNormForwardCudaBf16W(uint16_t* y, float* rstd, const uint16_t* x, const uint16_t* weight, int64_t n,
                               int64_t c, float eps, float* amax, cudaStream_t stream) {
  DT_NVTX_FN();
  return LaunchForward(detail::AsBf16(y), rstd, detail::AsBf16(x), detail::AsBf16(weight), n, c, eps, amax, stream);
}

Status RmsNormBackwardCudaBf16W(uint16_t* dx, void* dweight, bool dweight_bf16, const uint16_t* x,
                                const uint16_t* weight, const float* rstd, const uint16_t* dy, int64_t n, int64_t c,
                                float* scratch, bool accumulate_dx, float* amax, cudaStream_t stream) {
  DT_NVTX_FN();
  return LaunchBackward(detail::AsBf16(dx), dweight, dweight_bf16, detail::AsBf16(x), detail::AsBf16(weight), rstd,
                        detail::AsBf16(dy), n, c, scratch, accumulate_dx, amax, stream);
}

Status RmsNormBackwardCudaF16(uint16_t* dx, float* dweight, const uint16_t* x, const float* weight, const float* rstd,
                              const uint16_t* dy, int64_t n, int64_t c, float* scratch, bool accumulate_dx, float* amax,
                              cudaStream_t stream) {
  DT_NVTX_FN();
  return LaunchBackward(detail::AsF16(dx), dweight, false, detail::AsF16(x), weight, rstd, detail::AsF16(dy), n, c,
                        scratch, accumulate_dx, amax, stream);
}

}  // namespace dtrain::ops
