// SwiGLU kernels, f32, bf16 and fp16 (fp32 math): bandwidth-bound elementwise passes over out[n, f] (forward) or
// dout[n, f] (backward), one thread per V columns of a row, reading gate and up at the same columns of h's row
// (V-wide, 128-bit when F % V == 0 and the pointers are aligned, so no vector crosses a row). The 16-bit kernels can
// also fold max |out| (|dh|) as stored into a device float (kernels/fp8.h's Fp8Amax, without its own pass).
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <cstdint>

#include "core/cuda_check.h"
#include "core/nvtx.h"
#include "kernels/bf16_vec.cuh"
#include "kernels/swiglu.h"

namespace dtrain::ops {

namespace {

using detail::LoadV;
using detail::StoreV;

constexpr int kThreads = 256;
constexpr int64_t kAmaxBlocks = 2048;  // with amax, at most this many blocks (as kernels/gelu.cu)

__device__ __forceinline__ float Sigmoid(float g) { return 1.f / (1.f + expf(-g)); }  // 0 / 1 when saturated

// Grid (column blocks, row blocks): thread x of a block takes V columns [cv * V, cv * V + V) of rows blockIdx.y,
// blockIdx.y + gridDim.y, ... (no division per element). Row `row` of out / dout is [row * f, row * f + f), of h and
// dh gate [row * 2f, row * 2f + f) then up. With amax (zeroed by the launcher): max |out| (|dh|) as stored; the lanes
// past f stay to the end for the warp's reduction.
template <int V, typename T>
__global__ void SwiGluForwardKernel(T* out, const T* h, int64_t n, int64_t f, float* amax) {
  const int64_t cv = (blockIdx.x * int64_t{blockDim.x} + threadIdx.x) * V;
  unsigned m = 0;
  for (int64_t row = blockIdx.y; cv < f && row < n; row += gridDim.y) {
    const T* gate = h + row * 2 * f + cv;
    float g[V], u[V];
    LoadV<V>(gate, g);
    LoadV<V>(gate + f, u);
#pragma unroll
    for (int k = 0; k < V; ++k) g[k] = g[k] * Sigmoid(g[k]) * u[k];
    StoreV<V>(out + row * f + cv, g);
    if (amax != nullptr) detail::FoldAmax<V, T>(m, g);
  }
  detail::WarpAmaxToGlobal(amax, m);
}

template <int V, typename T>
__global__ void SwiGluBackwardKernel(T* dh, const T* h, const T* dout, int64_t n, int64_t f, float* amax) {
  const int64_t cv = (blockIdx.x * int64_t{blockDim.x} + threadIdx.x) * V;
  unsigned m = 0;
  for (int64_t row = blockIdx.y; cv < f && row < n; row += gridDim.y) {
    const int64_t at = row * 2 * f + cv;
    float g[V], u[V], d[V];
    LoadV<V>(h + at, g);
    LoadV<V>(h + at + f, u);
    LoadV<V>(dout + row * f + cv, d);
#pragma unroll
    for (int k = 0; k < V; ++k) {
      const float s = Sigmoid(g[k]);
      const float dup = d[k] * g[k] * s;
      g[k] = d[k] * u[k] * s * (1.f + g[k] * (1.f - s));
      u[k] = dup;
    }
    StoreV<V>(dh + at, g);
    StoreV<V>(dh + at + f, u);
    if (amax != nullptr) {
      detail::FoldAmax<V, T>(m, g);
      detail::FoldAmax<V, T>(m, u);
    }
  }
  detail::WarpAmaxToGlobal(amax, m);
}

// A row's vectors split evenly over the fewest blocks of at most kThreads (whole warps: SmolLM2's F = 2560 in bf16
// is 320 vectors, 2 x 160 threads); the rows spread over gridDim.y. With amax, fewer row blocks striding further:
// every warp ends with a read (and maybe an atomic) of the one *amax.
struct Grid {
  dim3 grid, block;
};
Grid GridFor(int64_t n, int64_t f, int v, bool amax) {
  const int64_t vecs = f / v;
  const int64_t col_blocks = (vecs + kThreads - 1) / kThreads;
  const int64_t threads = ((vecs + col_blocks - 1) / col_blocks + 31) / 32 * 32;
  const int64_t max_rows = amax ? std::max<int64_t>(1, kAmaxBlocks / col_blocks) : 65535;
  return {dim3(static_cast<unsigned>(col_blocks), static_cast<unsigned>(std::min(n, max_rows))),
          dim3(static_cast<unsigned>(threads))};
}

template <typename T>
Status LaunchForward(T* out, const T* h, int64_t n, int64_t f, float* amax, cudaStream_t stream) {
  if (amax != nullptr) DT_CUDA_CHECK(cudaMemsetAsync(amax, 0, sizeof(float), stream));
  if (n == 0) return Status::OK();
  constexpr int kV = 16 / sizeof(T);
  if (detail::VecWidth<T>(f, {out, h}) == kV) {
    const Grid g = GridFor(n, f, kV, amax != nullptr);
    SwiGluForwardKernel<kV><<<g.grid, g.block, 0, stream>>>(out, h, n, f, amax);
  } else {
    const Grid g = GridFor(n, f, 1, amax != nullptr);
    SwiGluForwardKernel<1><<<g.grid, g.block, 0, stream>>>(out, h, n, f, amax);
  }
  DT_CUDA_CHECK_LAUNCH();
  return Status::OK();
}

template <typename T>
Status LaunchBackward(T* dh, const T* h, const T* dout, int64_t n, int64_t f, float* amax, cudaStream_t stream) {
  if (amax != nullptr) DT_CUDA_CHECK(cudaMemsetAsync(amax, 0, sizeof(float), stream));
  if (n == 0) return Status::OK();
  constexpr int kV = 16 / sizeof(T);
  if (detail::VecWidth<T>(f, {dh, h, dout}) == kV) {
    const Grid g = GridFor(n, f, kV, amax != nullptr);
    SwiGluBackwardKernel<kV><<<g.grid, g.block, 0, stream>>>(dh, h, dout, n, f, amax);
  } else {
    const Grid g = GridFor(n, f, 1, amax != nullptr);
    SwiGluBackwardKernel<1><<<g.grid, g.block, 0, stream>>>(dh, h, dout, n, f, amax);
  }
  DT_CUDA_CHECK_LAUNCH();
  return Status::OK();
}

}  // namespace

Status SwiGluForwardCuda(float* out, const float* h, int64_t n, int64_t f, cudaStream_t stream) {
  DT_NVTX_FN();
  return LaunchForward(out, h, n, f, nullptr, stream);
}

Status SwiGluBackwardCuda(float* dh, const float* h, const float* dout, int64_t n, int64_t f, cudaStream_t stream) {
  DT_NVTX_FN();
  return LaunchBackward(dh, h, dout, n, f, nullptr, stream);
}

Status SwiGluForwardCudaBf16(uint16_t* out, const uint16_t* h, int64_t n, int64_t f, float* amax, cudaStream_t stream) {
  DT_NVTX_FN();
  return LaunchForward(detail::AsBf16(out), detail::AsBf16(h), n, f, amax, stream);
}

Status SwiGluBackwardCudaBf16(uint16_t* dh, const uint16_t* h, const uint16_t* dout, int64_t n, int64_t f, float* amax,
                              cudaStream_t stream) {
  DT_NVTX_FN();
  return LaunchBackward(detail::AsBf16(dh), detail::AsBf16(h), detail::AsBf16(dout), n, f, amax, stream);
}

Status SwiGluForwardCudaF16(uint16_t* out, const uint16_t* h, int64_t n, int64_t f, float* amax, cudaStream_t stream) {
  DT_NVTX_FN();
  return LaunchForward(detail::AsF16(out), detail::AsF16(h), n, f, amax, stream);
}

Status SwiGluBackwardCudaF16(uint16_t* dh, const uint16_t* h, const uint16_t* dout, int64_t n, int64_t f, float* amax,
                             cudaStream_t stream) {
  DT_NVTX_FN();
  return LaunchBackward(detail::AsF16(dh), detail::AsF16(h), detail::AsF16(dout), n, f, amax, stream);
}

}  // namespace dtrain::ops
