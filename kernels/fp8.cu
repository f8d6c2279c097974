// FP8 kernels for per-tensor current scaling (see fp8.h): amax, scale from amax, and the cast with an optional
// transposed copy. Every scale is read from device memory: nothing here synchronizes the host, so a quantize ->
// GEMM chain can be captured in a CUDA graph.
//
// Conversions are cuda_fp8.h's __nv_cvt_float2_to_fp8x2(.., __NV_SATFINITE, ..): on sm_89+ one
// cvt.rn.satfinite.{e4m3,e5m2}x2.f32 instruction per pair, round to nearest even with saturation, which is what
// FloatToFp8 (fp8.cc) computes on the host. x * scale is __fmul_rn: one f32 rounding, never fused, as on the host.
#include <cuda_bf16.h>
#include <cuda_fp8.h>

#include <cfloat>
#include <cstdint>

#include "core/cuda_check.h"
#include "core/nvtx.h"
#include "kernels/bf16_vec.cuh"
#include "kernels/fp8.h"

namespace dtrain::ops {

namespace {

using detail::AbsBits;
using detail::LoadV;

constexpr int kThreads = 256;
constexpr int kTile = 64;  // the transposing cast's tile: 64 x 64 elements per 256-thread block
static_assert(kTile == kFp8CastTileRows, "col_partials rows are the cast's tiles (fp8.h)");
constexpr int kTileStride = 66;       // bytes per tile row in shared memory: the column gather below is conflict-free
constexpr int64_t kMaxBlocks = 2048;  // grid-stride loops: enough blocks to fill an H200 several times

template <Fp8Format F>
__device__ __forceinline__ uint16_t ToFp8x2(float lo, float hi) {
  constexpr __nv_fp8_interpretation_t kInterp = F == Fp8Format::kE4M3 ? __NV_E4M3 : __NV_E5M2;
  return __nv_cvt_float2_to_fp8x2(make_float2(lo, hi), __NV_SATFINITE, kInterp);  // .x -> low byte
}

// V bytes q[0..V) = fp8(f[i] * scale).
template <Fp8Format F, int V>
__device__ __forceinline__ void Quantize(const float (&f)[V], float scale, uint8_t (&q)[V]) {
#pragma unroll
  for (int i = 0; i + 1 < V; i += 2) {
    const uint16_t pair = ToFp8x2<F>(__fmul_rn(f[i], scale), __fmul_rn(f[i + 1], scale));
    q[i] = static_cast<uint8_t>(pair & 0xFF);
    q[i + 1] = static_cast<uint8_t>(pair >> 8);
  }
  if constexpr (V % 2 == 1) q[V - 1] = static_cast<uint8_t>(ToFp8x2<F>(__fmul_rn(f[V - 1], scale), 0.f) & 0xFF);
}

// V bytes to p in one store when V is 4 or 8 (p then V-byte aligned), else byte by byte.
template <int V>
__device__ __forceinline__ void StoreBytes(uint8_t* p, const uint8_t (&q)[V]) {
  if constexpr (V == 8) {
    uint2 w;
    memcpy(&w, q, 8);
    *reinterpret_cast<uint2*>(p) = w;
  } else if constexpr (V == 4) {
    uint32_t w;
    memcpy(&w, q, 4);
    *reinterpret_cast<uint32_t*>(p) = w;
  } else {
#pragma unroll
    for (int i = 0; i < V; ++i) p[i] = q[i];
  }
}

// ---- amax -------------------------------------------------------------------------------------------------------

// *amax = max(*amax, max |x|) over the |x| bit patterns: for non-negative floats (NaN above inf) the unsigned order
// of the bits is the order of the values, so atomicMax on them is exact and order-independent.
template <int V, typename T>
__global__ void __launch_bounds__(kThreads) AmaxKernel(float* amax, const T* x, int64_t n) {
  unsigned m = 0;
  detail::GridStrideVec<V>(n, [&](int64_t i, auto w) {
    constexpr int W = decltype(w)::value;
    float f[W];
    LoadV<W>(x + i, f);
#pragma unroll
    for (int k = 0; k < W; ++k) m = max(m, AbsBits(f[k]));
  });
  for (int off = 16; off > 0; off /= 2) m = max(m, __shfl_xor_sync(0xffffffffu, m, off));
  __shared__ unsigned warp_max[kThreads / 32];
  if (threadIdx.x % 32 == 0) warp_max[threadIdx.x / 32] = m;
  __syncthreads();
  if (threadIdx.x == 0) {
    for (int w = 1; w < kThreads / 32; ++w) m = max(m, warp_max[w]);
    atomicMax(reinterpret_cast<unsigned*>(amax), m);
  }
}

// ---- scale --------------------------------------------------------------------------------------------------------

// The formula of Fp8ScaleFromAmax (fp8.cc), in the same f32 operations (__fdiv_rn: IEEE division, as on the host).
__device__ __forceinline__ float ScaleOf(float amax, float fp8_max) {
  float s = 1.f;
  if (amax > 0.f && isfinite(amax)) {
    s = __fdiv_rn(fp8_max, amax);
    if (isinf(s)) s = FLT_MAX;
    s = __uint_as_float(__float_as_uint(s) & 0xFF800000u);
  }
  return s;
}

__global__ void ScaleKernel(float* scale, float* scale_inv, const float* amax_ptr, float fp8_max) {
  const float s = ScaleOf(*amax_ptr, fp8_max);
  *scale = s;
  *scale_inv = __fdiv_rn(1.f, s);
}

__global__ void SetAmaxKernel(float* amax, float value) { *amax = value; }

// Where a cast kernel takes its scale: the given device float (CastToFp8Cuda), or from *amax in every block, the
// first thread of the grid also writing scale and scale_inv for the GEMM (Fp8CastFromAmaxCuda: no scale kernel).
struct ScaleSource {
  const float* scale = nullptr;
  const float* amax = nullptr;
  float* scale_out = nullptr;
  float* scale_inv_out = nullptr;
  float fp8_max = 0.f;

