#include <algorithm>
#include <cstdint>

#include "models/ops/bias.h"
#include "runtime/core/cuda_check.h"
#include "runtime/core/nvtx.h"

namespace dtrain::ops {

namespace {

constexpr int kThreads = 256;
// Column tile of the bias-gradient reduction: 32 columns (one coalesced warp per row) x kRowLanes rows.
constexpr int kRowLanes = 16;

__global__ void BiasAddKernel(float* y, const float* bias, int64_t m, int64_t n) {
  const int64_t total = m * n;
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < total; i += int64_t{gridDim.x} * blockDim.x) {
    y[i] += bias[i % n];
  }
}

// Block (32, kRowLanes) owns 32 columns: lane (x, y) sums rows y, y + kRowLanes, ... of its column, then the
// kRowLanes partial sums are added in a fixed order, so the result is bitwise reproducible.
__global__ void BiasGradKernel(float* dbias, const float* dy, int64_t m, int64_t n, bool accumulate) {
  __shared__ float partial[kRowLanes][33];  // +1 column: no bank conflicts on the transposed read
  const int64_t col = blockIdx.x * int64_t{32} + threadIdx.x;
  float sum = 0.f;
  if (col < n) {
    for (int64_t row = threadIdx.y; row < m; row += kRowLanes) sum += dy[row * n + col];
  }
  partial[threadIdx.y][threadIdx.x] = sum;
  __syncthreads();
  if (threadIdx.y == 0 && col < n) {
    float total = 0.f;
    for (int r = 0; r < kRowLanes; ++r) total += partial[r][threadIdx.x];
    dbias[col] = accumulate ? dbias[col] + total : total;
  }
}

int GridFor(int64_t total) {
  return static_cast<int>(std::max<int64_t>(1, std::min<int64_t>((total + kThreads - 1) / kThreads, 65536)));
}

}  // namespace

Status BiasAddCuda(float* y, const float* bias, int64_t m, int64_t n, cudaStream_t stream) {
  DT_NVTX_FN();
  if (m == 0 || n == 0) return Status::OK();
  BiasAddKernel<<<GridFor(m * n), kThreads, 0, stream>>>(y, bias, m, n);
  DT_CUDA_CHECK_LAUNCH();
  return Status::OK();
}

Status BiasGradCuda(float* dbias, const float* dy, int64_t m, int64_t n, bool accumulate, cudaStream_t stream) {
  DT_NVTX_FN();
  if (n == 0) return Status::OK();
  const dim3 block(32, kRowLanes);
  BiasGradKernel<<<static_cast<unsigned>((n + 31) / 32), block, 0, stream>>>(dbias, dy, m, n, accumulate);
  DT_CUDA_CHECK_LAUNCH();
  return Status::OK();
}

}  // namespace dtrain::ops
