#pragma once
// Matmul: C[M,N] = alpha * op(A) @ op(B) + beta * C on row-major matrices, op(X) = X^T when trans_x.
//
// Three layers, like every op in kernels:
//   - MatmulCpu<T>: the CPU reference (T = float or double), raw pointers. Loop order i-k-j over
//     k-blocks (B is transposed into a scratch buffer first when trans_b), no BLAS dependency.
//   - MatmulCuda / MatmulCudaLt: cuBLASLt with CUBLAS_COMPUTE_32F and an f32 alpha/beta (TF32 is OFF: f32
//     results agree with the CPU to fp32 rounding). A and B are f32, or bf16 / f16 (mixed precision: fp32
//     accumulation); C is f32, or A's 16-bit type. Queued on `stream`; asynchronous w.r.t. the host.
//   - Matmul: the Tensor entry point used by the models; checks shapes/dtypes/devices (InvalidArgument
//     naming the shapes) and dispatches: CPU f32/f64 -> MatmulCpu, CUDA f32, bf16 or f16 -> MatmulCudaLt.
// beta = 1 accumulates into C (weight gradients across micro-steps, also into an f32 C from 16-bit A and B);
// beta = 0 never reads C, so C may hold garbage (even NaN) on entry. C must not alias A or B.
//
// Plan cache: the cuBLASLt descriptors, layouts and the heuristic's algorithm are built once per (device, dtypes,
// transposes, M, N, K, epilogue, operand alignments) and reused, so a training step makes no heuristic query
// after its first iteration. The cache is process-wide (a memo of immutable plans, like cuBLAS's own caches),
// guarded by a mutex; calls from several threads are safe.
//
// MatmulEpilogue fuses the pointwise op that follows a GEMM into it (cuBLASLt epilogues), per output COLUMN n of
// the row-major C (bias has N elements). GELU is the tanh approximation of kernels/gelu.h. Supported: CPU
// f32/f64 (all tensors one dtype: the reference, a composition of the separate ops) and CUDA with A, B, C, aux
// of one dtype (f32, or bf16 / f16 with an f32 bias or one of C's dtype). When cuBLASLt cannot fuse a case (a
// GELU epilogue with N not a multiple of 8, an alignment or bias type it rejects, K = 0) the CUDA path runs the
// same math unfused (GEMM, then the bias/gelu kernels). Measured on H200 (cuBLASLt of CUDA 13.0): a bf16 GEMM fuses a
// bf16 bias but refuses an f32 one, so mixed-precision models pass their 16-bit copy of the bias.
// 16-bit operands at 2-byte offsets (views into a flat 16-bit buffer) limit
// cuBLASLt to slow kernels: keep parameter views 16-byte aligned.

#include <cstdint>

#include "core/cuda_fwd.h"
#include "core/device_context.h"
#include "core/status.h"
#include "core/tensor.h"

namespace dtrain::ops {

// A is [M,K] (or [K,M] when trans_a), B is [K,N] (or [N,K] when trans_b), C is [M,N].
template <typename T>
void MatmulCpu(T* c, const T* a, bool trans_a, const T* b, bool trans_b, int64_t m, int64_t n, int64_t k, T alpha,
               T beta);

// Same contract as MatmulCpu on device pointers; `blas` (dtrain::BlasHandles, from ctx.blas()) supplies the
// cuBLASLt handle and workspace, which must not be used concurrently on another stream. CUDA builds only.
Status MatmulCuda(const BlasHandles& blas, float* c, const float* a, bool trans_a, const float* b, bool trans_b,
                  int64_t m, int64_t n, int64_t k, float alpha, float beta, cudaStream_t stream);

enum class Epilogue {
  kBias,        // c = op(a) op(b) + bias                                   (aux unused)
  kBiasGelu,    // aux = op(a) op(b) + bias (saved for backward); c = gelu(aux)
  kDGelu,       // c = (op(a) op(b)) * gelu'(aux): dpre from dact           (aux: the saved pre-activation; bias unused)
  kDGeluBGrad,  // kDGelu, then bias += sum over rows of c                  (bias: an OUTPUT, ACCUMULATED, f32/f64)
  kBiasResidual,  // c = op(a) op(b) + bias + aux                          (aux: the residual, an INPUT; not c)
};
const char* EpilogueName(Epilogue e);

// One cuBLASLt GEMM (CUDA builds only): pointers are device pointers of the stated dtypes, row-major, C [M,N].
struct MatmulCudaArgs {
  DType ab_dtype = DType::kF32;  // A and B: f32, bf16 or f16
  DType c_dtype = DType::kF32;   // C: f32, or ab_dtype when that is bf16 / f16
  void* c = nullptr;
  const void* a = nullptr;
  const void* b = nullptr;
  bool trans_a = false, trans_b = false;
  int64_t m = 0, n = 0, k = 0;
  float alpha = 1.f, beta = 0.f;
  const void* c_in = nullptr;  // MatmulEpilogueCuda only: C read (beta != 0) from here, c's layout; nullptr = c
};
// Plain GEMM, C = alpha op(A) op(B) + beta C.
Status MatmulCudaLt(const BlasHandles& blas, const MatmulCudaArgs& args, cudaStream_t stream);
// GEMM with epilogue `e` (alpha = 1 and beta = 0 in `args`): bias [N] of bias_dtype, aux [M,N] of args.c_dtype.
// Falls back to unfused kernels when cuBLASLt cannot fuse the case (see the file comment).
Status MatmulEpilogueCuda(const BlasHandles& blas, const MatmulCudaArgs& args, Epilogue e, void* bias, DType bias_dtype,
                          void* aux, cudaStream_t stream);
// MatmulEpilogueCuda calls so far (process-wide) that ran unfused because cuBLASLt refused the epilogue; each new
// refused shape is also logged once (INFO). For tests and diagnostics: a training step should add none.
int64_t UnfusedEpilogueCount();
namespace detail {
void CountUnfusedEpilogue();  // MatmulEpilogueCuda's side of the count
}  // namespace detail

Status Matmul(DeviceContext& ctx, const Tensor& a, bool trans_a, const Tensor& b, bool trans_b, Tensor* c,
              float alpha = 1.f, float beta = 0.f);

// c = epilogue(op(a) op(b)) with `bias` [N] and `aux` [M,N] as described at Epilogue (alpha 1, beta 0; c, aux and
// bias must not alias a or b). Shapes, dtypes and devices are checked (InvalidArgument naming them).
Status MatmulEpilogue(DeviceContext& ctx, const Tensor& a, bool trans_a, const Tensor& b, bool trans_b,
                      const Tensor& bias, Epilogue e, Tensor* c, Tensor* aux);

}  // namespace dtrain::ops
