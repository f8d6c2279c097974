#pragma once
// Fused optimizer updates over flat buffers: one pass reads params, grads and the optimizer state
// and writes the new params and state. PyTorch semantics (torch.optim.SGD, torch.optim.AdamW with
// dampening 0 and amsgrad off).
//
// The gradient used by an update is  g = grads[i] * grad_scale * (*scale)  where `scale` is an
// optional 1-element tensor (device scalar) on the params' device. It lets clipping or averaging
// be applied inside the update kernel with no extra pass over the gradients and no host sync: the
// clip coefficient is computed on the device (GradClipCoef) and read by the update kernel.
// grads are never modified.
//
// `skip` is an optional 1-element tensor (device scalar) like `scale`: when it holds a nonzero value the update
// does nothing at all (params and state keep their values). Dynamic loss scaling (kernels/loss_scale.h) sets
// it when the gradient has an inf/NaN, so a step is skipped on the device without a host sync.
//
// Hyper-parameters are plain per-call arguments (the LR may change every step). Device work is
// queued on ctx.stream(); nothing here synchronizes the host.
//
// Mixed storage (AdamW only; the "mixed" update below): params f32 or bf16, grads f32 or bf16 (train.gradients; read
// exactly), optimizer state (exp_avg, exp_avg_sq) f32 or bf16, scale and skip f32, on the CPU and on CUDA. The math is
// f32, the same operations in the same order on both (each one IEEE-rounded: no FMA contraction, kernels use the _rn
// intrinsics and optim_update.cc is built with -ffp-contract=off), and every bf16 value stored is rounded
// stochastically (kernels/bf16_round.h) with the bits SrBits(SrKey(sr_seed, step), sr_offset + i) of element i:
// bits 48..63 round the param, 32..47 exp_avg, 16..31 exp_avg_sq. So the CUDA kernel equals the CPU reference bit for
// bit, the same (seed, step) gives the same bits on every run, and a bf16 value is unbiased (a bf16 EMA with beta2 =
// 0.999 rounded to nearest would stop moving: 0.1% of v is less than half a bf16 ulp).
// Split masters (train.master_weights split): with `master_low`, bf16 params are the high halves of fp32 masters whose
// low 16 bits master_low holds (kernels/bf16_round.h SplitF32 / JoinF32): the update reads the exact fp32 master and
// writes its new value's halves back, no stochastic rounding — the fp32-params update's value, bit for bit.

#include <cstdint>
#include <initializer_list>

#include "core/cuda_fwd.h"
#include "core/device_context.h"
#include "core/status.h"
#include "core/tensor.h"

