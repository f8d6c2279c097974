// Flat elementwise kernels: Add (f32, bf16, f16) and the f32 <-> bf16 / f16 casts. Grid-stride loops with 128-bit
// accesses when every pointer is 16-byte aligned (bf16_vec.cuh), so they run at memory bandwidth.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

#include "core/cuda_check.h"
#include "core/nvtx.h"
#include "kernels/bf16_vec.cuh"
#include "kernels/elementwise.h"

namespace dtrain::ops {

namespace {

using detail::LoadV;
using detail::StoreV;

constexpr int kThreads = 256;

// out = a + b. In place (out == a or b) is safe: each element is read before the same thread writes it.
template <int V, typename T>
__global__ void AddKernel(T* out, const T* a, const T* b, int64_t n) {
  detail::GridStrideVec<V>(n, [&](int64_t i, auto w) {
    constexpr int W = decltype(w)::value;
    float x[W], y[W];
    LoadV<W>(a + i, x);
    LoadV<W>(b + i, y);
#pragma unroll
    for (int j = 0; j < W; ++j) x[j] += y[j];
    StoreV<W>(out + i, x);
  });
}

template <int V, typename Tin, typename Tout>
__global__ void CastKernel(Tout* out, const Tin* in, int64_t n) {
  detail::GridStrideVec<V>(n, [&](int64_t i, auto w) {
    constexpr int W = decltype(w)::value;
    float x[W];
    LoadV<W>(in + i, x);
    StoreV<W>(out + i, x);
  });
}

template <typename T>
Status LaunchAdd(T* out, const T* a, const T* b, int64_t n, cudaStream_t stream) {
  if (n == 0) return Status::OK();
  constexpr int kV = 16 / sizeof(T);
  if (detail::Aligned16({out, a, b})) {
    AddKernel<kV><<<detail::GridFor(n / kV + 1, kThreads), kThreads, 0, stream>>>(out, a, b, n);
  } else {
    AddKernel<1><<<detail::GridFor(n, kThreads), kThreads, 0, stream>>>(out, a, b, n);
  }
  DT_CUDA_CHECK_LAUNCH();
  return Status::OK();
}

// 8 elements per thread step: 16 bytes of bf16 / f16, 32 of f32 (two 128-bit accesses).
template <typename Tin, typename Tout>
Status LaunchCast(Tout* out, const Tin* in, int64_t n, cudaStream_t stream) {
  if (n == 0) return Status::OK();
  if (detail::Aligned16({out, in})) {
    CastKernel<8><<<detail::GridFor(n / 8 + 1, kThreads), kThreads, 0, stream>>>(out, in, n);
  } else {
    CastKernel<1><<<detail::GridFor(n, kThreads), kThreads, 0, stream>>>(out, in, n);
  }
  DT_CUDA_CHECK_LAUNCH();
  return Status::OK();
}

}  // namespace

Status AddCuda(float* out, const float* a, const float* b, int64_t n, cudaStream_t stream) {
  DT_NVTX_FN();
  return LaunchAdd(out, a, b, n, stream);
}

Status AddCudaBf16(uint16_t* out, const uint16_t* a, const uint16_t* b, int64_t n, cudaStream_t stream) {
  DT_NVTX_FN();
  return LaunchAdd(detail::AsBf16(out), detail::AsBf16(a), detail::AsBf16(b), n, stream);
}

Status CastF32ToBf16Cuda(uint16_t* out, const float* in, int64_t n, cudaStream_t stream) {
  DT_NVTX_FN();
  return LaunchCast(detail::AsBf16(out), in, n, stream);
}

Status CastBf16ToF32Cuda(float* out, const uint16_t* in, int64_t n, cudaStream_t stream) {
  DT_NVTX_FN();
  return LaunchCast(out, detail::AsBf16(in), n, stream);
}

Status AddCudaF16(uint16_t* out, const uint16_t* a, const uint16_t* b, int64_t n, cudaStream_t stream) {
  DT_NVTX_FN();
  return LaunchAdd(detail::AsF16(out), detail::AsF16(a), detail::AsF16(b), n, stream);
}

Status CastF32ToF16Cuda(uint16_t* out, const float* in, int64_t n, cudaStream_t stream) {
  DT_NVTX_FN();
  return LaunchCast(detail::AsF16(out), in, n, stream);
}

Status CastF16ToF32Cuda(float* out, const uint16_t* in, int64_t n, cudaStream_t stream) {
  DT_NVTX_FN();
  return LaunchCast(out, detail::AsF16(in), n, stream);
}

}  // namespace dtrain::ops
