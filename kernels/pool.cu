#include <cuda_bf16.h>

#include <algorithm>
#include <cstdint>

#include "core/cuda_check.h"
#include "core/nvtx.h"
#include "kernels/bf16_vec.cuh"
#include "kernels/pool.h"

namespace dtrain::ops {

namespace {

constexpr int kThreads = 256;
constexpr int kRowsPerBlock = kThreads / 32;

// One warp per row: lanes stride over the row, then a fixed shuffle tree (reproducible).
__global__ void GlobalAvgPoolForwardKernel(float* y, const float* x, int64_t rows, int64_t hw) {
  const int64_t row = blockIdx.x * int64_t{kRowsPerBlock} + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (row >= rows) return;  // whole warps exit together
  float sum = 0.f;
  for (int64_t j = lane; j < hw; j += 32) sum += x[row * hw + j];
  for (int off = 16; off > 0; off >>= 1) sum += __shfl_down_sync(0xffffffffu, sum, off);
  if (lane == 0) y[row] = sum / static_cast<float>(hw);
}

__global__ void GlobalAvgPoolBackwardKernel(float* dx, const float* dy, int64_t total, int64_t hw) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < total; i += int64_t{gridDim.x} * blockDim.x) {
    dx[i] = dy[i / hw] / static_cast<float>(hw);
  }
}

// ---- channels-last, bf16 ----------------------------------------------------------------------------------------

using bf16 = __nv_bfloat16;
constexpr int kNhwcMaxV = 8;  // bf16 channels per 128-bit access

// Block (image blockIdx.x, column slab blockIdx.y): kThreads threads as rpp rows of bc slots; slot tx owns channels
// [(blockIdx.y * bc + tx) * V, + V) and sums pixels ty, ty + rpp, ... in double; the rpp partial rows are then added
// with a fixed tree in shared memory (bitwise reproducible).
template <int V>
__global__ void __launch_bounds__(kThreads)
    GlobalAvgPoolNhwcForwardKernel(float* y, const bf16* x, int64_t hw, int64_t c, int bc, int rpp) {
  __shared__ double red[kThreads * V];  // [rpp][bc * V]
  const int tx = threadIdx.x % bc, ty = threadIdx.x / bc, w = bc * V;
  const int64_t ch0 = (blockIdx.y * int64_t{bc} + tx) * V;
  double s[V] = {};
  if (ty < rpp && ch0 < c) {
    const bf16* img = x + blockIdx.x * hw * c + ch0;
#pragma unroll 4
    for (int64_t p = ty; p < hw; p += rpp) {
      float f[V];
      detail::LoadV<V>(img + p * c, f);
#pragma unroll
      for (int i = 0; i < V; ++i) s[i] += f[i];
    }
  }
  if (ty < rpp) {
#pragma unroll
    for (int i = 0; i < V; ++i) red[ty * w + tx * V + i] = s[i];
  }
  __syncthreads();
  int half = 1;
  while (half < rpp) half *= 2;
  for (half /= 2; half >= 1; half /= 2) {  // rows [0, half) += rows [half, rpp)
    for (int idx = threadIdx.x; idx < half * w; idx += kThreads) {
      const int row = idx / w, col = idx - row * w;
      if (row + half < rpp) red[row * w + col] += red[(row + half) * w + col];
    }
    __syncthreads();
  }
  for (int col = threadIdx.x; col < w; col += kThreads) {
    const int64_t ch = blockIdx.y * int64_t{w} + col;
    if (ch < c) y[blockIdx.x * c + ch] = static_cast<float>(red[col] / static_cast<double>(hw));
  }
}

// dx[n, p, ch] = bf16(dy[n, ch] / hw), V channels a thread.
template <int V>
__global__ void GlobalAvgPoolNhwcBackwardKernel(bf16* dx, const float* dy, int64_t total, int64_t hw, int64_t c) {
  const float hw_f = static_cast<float>(hw);
  detail::GridStrideVec<V>(total, [&](int64_t k, auto width) {
    constexpr int W = decltype(width)::value;
    const int64_t row = k / c, ch = k - row * c, n = row / hw;
    float g[W];
    detail::LoadF32<W>(dy + n * c + ch, g);
#pragma unroll
    for (int i = 0; i < W; ++i) g[i] = g[i] / hw_f;  // IEEE division, as the host's float quotient
    detail::StoreV<W>(dx + k, g);
  });
}

}  // namespace

