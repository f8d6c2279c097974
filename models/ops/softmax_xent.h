#pragma once
// Fused, numerically stable softmax + cross-entropy over the rows of logits[B,V], and row argmax.
//
//   losses[b]     = logsumexp(logits[b,:]) - logits[b, targets[b]]
//   dlogits[b, j] = (softmax(logits[b,:])[j] - (j == targets[b])) * grad_scale     (SET, not accumulated)
// grad_scale = loss_scale / B gives the gradient of loss_scale * mean loss. dlogits may be null (eval only).
// Targets are i32. An out-of-range target (outside [0, V)) is an InvalidArgument on the CPU (checked before
// anything is written). On the GPU it cannot be reported without a host sync, so the row's loss AND its whole
// dlogits row are set to NaN (never an out-of-bounds read): the NaN shows up in the loss the trainer logs.
//
// Argmax: out[b] = the smallest j with logits[b,j] == max_j logits[b,j] (ties go to the lowest index; NaN is
// never the max; a row of only NaN/-inf gives 0), as i32.
//
// CPU references take T = float or double (sums in double); CUDA launchers are f32, one block per row,
// queued on `stream`. The Tensor entry points check shapes/dtypes/devices (InvalidArgument naming the
// shapes) and dispatch CPU f32/f64 -> *Cpu, CUDA f32 -> *Cuda.

#include <cstdint>

#include "runtime/core/cuda_fwd.h"
#include "runtime/core/device_context.h"
#include "runtime/core/status.h"
#include "runtime/core/tensor.h"

namespace dtrain::ops {

template <typename T>
Status SoftmaxCrossEntropyCpu(T* losses, T* dlogits, const T* logits, const int32_t* targets, int64_t b, int64_t v,
                              T grad_scale);
template <typename T>
void ArgmaxCpu(int32_t* out, const T* logits, int64_t b, int64_t v);

// CUDA builds only.
Status SoftmaxCrossEntropyCuda(float* losses, float* dlogits, const float* logits, const int32_t* targets, int64_t b,
                               int64_t v, float grad_scale, cudaStream_t stream);
Status ArgmaxCuda(int32_t* out, const float* logits, int64_t b, int64_t v, cudaStream_t stream);

// logits [B,V] (f32/f64), targets i32[B], losses [B] (dtype of logits), dlogits [B,V] or null.
Status SoftmaxCrossEntropy(DeviceContext& ctx, const Tensor& logits, const Tensor& targets, Tensor* losses,
                           Tensor* dlogits, float grad_scale);
// logits [B,V], out i32[B].
Status Argmax(DeviceContext& ctx, const Tensor& logits, Tensor* out);

}  // namespace dtrain::ops
