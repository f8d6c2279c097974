#include <algorithm>
#include <cstdint>

#include "models/ops/embedding.h"
#include "runtime/core/cuda_check.h"
#include "runtime/core/nvtx.h"

namespace dtrain::ops {

namespace {

constexpr int kThreads = 256;

// One thread per output element; consecutive threads walk a row, so reads and writes are coalesced.
__global__ void EmbeddingForwardKernel(float* out, const int32_t* ids, const float* table, int64_t n, int64_t v,
                                       int64_t c) {
  const int64_t total = n * c;
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < total; i += int64_t{gridDim.x} * blockDim.x) {
    const int64_t id = ids[i / c];
    out[i] = (id >= 0 && id < v) ? table[id * c + i % c] : NAN;
  }
}

// Scatter-add with atomics: repeated ids collide on the same dtable row (see the header on determinism).
__global__ void EmbeddingBackwardKernel(float* dtable, const int32_t* ids, const float* dout, int64_t n, int64_t v,
                                        int64_t c) {
  const int64_t total = n * c;
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < total; i += int64_t{gridDim.x} * blockDim.x) {
    const int64_t id = ids[i / c];
    if (id >= 0 && id < v) atomicAdd(&dtable[id * c + i % c], dout[i]);
  }
}

int GridFor(int64_t total) {
  return static_cast<int>(std::max<int64_t>(1, std::min<int64_t>((total + kThreads - 1) / kThreads, 65536)));
}

}  // namespace

Status EmbeddingForwardCuda(float* out, const int32_t* ids, const float* table, int64_t n, int64_t v, int64_t c,
                            cudaStream_t stream) {
  DT_NVTX_FN();
  if (n == 0 || c == 0) return Status::OK();
  EmbeddingForwardKernel<<<GridFor(n * c), kThreads, 0, stream>>>(out, ids, table, n, v, c);
  DT_CUDA_CHECK_LAUNCH();
  return Status::OK();
}

Status EmbeddingBackwardCuda(float* dtable, const int32_t* ids, const float* dout, int64_t n, int64_t v, int64_t c,
                             cudaStream_t stream) {
  DT_NVTX_FN();
  if (n == 0 || c == 0) return Status::OK();
  EmbeddingBackwardKernel<<<GridFor(n * c), kThreads, 0, stream>>>(dtable, ids, dout, n, v, c);
  DT_CUDA_CHECK_LAUNCH();
  return Status::OK();
}

}  // namespace dtrain::ops
