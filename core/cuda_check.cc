#if DT_HAVE_CUDA
#include <string>

#include "core/cuda_lib_check.h"

namespace dtrain::detail {

const char* CublasStatusString(cublasStatus_t s) {
  // cublasGetStatusString exists since CUDA 11.4; keep the name and the description together. It is null when
  // libcublas could not be loaded (core/cublas_lazy.h): then the status is CUBLAS_STATUS_NOT_INITIALIZED, and why.
  const char* text = DT_CUBLAS(cublasGetStatusString)(s);
  if (text != nullptr) return text;
  static const std::string missing =
      "CUBLAS_STATUS_NOT_INITIALIZED (" + cublas_lazy::LoadError("cublasGetStatusString") + ")";
  return missing.c_str();
}

}  // namespace dtrain::detail
#endif
