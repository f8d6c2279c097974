// CUDA side of the NCHW <-> NHWC permutations (kernels/layout.h): one thread per output element, consecutive
// threads writing consecutive outputs (coalesced stores; the strided loads hit L2 for these small tensors: conv
// weights of ~0.3M elements, 128 images of 784 pixels).
#include <cuda_bf16.h>

#include <cstdint>

#include "core/cuda_check.h"
#include "core/nvtx.h"
#include "kernels/bf16_vec.cuh"
#include "kernels/layout.h"

namespace dtrain::ops {

namespace {

constexpr int kThreads = 256;

// out[n,h,w,c] = bf16(in[n,c,h,w]); out index i = (n*HW + p)*C + c with p = h*W + w.
__global__ void NchwToNhwcF32ToBf16Kernel(__nv_bfloat16* out, const float* in, int64_t total, int64_t c, int64_t hw) {
  const int64_t stride = int64_t{gridDim.x} * blockDim.x;
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < total; i += stride) {
    const int64_t ch = i % c, rest = i / c;  // rest = n*HW + p
    const int64_t p = rest % hw, n = rest / hw;
    out[i] = __float2bfloat16_rn(in[(n * c + ch) * hw + p]);
  }
}

// out[n,c,h,w] (+)= f32(in[n,h,w,c]); out index i = (n*C + c)*HW + p.
__global__ void NhwcToNchwBf16ToF32Kernel(float* out, const __nv_bfloat16* in, int64_t total, int64_t c, int64_t hw,
                                          bool accumulate) {
  const int64_t stride = int64_t{gridDim.x} * blockDim.x;
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < total; i += stride) {
    const int64_t p = i % hw, rest = i / hw;  // rest = n*C + c
    const int64_t ch = rest % c, n = rest / c;
    const float v = __bfloat162float(in[(n * hw + p) * c + ch]);
    out[i] = accumulate ? out[i] + v : v;
  }
}

}  // namespace

Status NchwToNhwcCudaF32ToBf16(uint16_t* out, const float* in, int64_t n, int64_t c, int64_t h, int64_t w,
                               cudaStream_t stream) {
  DT_NVTX_FN();
  DT_DCHECK(n >= 0 && c >= 0 && h >= 0 && w >= 0, "sizes " << n << "," << c << "," << h << "," << w);
  const int64_t total = n * c * h * w;
  if (total == 0) return Status::OK();
  NchwToNhwcF32ToBf16Kernel<<<detail::GridFor(total, kThreads), kThreads, 0, stream>>>(detail::AsBf16(out), in, total,
                                                                                       c, h * w);
  DT_CUDA_CHECK_LAUNCH();
  return Status::OK();
}

Status NhwcToNchwCudaBf16ToF32(float* out, const uint16_t* in, int64_t n, int64_t c, int64_t h, int64_t w,
                               bool accumulate, cudaStream_t stream) {
  DT_NVTX_FN();
  DT_DCHECK(n >= 0 && c >= 0 && h >= 0 && w >= 0, "sizes " << n << "," << c << "," << h << "," << w);
  const int64_t total = n * c * h * w;
  if (total == 0) return Status::OK();
  NhwcToNchwBf16ToF32Kernel<<<detail::GridFor(total, kThreads), kThreads, 0, stream>>>(out, detail::AsBf16(in), total,
                                                                                       c, h * w, accumulate);
  DT_CUDA_CHECK_LAUNCH();
  return Status::OK();
}

}  // namespace dtrain::ops
