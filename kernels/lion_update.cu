// CUDA kernel of kernels/lion_update.h: the fused Lion update, one pass over params, grads and exp_avg. The
// arithmetic matches the CPU reference in lion_update.cc operation for operation, and every product and sum is
// rounded on its own (__fmul_rn, __fadd_rn: no FMA contraction), so the results are bitwise those of the CPU: the
// sign of c decides a whole lr-sized step, and an ulp of difference in m could flip it a few steps later.
#include <algorithm>

#include "core/cuda_check.h"
#include "core/nvtx.h"
#include "kernels/lion_update.h"

namespace dtrain::ops {
namespace {

constexpr int kThreads = 256;
constexpr int64_t kMaxBlocks = 8192;  // grid-stride beyond this

int GridFor(int64_t n) { return static_cast<int>(std::clamp<int64_t>((n + kThreads - 1) / kThreads, 1, kMaxBlocks)); }

__global__ void LionKernel(float* __restrict__ params, const float* __restrict__ grads, float* __restrict__ exp_avg,
                           int64_t n, LionKernelArgs args, const LionKernelArgs* __restrict__ staged,
                           const float* __restrict__ scale, const float* __restrict__ skip) {
  if (skip != nullptr && *skip != 0.0f) return;  // every thread reads the flag: no divergence
  const LionKernelArgs a = staged != nullptr ? *staged : args;
  const float s = a.grad_scale * (scale != nullptr ? *scale : 1.0f);
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    const float g = grads[i] * s;
    const float m = exp_avg[i];
    const float c = __fadd_rn(__fmul_rn(a.beta1, m), __fmul_rn(a.one_minus_b1, g));
    const float sign = c > 0.0f ? 1.0f : (c < 0.0f ? -1.0f : c);  // +-0 and NaN stay
    params[i] = __fsub_rn(__fmul_rn(params[i], a.decay), a.lr * sign);
    exp_avg[i] = __fadd_rn(__fmul_rn(a.beta2, m), __fmul_rn(a.one_minus_b2, g));
  }
}

}  // namespace

Status LionUpdateCuda(float* params, const float* grads, float* exp_avg, int64_t n, const LionHyper& h,
                      const float* scale, cudaStream_t stream, const float* skip, const LionKernelArgs* staged) {
  DT_NVTX_FN();
  DT_CHECK_ARG(n >= 0, "negative element count " << n);
  if (n == 0) return Status::OK();
  LionKernel<<<GridFor(n), kThreads, 0, stream>>>(params, grads, exp_avg, n, StagedArgsFor(h), staged, scale, skip);
  DT_CUDA_CHECK_LAUNCH();
  return Status::OK();
}

}  // namespace dtrain::ops