namespace dtrain::ops {

// SGD with momentum, per element:
//   g = grad * scale;  if (weight_decay != 0) g += weight_decay * p      (coupled decay)
//   buf = momentum * buf + g                                             (buf starts at 0)
//   p -= lr * (nesterov ? g + momentum * buf : buf)
struct SgdHyper {
  double lr = 0.0;
  double momentum = 0.0;
  double weight_decay = 0.0;
  bool nesterov = false;
  double grad_scale = 1.0;
};

// AdamW, per element, at step t >= 1 (the number of this update, counting from 1):
//   g = grad * scale;  p *= 1 - lr * weight_decay                        (decoupled decay)
//   m = beta1 * m + (1 - beta1) * g;   v = beta2 * v + (1 - beta2) * g^2 (m, v start at 0)
//   p -= (lr / (1 - beta1^t)) * m / (sqrt(v) / sqrt(1 - beta2^t) + eps)
struct AdamWHyper {
  double lr = 0.0;
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-8;
  double weight_decay = 0.0;
  int64_t step = 1;
  double grad_scale = 1.0;
  // Mixed storage only (see the file comment): the seed of the stochastic rounding of bf16 values, and the index in
  // the whole flat buffer of this call's element 0 (a range's offset, so any cut of the buffer draws the same bits).
  uint64_t sr_seed = 0;
  int64_t sr_offset = 0;
};

namespace detail {
// Per-call AdamW constants, computed once on the host in f64 (shared by the CPU and CUDA paths so
// that both use identical rounded values).
struct AdamWCoefs {
  double decay;         // 1 - lr * weight_decay
  double one_minus_b1;  // 1 - beta1
  double one_minus_b2;  // 1 - beta2
  double step_size;     // lr / (1 - beta1^t)
  double bc2_sqrt;      // sqrt(1 - beta2^t)
};
AdamWCoefs MakeAdamWCoefs(const AdamWHyper& h);
}  // namespace detail

// ---- CPU references (T = float, double). `scale` may be null (= 1). --------------------------
// `skip` may be null (never skip).
template <typename T>
void SgdUpdateCpu(T* params, const T* grads, T* momentum_buf, int64_t n, const SgdHyper& h, const T* scale,
                  const T* skip = nullptr);
template <typename T>
void AdamWUpdateCpu(T* params, const T* grads, T* exp_avg, T* exp_avg_sq, int64_t n, const AdamWHyper& h,
                    const T* scale, const T* skip = nullptr);
// From the sum of squares of all grads: *norm = sqrt(sum_squares), and the clip_grad_norm_
// coefficient *coef = min(1, max_norm / (norm + 1e-6)); *coef = 1 when max_norm <= 0 (clipping
// off). A non-finite norm gives a NaN coefficient when clipping, as in PyTorch.
template <typename T>
void GradClipCoefCpu(const T* sum_squares, double max_norm, T* norm, T* coef);
// The mixed-storage AdamW (see the file comment). P, G, S: float or uint16_t (bf16 bits), not all float (that is
// AdamWUpdateCpu<float>). `scale`, `skip` may be null.
// `master_low` (null: none) takes P = uint16_t.
template <typename P, typename G, typename S>
void AdamWUpdateMixedCpu(P* params, const G* grads, S* exp_avg, S* exp_avg_sq, int64_t n, const AdamWHyper& h,
                         const float* scale, const float* skip = nullptr, uint16_t* master_low = nullptr);

// ---- Staged hyper-parameters (CUDA graphs) --------------------------------------------------------
// A CUDA graph replays kernels with the arguments they were captured with, but the LR and AdamW's bias
// corrections change every step. The CUDA update kernels therefore can read their f32 constants from device
// memory instead: the caller stages the kernel args below (StagedArgsFor, computed exactly as the argument
// path computes them, so both paths give bitwise equal results) into a device buffer before the kernel runs
// and passes that buffer as `staged`. On the CPU `staged` is ignored (the update takes `h` directly).
struct SgdKernelArgs {
  float lr, momentum, weight_decay, grad_scale;
  int32_t nesterov;
};
struct AdamWKernelArgs {
  float decay, beta1, one_minus_b1, beta2, one_minus_b2, step_size, bc2_sqrt, eps, grad_scale;
  uint64_t sr_key;  // SrKey(sr_seed, step): the mixed update's stochastic rounding (kernels/bf16_round.h)
};
SgdKernelArgs StagedArgsFor(const SgdHyper& h);
AdamWKernelArgs StagedArgsFor(const AdamWHyper& h);
// Bytes a staging buffer needs for either struct.
constexpr size_t kStagedArgsBytes = 64;
static_assert(sizeof(SgdKernelArgs) <= kStagedArgsBytes && sizeof(AdamWKernelArgs) <= kStagedArgsBytes);

// ---- CUDA launchers (f32, defined in optim_update.cu). `scale`, `skip`: device pointers or null. ---
// `staged`: null (take the constants from `h`) or a device pointer to the StagedArgsFor(h) struct.
#if DT_HAVE_CUDA
Status SgdUpdateCuda(float* params, const float* grads, float* momentum_buf, int64_t n, const SgdHyper& h,
                     const float* scale, cudaStream_t stream, const float* skip = nullptr,
                     const SgdKernelArgs* staged = nullptr);
Status AdamWUpdateCuda(float* params, const float* grads, float* exp_avg, float* exp_avg_sq, int64_t n,
                       const AdamWHyper& h, const float* scale, cudaStream_t stream, const float* skip = nullptr,
                       const AdamWKernelArgs* staged = nullptr);
// The mixed-storage AdamW: params, grads and state are f32 or bf16 (raw bits) as `params_bf16` / `grads_bf16` /
// `state_bf16` say (not all false); the pointers are typed void for that reason. `master_low`: null, or (bf16 params)
// the split masters' low halves.
Status AdamWUpdateMixedCuda(void* params, bool params_bf16, const void* grads, bool grads_bf16, void* exp_avg,
                            void* exp_avg_sq, bool state_bf16, int64_t n, const AdamWHyper& h, const float* scale,
                            cudaStream_t stream, const float* skip = nullptr, const AdamWKernelArgs* staged = nullptr,
                            uint16_t* master_low = nullptr);
// All pointers are device scalars.
Status GradClipCoefCuda(const float* sum_squares, double max_norm, float* norm, float* coef, cudaStream_t stream);
#endif

// ---- Tensor level: checks, then dispatch (CPU f32/f64, CUDA f32) ----------------------------
// All tensors on ctx's device with one dtype; params, grads and state have the same numel; `scale`
// and `skip` (nullable) are 1-element tensors. `staged` (nullable; used on CUDA only): a device tensor of at
// least kStagedArgsBytes holding StagedArgsFor(h) by the time the kernel runs.
//
// The checks every fused update's tensor-level entry runs (these and any other optimizer's, e.g.
// kernels/lion_update.h), with the rules above: params non-null, f32 (CUDA) or f32/f64 (CPU), on ctx's device;
// grads and each `state` tensor (non-null, named for the error) like params with its numel; scale, skip and
// staged as above. InvalidArgument naming the offending tensor.
struct UpdateStateArg {
  const char* name;
  const Tensor* tensor;
};
Status CheckUpdateTensors(const DeviceContext& ctx, const Tensor* params, const Tensor& grads,
                          std::initializer_list<UpdateStateArg> state, const Tensor* scale, const Tensor* skip,
                          const Tensor* staged);
Status SgdUpdate(DeviceContext& ctx, const SgdHyper& h, Tensor* params, const Tensor& grads, Tensor* momentum_buf,
                 const Tensor* scale = nullptr, const Tensor* skip = nullptr, const Tensor* staged = nullptr);
// AdamWUpdate also takes mixed storage (see the file comment): params f32 or bf16, grads f32 or bf16, exp_avg and
// exp_avg_sq both f32 or both bf16, scale and skip f32; f64 only when everything is f64 (CPU). `master_low` (split
// masters; null: none): bf16 (the raw low halves) of params' numel beside bf16 params.
Status AdamWUpdate(DeviceContext& ctx, const AdamWHyper& h, Tensor* params, const Tensor& grads, Tensor* exp_avg,
                   Tensor* exp_avg_sq, const Tensor* scale = nullptr, const Tensor* skip = nullptr,
                   const Tensor* staged = nullptr, Tensor* master_low = nullptr);
// `sum_squares` as produced by SumSquares (reduce.h); `norm` and `coef` are 1-element tensors like
// it (allocated from ctx.allocator() when undefined).
Status GradClipCoef(DeviceContext& ctx, const Tensor& sum_squares, double max_norm, Tensor* norm, Tensor* coef);

}  // namespace dtrain::ops
