// CUDA kernels of kernels/optim_update.h: fused SGD-momentum and AdamW updates (one pass over
// params, grads and state) and the clip coefficient computed on the device. The arithmetic matches
// the CPU references in optim_update.cc operation for operation (up to FMA contraction).
#include <algorithm>

#include "core/cuda_check.h"
#include "core/nvtx.h"
#include "kernels/bf16_round.h"
#include "kernels/optim_update.h"

namespace dtrain::ops {
namespace {

constexpr int kThreads = 256;
constexpr int64_t kMaxBlocks = 8192;  // grid-stride beyond this

int GridFor(int64_t n) { return static_cast<int>(std::clamp<int64_t>((n + kThreads - 1) / kThreads, 1, kMaxBlocks)); }

// The effective gradient multiplier; `scale` (device scalar, nullable) is read once per thread.
__device__ __forceinline__ float GradMultiplier(float grad_scale, const float* scale) {
  return grad_scale * (scale != nullptr ? *scale : 1.0f);
}

// True when the optional device flag asks to skip the update (every thread reads it; no divergence).
__device__ __forceinline__ bool Skip(const float* skip) { return skip != nullptr && *skip != 0.0f; }

__global__ void SgdKernel(float* __restrict__ params, const float* __restrict__ grads, float* __restrict__ momentum_buf,
                          int64_t n, SgdKernelArgs args, const SgdKernelArgs* __restrict__ staged,
                          const float* __restrict__ scale, const float* __restrict__ skip) {
  if (Skip(skip)) return;
  const SgdKernelArgs a = staged != nullptr ? *staged : args;
  const float s = GradMultiplier(a.grad_scale, scale);
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    const float p = params[i];
    float g = grads[i] * s;
    if (a.weight_decay != 0.0f) g += a.weight_decay * p;
    const float buf = a.momentum * momentum_buf[i] + g;
    momentum_buf[i] = buf;
    params[i] = p - a.lr * (a.nesterov ? g + a.momentum * buf : buf);
  }
}

__global__ void AdamWKernel(float* __restrict__ params, const float* __restrict__ grads, float* __restrict__ exp_avg,
                            float* __restrict__ exp_avg_sq, int64_t n, AdamWKernelArgs args,
                            const AdamWKernelArgs* __restrict__ staged, const float* __restrict__ scale,
                            const float* __restrict__ skip) {
  if (Skip(skip)) return;
  const AdamWKernelArgs a = staged != nullptr ? *staged : args;
  const float s = GradMultiplier(a.grad_scale, scale);
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    const float g = grads[i] * s;
    const float p = params[i] * a.decay;
    const float m = a.beta1 * exp_avg[i] + a.one_minus_b1 * g;
    const float v = a.beta2 * exp_avg_sq[i] + a.one_minus_b2 * (g * g);
    exp_avg[i] = m;
    exp_avg_sq[i] = v;
    const float denom = sqrtf(v) / a.bc2_sqrt + a.eps;
    params[i] = p - a.step_size * (m / denom);
  }
}

// The mixed-storage AdamW (optim_update.h): f32 math with every operation IEEE-rounded on its own (the _rn
// intrinsics: no FMA contraction), in the order of AdamWUpdateMixedCpu, so both give the same bits.
__device__ __forceinline__ float LoadF32(float x) { return x; }
__device__ __forceinline__ float LoadF32(uint16_t x) { return Bf16BitsToF32(x); }
__device__ __forceinline__ void Store(float* dst, float x, uint32_t /*r*/) { *dst = x; }
__device__ __forceinline__ void Store(uint16_t* dst, float x, uint32_t r) { *dst = RoundBf16Sr(x, r); }
// A param, and with `lo` (split masters: bf16 params only) the fp32 master its two halves hold.
__device__ __forceinline__ float LoadParam(const float* p, const uint16_t* /*lo*/, int64_t i) { return p[i]; }
__device__ __forceinline__ float LoadParam(const uint16_t* p, const uint16_t* lo, int64_t i) {
  return lo != nullptr ? JoinF32(p[i], lo[i]) : Bf16BitsToF32(p[i]);
}
__device__ __forceinline__ void StoreParam(float* p, uint16_t* /*lo*/, int64_t i, float x, uint32_t /*r*/) { p[i] = x; }
__device__ __forceinline__ void StoreParam(uint16_t* p, uint16_t* lo, int64_t i, float x, uint32_t r) {
  if (lo != nullptr) {
    SplitF32(x, &p[i], &lo[i]);
  } else {
    p[i] = RoundBf16Sr(x, r);
  }
}

