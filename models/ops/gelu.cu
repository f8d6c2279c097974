#include <algorithm>
#include <cstdint>

#include "models/ops/gelu.h"
#include "runtime/core/cuda_check.h"
#include "runtime/core/nvtx.h"

namespace dtrain::ops {

namespace {

constexpr int kThreads = 256;
constexpr float kSqrt2OverPi = 0.7978845608028654f;  // sqrt(2/pi)
constexpr float kCubic = 0.044715f;

__global__ void GeluForwardKernel(float* y, const float* x, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n; i += int64_t{gridDim.x} * blockDim.x) {
    const float v = x[i];
    y[i] = 0.5f * v * (1.f + tanhf(kSqrt2OverPi * (v + kCubic * v * v * v)));
  }
}

__global__ void GeluBackwardKernel(float* dx, const float* x, const float* dy, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n; i += int64_t{gridDim.x} * blockDim.x) {
    const float v = x[i];
    const float t = tanhf(kSqrt2OverPi * (v + kCubic * v * v * v));
    const float du = kSqrt2OverPi * (1.f + 3.f * kCubic * v * v);
    dx[i] = dy[i] * (0.5f * (1.f + t) + 0.5f * v * (1.f - t * t) * du);
  }
}

int GridFor(int64_t n) {
  return static_cast<int>(std::max<int64_t>(1, std::min<int64_t>((n + kThreads - 1) / kThreads, 65536)));
}

}  // namespace

Status GeluForwardCuda(float* y, const float* x, int64_t n, cudaStream_t stream) {
  DT_NVTX_FN();
  if (n == 0) return Status::OK();
  GeluForwardKernel<<<GridFor(n), kThreads, 0, stream>>>(y, x, n);
  DT_CUDA_CHECK_LAUNCH();
  return Status::OK();
}

Status GeluBackwardCuda(float* dx, const float* x, const float* dy, int64_t n, cudaStream_t stream) {
  DT_NVTX_FN();
  if (n == 0) return Status::OK();
  GeluBackwardKernel<<<GridFor(n), kThreads, 0, stream>>>(dx, x, dy, n);
  DT_CUDA_CHECK_LAUNCH();
  return Status::OK();
}

}  // namespace dtrain::ops