Status GlobalAvgPoolForwardCuda(float* y, const float* x, int64_t rows, int64_t hw, cudaStream_t stream) {
  DT_NVTX_FN();
  if (rows == 0) return Status::OK();
  const int64_t blocks = (rows + kRowsPerBlock - 1) / kRowsPerBlock;
  GlobalAvgPoolForwardKernel<<<static_cast<unsigned>(blocks), kThreads, 0, stream>>>(y, x, rows, hw);
  DT_CUDA_CHECK_LAUNCH();
  return Status::OK();
}

Status GlobalAvgPoolBackwardCuda(float* dx, const float* dy, int64_t rows, int64_t hw, cudaStream_t stream) {
  DT_NVTX_FN();
  const int64_t total = rows * hw;
  if (total == 0) return Status::OK();
  const int grid = static_cast<int>(std::min<int64_t>((total + kThreads - 1) / kThreads, 65536));
  GlobalAvgPoolBackwardKernel<<<grid, kThreads, 0, stream>>>(dx, dy, total, hw);
  DT_CUDA_CHECK_LAUNCH();
  return Status::OK();
}

Status GlobalAvgPoolNhwcForwardCudaBf16(float* y, const uint16_t* x, int64_t n, int64_t hw, int64_t c,
                                        cudaStream_t stream) {
  DT_NVTX_FN();
  if (n <= 0 || c <= 0) return Status::OK();
  DT_CHECK_ARG(hw > 0, "GlobalAvgPoolNhwcForward: no pixels");
  const int v = detail::VecWidth<bf16>(c, {x});
  const int64_t cv = c / v;
  const int bc = static_cast<int>(std::min<int64_t>(cv, kThreads)), rpp = kThreads / bc;
  const int64_t slabs = (cv + bc - 1) / bc;
  DT_CHECK_ARG(n <= 0x7fffffff && slabs <= 65535,
               "GlobalAvgPoolNhwcForward: [" << n << ", " << hw << ", " << c << "] exceeds the CUDA grid");
  const dim3 grid(static_cast<unsigned>(n), static_cast<unsigned>(slabs));
  if (v == kNhwcMaxV) {
    GlobalAvgPoolNhwcForwardKernel<kNhwcMaxV><<<grid, kThreads, 0, stream>>>(y, detail::AsBf16(x), hw, c, bc, rpp);
  } else {
    GlobalAvgPoolNhwcForwardKernel<1><<<grid, kThreads, 0, stream>>>(y, detail::AsBf16(x), hw, c, bc, rpp);
  }
  DT_CUDA_CHECK_LAUNCH();
  return Status::OK();
}

Status GlobalAvgPoolNhwcBackwardCudaBf16(uint16_t* dx, const float* dy, int64_t n, int64_t hw, int64_t c,
                                         cudaStream_t stream) {
  DT_NVTX_FN();
  const int64_t total = n * hw * c;
  if (total <= 0) return Status::OK();
  // 8 channels a thread: dx and dy (8 floats = two 128-bit loads) both 16-byte aligned per row.
  const int v = detail::VecWidth<bf16>(c, {dx, dy});
  const unsigned grid = detail::GridFor(total / v, kThreads);
  if (v == kNhwcMaxV) {
    GlobalAvgPoolNhwcBackwardKernel<kNhwcMaxV><<<grid, kThreads, 0, stream>>>(detail::AsBf16(dx), dy, total, hw, c);
  } else {
    GlobalAvgPoolNhwcBackwardKernel<1><<<grid, kThreads, 0, stream>>>(detail::AsBf16(dx), dy, total, hw, c);
  }
  DT_CUDA_CHECK_LAUNCH();
  return Status::OK();
}

}  // namespace dtrain::ops