  __device__ __forceinline__ float Load() const {
    if (amax == nullptr) return *scale;
    const float s = ScaleOf(*amax, fp8_max);
    if (blockIdx.x == 0 && blockIdx.y == 0 && threadIdx.x == 0) {
      *scale_out = s;
      *scale_inv_out = __fdiv_rn(1.f, s);
    }
    return s;
  }
};

// ---- cast ---------------------------------------------------------------------------------------------------------

// out = fp8(x * scale), flat: V-element chunks (128-bit loads when V > 1), then the tail one by one.
template <Fp8Format F, int V, typename T>
__global__ void __launch_bounds__(kThreads) CastKernel(uint8_t* out, const T* x, int64_t n, ScaleSource src) {
  const float scale = src.Load();
  detail::GridStrideVec<V>(n, [&](int64_t i, auto w) {
    constexpr int W = decltype(w)::value;
    float f[W];
    LoadV<W>(x + i, f);
    uint8_t q[W];
    Quantize<F>(f, scale, q);
    StoreBytes<W>(out + i, q);
  });
}

// One 64 x 64 tile of x [rows, cols] per block: out (optional) written row by row as it is converted, out_t
// [cols, rows] from the tile in shared memory. V > 1 needs cols % V == 0 and 16-byte aligned x and out; vec_t
// (16-byte stores of out_t) needs rows % 16 == 0 and a 16-byte aligned out_t. kColSums: also
// col_partials[blockIdx.y * cols + c] = the f32 sum of x[r0 .. r0 + 63, c] (unscaled), each thread's rows in order,
// then the threads' sums in order: deterministic.
template <Fp8Format F, int V, bool kColSums, typename T>
__global__ void __launch_bounds__(kThreads)
    CastTransposeKernel(uint8_t* out, uint8_t* out_t, float* col_partials, const T* x, int64_t rows, int64_t cols,
                        ScaleSource src, bool vec_t) {
  constexpr int kLanesPerRow = kTile / V;  // threads sharing one tile row
  constexpr int kRowsPerPass = kThreads / kLanesPerRow;
  __shared__ uint8_t tile[kTile][kTileStride];
  __shared__ float col_sum[kColSums ? kRowsPerPass : 1][kTile];
  const float scale = src.Load();
  const int64_t r0 = int64_t{blockIdx.y} * kTile, c0 = int64_t{blockIdx.x} * kTile;
  const int tc = (threadIdx.x % kLanesPerRow) * V;
  float sum[V] = {};
  for (int tr = threadIdx.x / kLanesPerRow; tr < kTile; tr += kRowsPerPass) {
    const int64_t r = r0 + tr, c = c0 + tc;
    if (r >= rows || c >= cols) continue;  // with V > 1, cols % V == 0: a chunk is wholly in or out
    float f[V];
    LoadV<V>(x + r * cols + c, f);
    if constexpr (kColSums) {
#pragma unroll
      for (int i = 0; i < V; ++i) sum[i] += f[i];
    }
    uint8_t q[V];
    Quantize<F>(f, scale, q);
    if (out != nullptr) StoreBytes<V>(out + r * cols + c, q);
#pragma unroll
    for (int i = 0; i < V; ++i) tile[tr][tc + i] = q[i];
  }
  if constexpr (kColSums) {
#pragma unroll
    for (int i = 0; i < V; ++i) col_sum[threadIdx.x / kLanesPerRow][tc + i] = sum[i];
  }
  __syncthreads();
  if constexpr (kColSums) {
    if (threadIdx.x < kTile && c0 + threadIdx.x < cols) {
      float total = 0.f;
      for (int k = 0; k < kRowsPerPass; ++k) total += col_sum[k][threadIdx.x];
      col_partials[int64_t{blockIdx.y} * cols + c0 + threadIdx.x] = total;
    }
  }
  // out_t row c0 + j holds tile column j: 4 threads per row, 16 tile rows (16 bytes) each. The 32 threads of a warp
  // read 8 columns of 4 row groups; with a 66-byte row stride those fall in distinct banks.
  const int j = threadIdx.x / 4, i0 = (threadIdx.x % 4) * 16;
  const int64_t row_t = c0 + j, col_t = r0 + i0;
  if (row_t >= cols || col_t >= rows) return;
  uint8_t* dst = out_t + row_t * rows + col_t;
  if (vec_t) {  // rows % 16 == 0: all 16 bytes are in range
    uint8_t v[16];
#pragma unroll
    for (int i = 0; i < 16; ++i) v[i] = tile[i0 + i][j];
    uint4 w;
    memcpy(&w, v, 16);
    *reinterpret_cast<uint4*>(dst) = w;
  } else {
    for (int i = 0; i < 16 && col_t + i < rows; ++i) dst[i] = tile[i0 + i][j];
  }
}

template <Fp8Format F, typename T>
Status LaunchCast(uint8_t* out, uint8_t* out_t, float* col_partials, const T* x, int64_t rows, int64_t cols,
                  const ScaleSource& scale, cudaStream_t stream) {
  constexpr int kV = 16 / sizeof(T);  // 128-bit loads: 8 bf16 or 4 f32
  if (out_t == nullptr) {
    const int64_t n = rows * cols;
    const unsigned blocks = detail::GridFor((n + kV - 1) / kV, kThreads, kMaxBlocks);
    if (detail::Aligned16({x, out})) {
      CastKernel<F, kV><<<blocks, kThreads, 0, stream>>>(out, x, n, scale);
    } else {
      CastKernel<F, 1><<<blocks, kThreads, 0, stream>>>(out, x, n, scale);
    }
    DT_CUDA_CHECK_LAUNCH();
    return Status::OK();
  }
  const int64_t tiles_r = (rows + kTile - 1) / kTile, tiles_c = (cols + kTile - 1) / kTile;
  DT_CHECK_ARG(tiles_r <= 65535 && tiles_c <= 0x7FFFFFFF,
               "CastToFp8Cuda: x [" << rows << "," << cols << "] has more than 65535*64 rows; split it");
  const dim3 grid(static_cast<unsigned>(tiles_c), static_cast<unsigned>(tiles_r));
  const bool vec_t = rows % 16 == 0 && detail::Aligned16({out_t});
  const bool vec = cols % kV == 0 && detail::Aligned16({x, out});
  const auto kernel = col_partials != nullptr
                          ? (vec ? CastTransposeKernel<F, kV, true, T> : CastTransposeKernel<F, 1, true, T>)
                          : (vec ? CastTransposeKernel<F, kV, false, T> : CastTransposeKernel<F, 1, false, T>);
  kernel<<<grid, kThreads, 0, stream>>>(out, out_t, col_partials, x, rows, cols, scale, vec_t);
  DT_CUDA_CHECK_LAUNCH();
  return Status::OK();
}

template <typename T>
Status Cast(const char* op, uint8_t* out, uint8_t* out_t, float* col_partials, const T* x, int64_t rows, int64_t cols,
            ScaleSource scale, Fp8Format f, cudaStream_t stream) {
  DT_CHECK_ARG(rows >= 0 && cols >= 0, op << ": negative shape [" << rows << "," << cols << "]");
  DT_CHECK_ARG(out != nullptr || out_t != nullptr, op << ": neither out nor out_t given");
  DT_CHECK_ARG(
      scale.scale != nullptr || (scale.amax != nullptr && scale.scale_out != nullptr && scale.scale_inv_out != nullptr),
      op << ": scale (or amax, scale and scale_inv) is null");
  DT_CHECK_ARG(col_partials == nullptr || out_t != nullptr, op << ": column sums need out_t (the tiled cast)");
  if (rows == 0 || cols == 0) return Status::OK();
  scale.fp8_max = Fp8Max(f);
  return f == Fp8Format::kE4M3 ? LaunchCast<Fp8Format::kE4M3>(out, out_t, col_partials, x, rows, cols, scale, stream)
                               : LaunchCast<Fp8Format::kE5M2>(out, out_t, col_partials, x, rows, cols, scale, stream);
}

ScaleSource Given(const float* scale) {
  ScaleSource s;
  s.scale = scale;
  return s;
}

ScaleSource FromAmax(const float* amax, float* scale, float* scale_inv) {
  ScaleSource s;
  s.amax = amax;
  s.scale_out = scale;
  s.scale_inv_out = scale_inv;
  return s;
}

template <typename T>
Status Amax(float* amax, const T* x, int64_t n, cudaStream_t stream) {
  DT_CHECK_ARG(n >= 0 && amax != nullptr, "Fp8AmaxCuda: n=" << n << ", amax " << amax);
  // Zeroed on the stream (capturable), then raised by every block.
  DT_CUDA_CHECK(cudaMemsetAsync(amax, 0, sizeof(float), stream));
  if (n == 0) return Status::OK();
  constexpr int kV = 16 / sizeof(T);
  const unsigned blocks = detail::GridFor((n + kV - 1) / kV, kThreads, kMaxBlocks);
  if (detail::Aligned16({x})) {
    AmaxKernel<kV><<<blocks, kThreads, 0, stream>>>(amax, x, n);
  } else {
    AmaxKernel<1><<<blocks, kThreads, 0, stream>>>(amax, x, n);
  }
  DT_CUDA_CHECK_LAUNCH();
  return Status::OK();
}

}  // namespace

Status Fp8AmaxCuda(float* amax, const float* x, int64_t n, cudaStream_t stream) {
  DT_NVTX_FN();
  return Amax(amax, x, n, stream);
}

Status Fp8AmaxCudaBf16(float* amax, const uint16_t* x, int64_t n, cudaStream_t stream) {
  DT_NVTX_FN();
  return Amax(amax, detail::AsBf16(x), n, stream);
}

Status Fp8ScaleCuda(float* scale, float* scale_inv, const float* amax, Fp8Format f, cudaStream_t stream) {
  DT_NVTX_FN();
  DT_CHECK_ARG(scale != nullptr && scale_inv != nullptr && amax != nullptr, "Fp8ScaleCuda: null pointer");
  ScaleKernel<<<1, 1, 0, stream>>>(scale, scale_inv, amax, Fp8Max(f));
  DT_CUDA_CHECK_LAUNCH();
  return Status::OK();
}

Status Fp8SetAmaxCuda(float* amax, float value, cudaStream_t stream) {
  DT_CHECK_ARG(amax != nullptr, "Fp8SetAmaxCuda: null amax");
  SetAmaxKernel<<<1, 1, 0, stream>>>(amax, value);
  DT_CUDA_CHECK_LAUNCH();
  return Status::OK();
}

Status CastToFp8Cuda(uint8_t* out, uint8_t* out_t, const float* x, int64_t rows, int64_t cols, const float* scale,
                     Fp8Format f, cudaStream_t stream) {
  DT_NVTX_FN();
  return Cast("CastToFp8Cuda", out, out_t, nullptr, x, rows, cols, Given(scale), f, stream);
}

Status CastToFp8CudaBf16(uint8_t* out, uint8_t* out_t, const uint16_t* x, int64_t rows, int64_t cols,
                         const float* scale, Fp8Format f, cudaStream_t stream) {
  DT_NVTX_FN();
  return Cast("CastToFp8CudaBf16", out, out_t, nullptr, detail::AsBf16(x), rows, cols, Given(scale), f, stream);
}

Status Fp8CastFromAmaxCuda(const Fp8CastFromAmaxArgs& a, const float* x, cudaStream_t stream) {
  DT_NVTX_FN();
  return Cast("Fp8CastFromAmaxCuda", a.out, a.out_t, a.col_partials, x, a.rows, a.cols,
              FromAmax(a.amax, a.scale, a.scale_inv), a.format, stream);
}

Status Fp8CastFromAmaxCudaBf16(const Fp8CastFromAmaxArgs& a, const uint16_t* x, cudaStream_t stream) {
  DT_NVTX_FN();
  return Cast("Fp8CastFromAmaxCudaBf16", a.out, a.out_t, a.col_partials, detail::AsBf16(x), a.rows, a.cols,
              FromAmax(a.amax, a.scale, a.scale_inv), a.format, stream);
}

}  // namespace dtrain::ops
