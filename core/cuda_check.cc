#if DT_HAVE_CUDA
#include "core/cuda_lib_check.h"

namespace dtrain::detail {

const char* CublasStatusString(cublasStatus_t s) {
  // cublasGetStatusString exists since CUDA 11.4; keep the name and the description together.
  return cublasGetStatusString(s);
}

}  // namespace dtrain::detail
#endif
