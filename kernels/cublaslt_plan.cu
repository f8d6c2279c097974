// cuBLASLt plumbing shared by the GEMMs of kernels (see cublaslt_plan.h). Host code only.
#include <utility>

#include "kernels/cublaslt_plan.h"

namespace dtrain::ops::detail {

uint32_t LtAlignment(const void* p) {
  const auto addr = reinterpret_cast<uintptr_t>(p);
  uint32_t align = 256;
  while (align > 2 && addr % align != 0) align /= 2;
  return align;
}

Status LtMakeDesc(cublasComputeType_t compute, cudaDataType_t scale_type, LtDesc* out) {
  cublasLtMatmulDesc_t d = nullptr;
  DT_CUBLAS_CHECK(DT_CUBLAS(cublasLtMatmulDescCreate)(&d, compute, scale_type));
  out->reset(d);
  return Status::OK();
}

Status LtMakeLayout(cudaDataType_t type, uint64_t rows, uint64_t cols, int64_t ld, LtLayout* out) {
  cublasLtMatrixLayout_t l = nullptr;
  DT_CUBLAS_CHECK(DT_CUBLAS(cublasLtMatrixLayoutCreate)(&l, type, rows, cols, ld));
  out->reset(l);
  return Status::OK();
}

Status LtPickAlgo(const BlasHandles& blas, cublasLtMatmulDesc_t desc, cublasLtMatrixLayout_t a,
                  cublasLtMatrixLayout_t b, cublasLtMatrixLayout_t c, const LtAlignments& align,
                  cublasLtMatmulAlgo_t* algo, std::string* refusal) {
  cublasLtMatmulPreference_t pref_raw = nullptr;
  DT_CUBLAS_CHECK(DT_CUBLAS(cublasLtMatmulPreferenceCreate)(&pref_raw));
  std::unique_ptr<cublasLtMatmulPreferenceOpaque_t, LtDeleter> pref(pref_raw);
  const size_t ws_bytes = blas.workspace_bytes();
  DT_CUBLAS_CHECK(DT_CUBLAS(cublasLtMatmulPreferenceSetAttribute)(pref.get(), CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                                                  &ws_bytes, sizeof(ws_bytes)));
  const std::pair<cublasLtMatmulPreferenceAttributes_t, uint32_t> aligns[] = {
      {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, align.a},
      {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, align.b},
      {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, align.c},
      {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, align.d}};
  for (const auto& [attr, value] : aligns) {
    DT_CUBLAS_CHECK(DT_CUBLAS(cublasLtMatmulPreferenceSetAttribute)(pref.get(), attr, &value, sizeof(value)));
  }
  cublasLtMatmulHeuristicResult_t heuristic = {};
  int found = 0;
  const cublasStatus_t st =
      DT_CUBLAS(cublasLtMatmulAlgoGetHeuristic)(blas.lt(), desc, a, b, c, c, pref.get(), 1, &heuristic, &found);
  refusal->clear();
  if (st != CUBLAS_STATUS_SUCCESS || found == 0) {
    *refusal = st != CUBLAS_STATUS_SUCCESS ? ::dtrain::detail::CublasStatusString(st) : "no algorithm found";
    return Status::OK();
  }
  *algo = heuristic.algo;
  return Status::OK();
}

}  // namespace dtrain::ops::detail
