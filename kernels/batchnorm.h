#pragma once
// BatchNorm over NCHW activations, per channel (PyTorch nn.BatchNorm2d, affine, momentum 0.1, eps 1e-5).
// x is [N,C,...] with M = N * (product of the trailing dims) values per channel ([N,C] works too: M = N).
//
//   training:  mean_c = sum(x) / M,  var_c = sum((x - mean_c)^2) / M (biased),  inv_std_c = 1 / sqrt(var_c + eps)
//              y = (x - mean_c) * (gamma_c * inv_std_c) + beta_c
//              running_mean_c = (1 - momentum) * running_mean_c + momentum * mean_c
//              running_var_c  = (1 - momentum) * running_var_c + momentum * var_c * M / (M - 1)   (unbiased)
//              save_mean_c, save_inv_std_c are written for the backward pass
//   eval:      y = (x - running_mean_c) * (gamma_c / sqrt(running_var_c + eps)) + beta_c
//   backward (of training mode), xhat = (x - save_mean) * save_inv_std:
//              dbeta_c (+)= sum(dy),  dgamma_c (+)= sum(dy * xhat)
//              dx = gamma_c * inv_std_c * (dy - sum(dy) / M - xhat * sum(dy * xhat) / M)      (overwritten)
//
// `accumulate` on a forward adds the result to y (y += BN(x): a residual block's skip sum) instead of
// overwriting it. dgamma/dbeta accumulate when `accumulate_param_grads` (the Model protocol: grads add up
// across micro-steps). Sums run in double on both devices.
// CPU references take T = float or double. CUDA (f32): own kernels over a (chunk, channel)
// grid whose partial sums are added per channel in a fixed order, so results are bitwise reproducible (no atomics);
// queued on `stream`.
// The Tensor entry points check shapes/dtypes/devices (InvalidArgument naming the shapes) and dispatch CPU
// f32/f64 -> *Cpu, CUDA f32 -> *Cuda. Per-channel tensors (gamma, beta, running and saved stats) are [C].
// Outputs must not alias inputs.

#include <cstdint>

#include "core/cuda_fwd.h"
#include "core/device_context.h"
#include "core/status.h"
#include "core/tensor.h"

namespace dtrain::ops {

constexpr float kBatchNormMomentum = 0.1f;
constexpr float kBatchNormEps = 1e-5f;

// Channel layout of an x of [n, c, hw...]: element (i, ch, j) is at (i * c + ch) * hw + j.
struct BatchNormDims {
  int64_t n = 0, c = 0, hw = 0;
};

// ---- CPU references ------------------------------------------------------------------------------------------
template <typename T>
void BatchNormForwardTrainingCpu(T* y, T* save_mean, T* save_inv_std, T* running_mean, T* running_var, const T* x,
                                 const T* gamma, const T* beta, const BatchNormDims& d, T momentum, T eps,
                                 bool accumulate);
template <typename T>
void BatchNormForwardEvalCpu(T* y, const T* x, const T* gamma, const T* beta, const T* running_mean,
                             const T* running_var, const BatchNormDims& d, T eps, bool accumulate);
template <typename T>
void BatchNormBackwardCpu(T* dx, T* dgamma, T* dbeta, const T* dy, const T* x, const T* gamma, const T* save_mean,
                          const T* save_inv_std, const BatchNormDims& d, bool accumulate_param_grads);

// ---- CUDA launchers (f32; CUDA builds only) ------------------------------------------------------------------
// The training forward and the backward take `scratch`: BatchNormScratchDoubles(d) device doubles (partial sums),
// free again once the queued kernels have run.
int64_t BatchNormScratchDoubles(const BatchNormDims& d);
Status BatchNormForwardTrainingCuda(float* y, float* save_mean, float* save_inv_std, float* running_mean,
                                    float* running_var, const float* x, const float* gamma, const float* beta,
                                    const BatchNormDims& d, float momentum, float eps, bool accumulate, double* scratch,
                                    cudaStream_t stream);
Status BatchNormForwardEvalCuda(float* y, const float* x, const float* gamma, const float* beta,
                                const float* running_mean, const float* running_var, const BatchNormDims& d, float eps,
                                bool accumulate, cudaStream_t stream);
Status BatchNormBackwardCuda(float* dx, float* dgamma, float* dbeta, const float* dy, const float* x,
                             const float* gamma, const float* save_mean, const float* save_inv_std,
                             const BatchNormDims& d, bool accumulate_param_grads, double* scratch, cudaStream_t stream);

// ---- Tensor entry points -------------------------------------------------------------------------------------
// Per-layer tensors: gamma/beta are parameters (views into the model's flat buffer), running_* are model
// buffers, save_* are per-forward scratch that backward reads.
struct BatchNormTensors {
  Tensor gamma, beta;
  Tensor running_mean, running_var;
  Tensor save_mean, save_inv_std;
};

// Training-mode forward: updates bn->running_* and writes bn->save_*.
Status BatchNormForwardTraining(DeviceContext& ctx, const Tensor& x, BatchNormTensors* bn, Tensor* y, bool accumulate,
                                float momentum = kBatchNormMomentum, float eps = kBatchNormEps);
Status BatchNormForwardEval(DeviceContext& ctx, const Tensor& x, const BatchNormTensors& bn, Tensor* y, bool accumulate,
                            float eps = kBatchNormEps);
// Backward of the last training-mode forward of `x` (uses bn.gamma and bn.save_*).
Status BatchNormBackward(DeviceContext& ctx, const Tensor& x, const Tensor& dy, const BatchNormTensors& bn, Tensor* dx,
                         Tensor* dgamma, Tensor* dbeta, bool accumulate_param_grads);

}  // namespace dtrain::ops
