#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

#include "core/cuda_check.h"
#include "core/nvtx.h"
#include "kernels/bf16_vec.cuh"
#include "kernels/gelu.h"

namespace dtrain::ops {

namespace {

using detail::LoadV;
using detail::StoreV;

constexpr int kThreads = 256;
constexpr int64_t kAmaxBlocks = 2048;                // enough to fill an H200 several times over
constexpr float kSqrt2OverPi = 0.7978845608028654f;  // sqrt(2/pi)
constexpr float kCubic = 0.044715f;

__device__ __forceinline__ float Gelu(float v) {
  return 0.5f * v * (1.f + tanhf(kSqrt2OverPi * (v + kCubic * v * v * v)));
}

__device__ __forceinline__ float GeluGrad(float v) {
  const float t = tanhf(kSqrt2OverPi * (v + kCubic * v * v * v));
  const float du = kSqrt2OverPi * (1.f + 3.f * kCubic * v * v);
  return 0.5f * (1.f + t) + 0.5f * v * (1.f - t * t) * du;
}

template <int V, typename T>
__global__ void GeluForwardKernel(T* y, const T* x, int64_t n) {
  detail::GridStrideVec<V>(n, [&](int64_t i, auto w) {
    constexpr int W = decltype(w)::value;
    float v[W];
    LoadV<W>(x + i, v);
#pragma unroll
    for (int j = 0; j < W; ++j) v[j] = Gelu(v[j]);
    StoreV<W>(y + i, v);
  });
}

// dx may alias dy: both chunks are loaded before the store. With amax (zeroed by the launcher): max |dx| as stored.
template <int V, typename T>
__global__ void GeluBackwardKernel(T* dx, const T* x, const T* dy, int64_t n, float* amax) {
  unsigned m = 0;
  detail::GridStrideVec<V>(n, [&](int64_t i, auto w) {
    constexpr int W = decltype(w)::value;
    float v[W], g[W];
    LoadV<W>(x + i, v);
    LoadV<W>(dy + i, g);
#pragma unroll
    for (int j = 0; j < W; ++j) g[j] *= GeluGrad(v[j]);
    StoreV<W>(dx + i, g);
    if (amax != nullptr) detail::FoldAmax<W, T>(m, g);
  });
  detail::WarpAmaxToGlobal(amax, m);
}

template <typename T>
Status LaunchForward(T* y, const T* x, int64_t n, cudaStream_t stream) {
  if (n == 0) return Status::OK();
  constexpr int kV = 16 / sizeof(T);
  if (detail::Aligned16({y, x})) {
    GeluForwardKernel<kV><<<detail::GridFor(n / kV + 1, kThreads), kThreads, 0, stream>>>(y, x, n);
  } else {
    GeluForwardKernel<1><<<detail::GridFor(n, kThreads), kThreads, 0, stream>>>(y, x, n);
  }
  DT_CUDA_CHECK_LAUNCH();
  return Status::OK();
}

template <typename T>
Status LaunchBackward(T* dx, const T* x, const T* dy, int64_t n, float* amax, cudaStream_t stream) {
  if (amax != nullptr) DT_CUDA_CHECK(cudaMemsetAsync(amax, 0, sizeof(float), stream));
  if (n == 0) return Status::OK();
  constexpr int kV = 16 / sizeof(T);
  // With amax, fewer blocks striding further: every warp ends with a read (and maybe an atomic) of the one *amax.
  const int64_t max_blocks = amax != nullptr ? kAmaxBlocks : 65536;
  if (detail::Aligned16({dx, x, dy})) {
    GeluBackwardKernel<kV>
        <<<detail::GridFor(n / kV + 1, kThreads, max_blocks), kThreads, 0, stream>>>(dx, x, dy, n, amax);
  } else {
    GeluBackwardKernel<1><<<detail::GridFor(n, kThreads, max_blocks), kThreads, 0, stream>>>(dx, x, dy, n, amax);
  }
  DT_CUDA_CHECK_LAUNCH();
  return Status::OK();
}

}  // namespace

Status GeluForwardCuda(float* y, const float* x, int64_t n, cudaStream_t stream) {
  DT_NVTX_FN();
  return LaunchForward(y, x, n, stream);
}

Status GeluBackwardCuda(float* dx, const float* x, const float* dy, int64_t n, cudaStream_t stream) {
  DT_NVTX_FN();
  return LaunchBackward(dx, x, dy, n, nullptr, stream);
}

Status GeluForwardCudaBf16(uint16_t* y, const uint16_t* x, int64_t n, cudaStream_t stream) {
  DT_NVTX_FN();
  return LaunchForward(detail::AsBf16(y), detail::AsBf16(x), n, stream);
}

Status GeluBackwardCudaBf16(uint16_t* dx, const uint16_t* x, const uint16_t* dy, int64_t n, float* amax,
                            cudaStream_t stream) {
  DT_NVTX_FN();
  return LaunchBackward(detail::AsBf16(dx), detail::AsBf16(x), detail::AsBf16(dy), n, amax, stream);
}

Status GeluForwardCudaF16(uint16_t* y, const uint16_t* x, int64_t n, cudaStream_t stream) {
  DT_NVTX_FN();
  return LaunchForward(detail::AsF16(y), detail::AsF16(x), n, stream);
}

Status GeluBackwardCudaF16(uint16_t* dx, const uint16_t* x, const uint16_t* dy, int64_t n, float* amax,
                           cudaStream_t stream) {
  DT_NVTX_FN();
  return LaunchBackward(detail::AsF16(dx), detail::AsF16(x), detail::AsF16(dy), n, amax, stream);
}

}  // namespace dtrain::ops