template <typename P, typename G, typename S>
__global__ void AdamWMixedKernel(P* __restrict__ params, const G* __restrict__ grads, S* __restrict__ exp_avg,
                                 S* __restrict__ exp_avg_sq, int64_t n, int64_t offset, AdamWKernelArgs args,
                                 const AdamWKernelArgs* __restrict__ staged, const float* __restrict__ scale,
                                 const float* __restrict__ skip, uint16_t* __restrict__ lo) {
  if (Skip(skip)) return;
  const AdamWKernelArgs a = staged != nullptr ? *staged : args;
  const float s = __fmul_rn(a.grad_scale, scale != nullptr ? *scale : 1.0f);
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    const float g = __fmul_rn(LoadF32(grads[i]), s);
    const float p = __fmul_rn(LoadParam(params, lo, i), a.decay);
    const float m = __fadd_rn(__fmul_rn(a.beta1, LoadF32(exp_avg[i])), __fmul_rn(a.one_minus_b1, g));
    const float v = __fadd_rn(__fmul_rn(a.beta2, LoadF32(exp_avg_sq[i])), __fmul_rn(a.one_minus_b2, __fmul_rn(g, g)));
    const float denom = __fadd_rn(__fdiv_rn(__fsqrt_rn(v), a.bc2_sqrt), a.eps);
    const float pn = __fsub_rn(p, __fmul_rn(a.step_size, __fdiv_rn(m, denom)));
    const uint64_t z = SrBits(a.sr_key, static_cast<uint64_t>(offset + i));
    Store(&exp_avg[i], m, static_cast<uint32_t>(z >> 32));
    Store(&exp_avg_sq[i], v, static_cast<uint32_t>(z >> 16));
    StoreParam(params, lo, i, pn, static_cast<uint32_t>(z >> 48));
  }
}

__global__ void GradClipCoefKernel(const float* __restrict__ sum_squares, float max_norm, bool clip,
                                   float* __restrict__ norm, float* __restrict__ coef) {
  const float nrm = sqrtf(*sum_squares);
  *norm = nrm;
  if (!clip) {
    *coef = 1.0f;
    return;
  }
  const float c = max_norm / (nrm + 1e-6f);
  *coef = c > 1.0f ? 1.0f : c;  // NaN stays NaN
}

}  // namespace

Status SgdUpdateCuda(float* params, const float* grads, float* momentum_buf, int64_t n, const SgdHyper& h,
                     const float* scale, cudaStream_t stream, const float* skip, const SgdKernelArgs* staged) {
  DT_NVTX_FN();
  DT_CHECK_ARG(n >= 0, "negative element count " << n);
  if (n == 0) return Status::OK();
  SgdKernel<<<GridFor(n), kThreads, 0, stream>>>(params, grads, momentum_buf, n, StagedArgsFor(h), staged, scale, skip);
  DT_CUDA_CHECK_LAUNCH();
  return Status::OK();
}

Status AdamWUpdateCuda(float* params, const float* grads, float* exp_avg, float* exp_avg_sq, int64_t n,
                       const AdamWHyper& h, const float* scale, cudaStream_t stream, const float* skip,
                       const AdamWKernelArgs* staged) {
  DT_NVTX_FN();
  DT_CHECK_ARG(n >= 0, "negative element count " << n);
  DT_CHECK_ARG(h.step >= 1, "AdamW step counts from 1, got " << h.step);
  if (n == 0) return Status::OK();
  AdamWKernel<<<GridFor(n), kThreads, 0, stream>>>(params, grads, exp_avg, exp_avg_sq, n, StagedArgsFor(h), staged,
                                                   scale, skip);
  DT_CUDA_CHECK_LAUNCH();
  return Status::OK();
}

