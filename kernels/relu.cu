#include <algorithm>
#include <cstdint>

#include "core/cuda_check.h"
#include "core/nvtx.h"
#include "kernels/relu.h"

namespace dtrain::ops {

namespace {

constexpr int kThreads = 256;

__global__ void ReluForwardKernel(float* y, const float* x, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n; i += int64_t{gridDim.x} * blockDim.x) {
    y[i] = x[i] > 0.f ? x[i] : 0.f;
  }
}

__global__ void ReluBackwardKernel(float* dx, const float* y, const float* dy, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n; i += int64_t{gridDim.x} * blockDim.x) {
    dx[i] = y[i] > 0.f ? dy[i] : 0.f;
  }
}

int GridFor(int64_t n) {
  return static_cast<int>(std::max<int64_t>(1, std::min<int64_t>((n + kThreads - 1) / kThreads, 65536)));
}

}  // namespace

Status ReluForwardCuda(float* y, const float* x, int64_t n, cudaStream_t stream) {
  DT_NVTX_FN();
  if (n == 0) return Status::OK();
  ReluForwardKernel<<<GridFor(n), kThreads, 0, stream>>>(y, x, n);
  DT_CUDA_CHECK_LAUNCH();
  return Status::OK();
}

Status ReluBackwardCuda(float* dx, const float* y, const float* dy, int64_t n, cudaStream_t stream) {
  DT_NVTX_FN();
  if (n == 0) return Status::OK();
  ReluBackwardKernel<<<GridFor(n), kThreads, 0, stream>>>(dx, y, dy, n);
  DT_CUDA_CHECK_LAUNCH();
  return Status::OK();
}

}  // namespace dtrain::ops
