#pragma once
// BatchNorm over channels-last activations (x [..., C], an [N,H,W,C] map: M = numel / C rows of C channels), fused
// with an optional residual add and ReLU, for the CNN's bf16 path. Same statistics and parameters as batchnorm.h
// (BatchNormTensors, momentum 0.1, eps 1e-5, biased batch variance, unbiased running variance):
//
//   training:  mean_c, var_c over the M rows,  inv_std_c = 1 / sqrt(var_c + eps)
//              y = act((x - mean_c) * (gamma_c * inv_std_c) + beta_c + residual)     act = ReLU or identity
//              running_mean_c = (1 - momentum) * running_mean_c + momentum * mean_c
//              running_var_c  = (1 - momentum) * running_var_c + momentum * var_c * M / (M - 1)
//              save_mean_c, save_inv_std_c are written for the backward pass
//   eval:      y = act((x - running_mean_c) * (gamma_c / sqrt(running_var_c + eps)) + beta_c + residual)
//   backward of the last training forward, with out = its y (read only when relu) and xhat = (x - mean) * inv_std:
//              g = relu ? dout * (out > 0) : dout;   dg = g (the residual's gradient, when dg is given)
//              dbeta_c (+)= sum(g),  dgamma_c (+)= sum(g * xhat)          (added when accumulate_param_grads)
//              dx = gamma_c * inv_std_c * (g - sum(g) / M - xhat * sum(g * xhat) / M)      (overwritten)
//
// Dtypes: on CUDA the [..., C] tensors (x, residual, y, dout, out, dx, dg) are bf16 (uint16_t raw bits in the
// pointer API) and the per-channel [C] tensors are f32; all math is fp32, y and dx are rounded to bf16 once at the
// end. On the CPU every tensor is f32 or f64 (one dtype throughout): the reference, sums in double.
//
// CUDA design (queued on `stream`, no host syncs, no atomics, bitwise reproducible run to run and GPU to GPU): a
// block covers a chunk of rows and up to 256 column vectors of 8 channels (16-byte loads when C % 8 == 0 and every
// [..., C] pointer is 16-byte aligned, else one channel a thread), so each thread keeps its channels' parameters in
// registers. The training forward is three launches: per-(chunk, channel) sums of x and x^2 in double (a fixed
// tree over the block), a finish kernel that adds the chunks in a fixed order per channel (statistics, running
// stats), and the element-wise apply. The backward likewise: sums of g and g * x in double (also writing dg), a
// finish (dgamma, dbeta, the dx coefficients), and the dx pass (reading dg when it was written, else dout and out).
// Eval is one launch. The training forward and the backward take `scratch` of BatchNormNhwcScratchDoubles(m, c)
// device doubles, free again once the queued kernels have run (the Tensor entry points take it from ctx's
// allocator).
//
// Aliasing: every kernel reads and writes an element of a [..., C] tensor in the same thread, after the
// statistics pass has finished, so y may be x or residual, dx may be x, dout or out, and dg may be dout (in place).
// Per-channel outputs must not alias anything else.

#include <cstdint>

#include "core/cuda_fwd.h"
#include "core/device_context.h"
#include "core/status.h"
#include "core/tensor.h"
#include "kernels/batchnorm.h"

namespace dtrain::ops {

// ---- CPU references (T = float or double; residual, dg may be null; out is read only when relu) -----------------
template <typename T>
void BatchNormNhwcForwardTrainingCpu(T* y, T* save_mean, T* save_inv_std, T* running_mean, T* running_var, const T* x,
                                     const T* residual, const T* gamma, const T* beta, int64_t m, int64_t c, T momentum,
                                     T eps, bool relu);
template <typename T>
void BatchNormNhwcForwardEvalCpu(T* y, const T* x, const T* residual, const T* gamma, const T* beta,
                                 const T* running_mean, const T* running_var, int64_t m, int64_t c, T eps, bool relu);
template <typename T>
void BatchNormNhwcBackwardCpu(T* dx, T* dg, T* dgamma, T* dbeta, const T* x, const T* dout, const T* out,
                              const T* gamma, const T* save_mean, const T* save_inv_std, int64_t m, int64_t c,
                              bool relu, bool accumulate_param_grads);

// ---- CUDA launchers (bf16 activations, f32 per-channel; CUDA builds only) ----------------------------------------
int64_t BatchNormNhwcScratchDoubles(int64_t m, int64_t c);
Status BatchNormNhwcForwardTrainingCudaBf16(uint16_t* y, float* save_mean, float* save_inv_std, float* running_mean,
                                            float* running_var, const uint16_t* x, const uint16_t* residual,
                                            const float* gamma, const float* beta, int64_t m, int64_t c, float momentum,
                                            float eps, bool relu, double* scratch, cudaStream_t stream);
Status BatchNormNhwcForwardEvalCudaBf16(uint16_t* y, const uint16_t* x, const uint16_t* residual, const float* gamma,
                                        const float* beta, const float* running_mean, const float* running_var,
                                        int64_t m, int64_t c, float eps, bool relu, cudaStream_t stream);
// `out` is read only when relu (then required); `dg` may be null.
Status BatchNormNhwcBackwardCudaBf16(uint16_t* dx, uint16_t* dg, float* dgamma, float* dbeta, const uint16_t* x,
                                     const uint16_t* dout, const uint16_t* out, const float* gamma,
                                     const float* save_mean, const float* save_inv_std, int64_t m, int64_t c, bool relu,
                                     bool accumulate_param_grads, double* scratch, cudaStream_t stream);

// ---- Tensor entry points -------------------------------------------------------------------------------------
// x, residual, y, dout, out, dx, dg: one shape [..., C] (at least 2 dims, M > 0); per-channel tensors [C]. Shapes,
// dtypes and devices are checked (InvalidArgument naming the shapes).

// Training forward: updates bn->running_* and writes bn->save_*. residual may be null.
Status BatchNormNhwcForwardTraining(DeviceContext& ctx, const Tensor& x, BatchNormTensors* bn, const Tensor* residual,
                                    bool relu, Tensor* y, float momentum = kBatchNormMomentum,
                                    float eps = kBatchNormEps);
// Eval forward with the running statistics. residual may be null.
Status BatchNormNhwcForwardEval(DeviceContext& ctx, const Tensor& x, const BatchNormTensors& bn, const Tensor* residual,
                                bool relu, Tensor* y, float eps = kBatchNormEps);
// Backward of the last training forward (uses bn.gamma and bn.save_*). out: that forward's y, required iff relu
// (pass null otherwise: relu is taken as out != nullptr). dg may be null.
Status BatchNormNhwcBackward(DeviceContext& ctx, const Tensor& x, const Tensor& dout, const Tensor* out,
                             const BatchNormTensors& bn, Tensor* dx, Tensor* dg, Tensor* dgamma, Tensor* dbeta,
                             bool accumulate_param_grads);

}  // namespace dtrain::ops
