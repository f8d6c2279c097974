#include <cuda_bf16.h>

#include "comm/bf16_cast.h"
#include "core/cuda_check.h"
#include "core/nvtx.h"

namespace dtrain::comm {
namespace {

constexpr int kThreads = 256;

// Grid-stride loops: one launch covers any n with a bounded grid.
__global__ void F32ToBf16Kernel(const float* __restrict__ in, __nv_bfloat16* __restrict__ out, int64_t n) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    out[i] = __float2bfloat16_rn(in[i]);
  }
}

__global__ void Bf16ToF32Kernel(const __nv_bfloat16* __restrict__ in, float* __restrict__ out, int64_t n) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    out[i] = __bfloat162float(in[i]);
  }
}

int GridFor(int64_t n) {
  const int64_t blocks = (n + kThreads - 1) / kThreads;
  return static_cast<int>(blocks < 65535 ? blocks : 65535);
}

}  // namespace

Status LaunchF32ToBf16(const float* in, uint16_t* out, int64_t n, cudaStream_t stream) {
  DT_NVTX_FN();
  DT_CHECK_ARG(n >= 0, "negative element count " << n);
  if (n == 0) return Status::OK();
  F32ToBf16Kernel<<<GridFor(n), kThreads, 0, stream>>>(in, reinterpret_cast<__nv_bfloat16*>(out), n);
  DT_CUDA_CHECK_LAUNCH();
  return Status::OK();
}

Status LaunchBf16ToF32(const uint16_t* in, float* out, int64_t n, cudaStream_t stream) {
  DT_NVTX_FN();
  DT_CHECK_ARG(n >= 0, "negative element count " << n);
  if (n == 0) return Status::OK();
  Bf16ToF32Kernel<<<GridFor(n), kThreads, 0, stream>>>(reinterpret_cast<const __nv_bfloat16*>(in), out, n);
  DT_CUDA_CHECK_LAUNCH();
  return Status::OK();
}

}  // namespace dtrain::comm
