#pragma once
// Matmul: C[M,N] = alpha * op(A) @ op(B) + beta * C on row-major matrices, op(X) = X^T when trans_x.
//
// Three layers, like every op in models/ops:
//   - MatmulCpu<T>: the CPU reference (T = float or double), raw pointers. Loop order i-k-j over
//     k-blocks (B is transposed into a scratch buffer first when trans_b), no BLAS dependency.
//   - MatmulCuda: cuBLASLt, fp32 in/out with CUBLAS_COMPUTE_32F (TF32 is OFF: results agree with the
//     CPU to fp32 rounding). Queued on `stream`; asynchronous w.r.t. the host.
//   - Matmul: the Tensor entry point used by the models; checks shapes/dtypes/devices (InvalidArgument
//     naming the shapes) and dispatches: CPU f32/f64 -> MatmulCpu, CUDA f32 -> MatmulCuda.
// beta = 1 accumulates into C (weight gradients across micro-steps); beta = 0 never reads C, so C
// may hold garbage (even NaN) on entry. C must not alias A or B.

#include <cstdint>

#include "runtime/core/cuda_fwd.h"
#include "runtime/core/device_context.h"
#include "runtime/core/status.h"
#include "runtime/core/tensor.h"

namespace dtrain::ops {

// A is [M,K] (or [K,M] when trans_a), B is [K,N] (or [N,K] when trans_b), C is [M,N].
template <typename T>
void MatmulCpu(T* c, const T* a, bool trans_a, const T* b, bool trans_b, int64_t m, int64_t n, int64_t k, T alpha,
               T beta);

// Same contract as MatmulCpu on device pointers; `blas` (dtrain::BlasHandles, from ctx.blas()) supplies the
// cuBLASLt handle and workspace, which must not be used concurrently on another stream. CUDA builds only.
Status MatmulCuda(const BlasHandles& blas, float* c, const float* a, bool trans_a, const float* b, bool trans_b,
                  int64_t m, int64_t n, int64_t k, float alpha, float beta, cudaStream_t stream);

Status Matmul(DeviceContext& ctx, const Tensor& a, bool trans_a, const Tensor& b, bool trans_b, Tensor* c,
              float alpha = 1.f, float beta = 0.f);

}  // namespace dtrain::ops
