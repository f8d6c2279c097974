#pragma once
// Fused, numerically stable softmax + cross-entropy over the rows of logits[B,V], and row argmax.
//
// Only the first `valid_cols` (U, 0 < U <= V) columns are classes; columns >= U are padding (GPT-2's vocabulary
// 50257 padded to 50304): they take no part in the softmax or the argmax, and their dlogits are 0.
//   losses[b]     = logsumexp(logits[b, :U]) - logits[b, targets[b]]
//   dlogits[b, j] = (softmax(logits[b, :U])[j] - (j == targets[b])) * grad_scale  for j < U, 0 for j >= U  (SET)
// grad_scale = loss_scale / B gives the gradient of loss_scale * mean loss. dlogits may be null (eval only), and
// may be the logits tensor itself (computed in place: saves a [B,V] buffer). valid_cols = -1 means V.
// SoftmaxCrossEntropyBackward (from_losses in the raw layers) writes only dlogits, taking each row's logsumexp as
// losses[b] + logits[b, targets[b]] from the losses of an earlier forward call on the same logits: one pass over
// the row instead of two (GPT-2's [16384, 50304] logits: 1.6 GB less to read per step).
// Targets are i32. An out-of-range target (outside [0, U)) is an InvalidArgument on the CPU (checked before
// anything is written). On the GPU it cannot be reported without a host sync, so the row's loss AND its whole
// dlogits row are set to NaN (never an out-of-bounds read): the NaN shows up in the loss the trainer logs.
//
// Argmax: out[b] = the smallest j < U with logits[b,j] == max_{j<U} logits[b,j] (ties go to the lowest index; NaN
// is never the max; a row of only NaN/-inf gives 0), as i32.
//
// CPU references take T = float or double (sums in double); CUDA launchers take f32 logits (f32 losses and
// dlogits) or bf16 / fp16 logits (f32 losses, 16-bit dlogits; fp32 math; 16-bit buffers are uint16_t raw bits),
// one block per row with 128-bit loads when V and the pointers allow, queued on `stream`. A row of more than 512
// 128-bit vectors and at most 112 KB (57,344 16-bit columns; GPT-2's 50304) is read from memory once, through shared
// memory, so the fused call costs one read and one write of the logits; its exp is the hardware ex2.approx (about
// 1e-6 relative error, against expf's 1e-7 in the other rows' kernel). The Tensor entry points check
// shapes/dtypes/devices (InvalidArgument naming the shapes) and dispatch CPU f32/f64 -> *Cpu, CUDA f32 -> *Cuda, CUDA
// bf16 -> *CudaBf16, CUDA f16 -> *CudaF16.

#include <cstdint>

#include "core/cuda_fwd.h"
#include "core/device_context.h"
#include "core/status.h"
#include "core/tensor.h"

namespace dtrain::ops {

// Raw-pointer layers take valid_cols explicitly (1 <= valid_cols <= v).
template <typename T>
Status SoftmaxCrossEntropyCpu(T* losses, T* dlogits, const T* logits, const int32_t* targets, int64_t b, int64_t v,
                              int64_t valid_cols, T grad_scale, bool from_losses = false);
template <typename T>
void ArgmaxCpu(int32_t* out, const T* logits, int64_t b, int64_t v, int64_t valid_cols);

// CUDA builds only.
Status SoftmaxCrossEntropyCuda(float* losses, float* dlogits, const float* logits, const int32_t* targets, int64_t b,
                               int64_t v, int64_t valid_cols, float grad_scale, bool from_losses, cudaStream_t stream);
Status SoftmaxCrossEntropyCudaBf16(float* losses, uint16_t* dlogits, const uint16_t* logits, const int32_t* targets,
                                   int64_t b, int64_t v, int64_t valid_cols, float grad_scale, bool from_losses,
                                   cudaStream_t stream);
Status ArgmaxCuda(int32_t* out, const float* logits, int64_t b, int64_t v, int64_t valid_cols, cudaStream_t stream);
Status ArgmaxCudaBf16(int32_t* out, const uint16_t* logits, int64_t b, int64_t v, int64_t valid_cols,
                      cudaStream_t stream);
Status SoftmaxCrossEntropyCudaF16(float* losses, uint16_t* dlogits, const uint16_t* logits, const int32_t* targets,
                                  int64_t b, int64_t v, int64_t valid_cols, float grad_scale, bool from_losses,
                                  cudaStream_t stream);
Status ArgmaxCudaF16(int32_t* out, const uint16_t* logits, int64_t b, int64_t v, int64_t valid_cols,
                     cudaStream_t stream);

// logits [B,V] (f32/f64; bf16/f16 on CUDA), targets i32[B], losses [B] (dtype of logits; f32 for 16-bit logits),
// dlogits [B,V] like logits, or null, or logits itself.
Status SoftmaxCrossEntropy(DeviceContext& ctx, const Tensor& logits, const Tensor& targets, Tensor* losses,
                           Tensor* dlogits, float grad_scale, int64_t valid_cols = -1);
// dlogits only (non-null; may be logits itself), from `losses` written by SoftmaxCrossEntropy on these logits.
Status SoftmaxCrossEntropyBackward(DeviceContext& ctx, const Tensor& logits, const Tensor& targets,
                                   const Tensor& losses, Tensor* dlogits, float grad_scale, int64_t valid_cols = -1);
// logits [B,V], out i32[B].
Status Argmax(DeviceContext& ctx, const Tensor& logits, Tensor* out, int64_t valid_cols = -1);

}  // namespace dtrain::ops
