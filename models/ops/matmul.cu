// Matmul on the GPU through cuBLASLt (fp32 in/out, CUBLAS_COMPUTE_32F: no TF32).
//
// cuBLASLt is column-major. A row-major [R,C] matrix is the column-major [C,R] matrix X^T, so the row-major
// product C = op(A) op(B) is computed as the column-major C^T = op(B)^T op(A)^T: B goes first, A second, and
// each keeps its own transpose flag.
#include <algorithm>
#include <cstdint>
#include <memory>

#include "models/ops/matmul.h"
#include "runtime/core/cuda_check.h"
#include "runtime/core/cuda_handles.h"
#include "runtime/core/nvtx.h"

namespace dtrain::ops {

namespace {

// C[i] *= beta (or = 0 when beta == 0): the K == 0 case, which cuBLASLt does not accept.
__global__ void ScaleKernel(float* c, int64_t n, float beta) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n; i += int64_t{gridDim.x} * blockDim.x) {
    c[i] = beta == 0.f ? 0.f : c[i] * beta;
  }
}

// Largest power of two (<= 256) dividing the address: cuBLASLt's heuristics assume 256-byte aligned operands
// unless told otherwise, and parameter views inside the flat buffer can sit at any 4-byte offset.
uint32_t Alignment(const void* p) {
  const auto addr = reinterpret_cast<uintptr_t>(p);
  uint32_t align = 256;
  while (align > 4 && addr % align != 0) align /= 2;
  return align;
}

struct LtDeleter {
  void operator()(cublasLtMatmulDescOpaque_t* d) const { cublasLtMatmulDescDestroy(d); }
  void operator()(cublasLtMatrixLayoutOpaque_t* l) const { cublasLtMatrixLayoutDestroy(l); }
  void operator()(cublasLtMatmulPreferenceOpaque_t* p) const { cublasLtMatmulPreferenceDestroy(p); }
};
using LtDesc = std::unique_ptr<cublasLtMatmulDescOpaque_t, LtDeleter>;
using LtLayout = std::unique_ptr<cublasLtMatrixLayoutOpaque_t, LtDeleter>;
using LtPref = std::unique_ptr<cublasLtMatmulPreferenceOpaque_t, LtDeleter>;

// Column-major `rows` x `cols` fp32 layout with leading dimension `ld`.
Status MakeLayout(uint64_t rows, uint64_t cols, int64_t ld, LtLayout* out) {
  cublasLtMatrixLayout_t l = nullptr;
  DT_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&l, CUDA_R_32F, rows, cols, ld));
  out->reset(l);
  return Status::OK();
}

}  // namespace

Status MatmulCuda(const BlasHandles& blas, float* c, const float* a, bool trans_a, const float* b, bool trans_b,
                  int64_t m, int64_t n, int64_t k, float alpha, float beta, cudaStream_t stream) {
  DT_NVTX_FN();
  DT_CHECK_ARG(m >= 0 && n >= 0 && k >= 0, "MatmulCuda: negative size m=" << m << " n=" << n << " k=" << k);
  if (m == 0 || n == 0) return Status::OK();
  if (k == 0) {
    const int64_t total = m * n;
    const int blocks = static_cast<int>(std::min<int64_t>((total + 255) / 256, 4096));
    ScaleKernel<<<blocks, 256, 0, stream>>>(c, total, beta);
    DT_CUDA_CHECK_LAUNCH();
    return Status::OK();
  }

  cublasLtMatmulDesc_t desc_raw = nullptr;
  DT_CUBLAS_CHECK(cublasLtMatmulDescCreate(&desc_raw, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  LtDesc desc(desc_raw);
  // First operand (row-major B), second operand (row-major A); see the file comment.
  const cublasOperation_t op_first = trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
  const cublasOperation_t op_second = trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;
  DT_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(desc.get(), CUBLASLT_MATMUL_DESC_TRANSA, &op_first, sizeof(op_first)));
  DT_CUBLAS_CHECK(
      cublasLtMatmulDescSetAttribute(desc.get(), CUBLASLT_MATMUL_DESC_TRANSB, &op_second, sizeof(op_second)));

  // Stored (column-major) shapes: B^T is [N,K] (ld N) or, when trans_b, [K,N] (ld K); likewise for A.
  LtLayout first, second, out;
  DT_RETURN_IF_ERROR(trans_b ? MakeLayout(k, n, k, &first) : MakeLayout(n, k, n, &first));
  DT_RETURN_IF_ERROR(trans_a ? MakeLayout(m, k, m, &second) : MakeLayout(k, m, k, &second));
  DT_RETURN_IF_ERROR(MakeLayout(n, m, n, &out));

  cublasLtMatmulPreference_t pref_raw = nullptr;
  DT_CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&pref_raw));
  LtPref pref(pref_raw);
  const size_t ws_bytes = blas.workspace_bytes();
  DT_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref.get(), CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws_bytes,
                                                       sizeof(ws_bytes)));
  const uint32_t align_first = Alignment(b), align_second = Alignment(a), align_out = Alignment(c);
  DT_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref.get(), CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES,
                                                       &align_first, sizeof(align_first)));
  DT_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref.get(), CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
                                                       &align_second, sizeof(align_second)));
  DT_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref.get(), CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES,
                                                       &align_out, sizeof(align_out)));
  DT_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref.get(), CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES,
                                                       &align_out, sizeof(align_out)));

  cublasLtMatmulHeuristicResult_t heuristic = {};
  int found = 0;
  DT_CUBLAS_CHECK(cublasLtMatmulAlgoGetHeuristic(blas.lt(), desc.get(), first.get(), second.get(), out.get(), out.get(),
                                                 pref.get(), 1, &heuristic, &found));
  if (found == 0) {
    return Status::Internal("MatmulCuda: cuBLASLt has no algorithm for m=" + std::to_string(m) +
                            " n=" + std::to_string(n) + " k=" + std::to_string(k));
  }
  // C is both the input C (scaled by beta) and the output D: in-place accumulation when beta = 1.
  DT_CUBLAS_CHECK(cublasLtMatmul(blas.lt(), desc.get(), &alpha, b, first.get(), a, second.get(), &beta, c, out.get(), c,
                                 out.get(), &heuristic.algo, blas.workspace(), ws_bytes, stream));
  return Status::OK();
}

}  // namespace dtrain::ops