namespace {

// The storage combination's instance of AdamWMixedKernel, for grads of type G.
template <typename G>
void LaunchAdamWMixed(void* params, bool params_bf16, const G* grads, void* exp_avg, void* exp_avg_sq, bool state_bf16,
                      int64_t n, int64_t offset, const AdamWKernelArgs& args, const AdamWKernelArgs* staged,
                      const float* scale, const float* skip, uint16_t* lo, cudaStream_t stream) {
  using Bf16 = uint16_t;
  const int grid = GridFor(n);
  if (params_bf16 && state_bf16) {
    AdamWMixedKernel<<<grid, kThreads, 0, stream>>>(static_cast<Bf16*>(params), grads, static_cast<Bf16*>(exp_avg),
                                                    static_cast<Bf16*>(exp_avg_sq), n, offset, args, staged, scale,
                                                    skip, lo);
  } else if (params_bf16) {
    AdamWMixedKernel<<<grid, kThreads, 0, stream>>>(static_cast<Bf16*>(params), grads, static_cast<float*>(exp_avg),
                                                    static_cast<float*>(exp_avg_sq), n, offset, args, staged, scale,
                                                    skip, lo);
  } else if (state_bf16) {
    AdamWMixedKernel<<<grid, kThreads, 0, stream>>>(static_cast<float*>(params), grads, static_cast<Bf16*>(exp_avg),
                                                    static_cast<Bf16*>(exp_avg_sq), n, offset, args, staged, scale,
                                                    skip, lo);
  } else {
    AdamWMixedKernel<<<grid, kThreads, 0, stream>>>(static_cast<float*>(params), grads, static_cast<float*>(exp_avg),
                                                    static_cast<float*>(exp_avg_sq), n, offset, args, staged, scale,
                                                    skip, lo);
  }
}

}  // namespace

Status AdamWUpdateMixedCuda(void* params, bool params_bf16, const void* grads, bool grads_bf16, void* exp_avg,
                            void* exp_avg_sq, bool state_bf16, int64_t n, const AdamWHyper& h, const float* scale,
                            cudaStream_t stream, const float* skip, const AdamWKernelArgs* staged,
                            uint16_t* master_low) {
  DT_NVTX_FN();
  DT_CHECK_ARG(n >= 0, "negative element count " << n);
  DT_CHECK_ARG(h.step >= 1, "AdamW step counts from 1, got " << h.step);
  DT_CHECK_ARG(params_bf16 || grads_bf16 || state_bf16, "AdamWUpdateMixedCuda: all f32 is AdamWUpdateCuda");
  DT_CHECK_ARG(master_low == nullptr || params_bf16, "AdamWUpdateMixedCuda: master_low needs bf16 params");
  if (n == 0) return Status::OK();
  const AdamWKernelArgs args = StagedArgsFor(h);
  if (grads_bf16) {
    LaunchAdamWMixed(params, params_bf16, static_cast<const uint16_t*>(grads), exp_avg, exp_avg_sq, state_bf16, n,
                     h.sr_offset, args, staged, scale, skip, master_low, stream);
  } else {
    LaunchAdamWMixed(params, params_bf16, static_cast<const float*>(grads), exp_avg, exp_avg_sq, state_bf16, n,
                     h.sr_offset, args, staged, scale, skip, master_low, stream);
  }
  DT_CUDA_CHECK_LAUNCH();
  return Status::OK();
}

Status GradClipCoefCuda(const float* sum_squares, double max_norm, float* norm, float* coef, cudaStream_t stream) {
  DT_NVTX_FN();
  GradClipCoefKernel<<<1, 1, 0, stream>>>(sum_squares, static_cast<float>(max_norm), max_norm > 0.0, norm, coef);
  DT_CUDA_CHECK_LAUNCH();
  return Status::OK();
}

}  // namespace dtrain::ops
