#include <algorithm>
#include <cstdint>

#include "core/cuda_check.h"
#include "core/nvtx.h"
#include "models/ops/pool.h"

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

}  // namespace dtrain::ops
