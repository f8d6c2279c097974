#pragma once
// Check macros for cuBLAS(Lt) and cuDNN calls, beside core/cuda_check.h's DT_CUDA_CHECK: a failure becomes
// Status::Internal("<file:line> <call>: cuBLAS|cuDNN <library's own message>"), returned. Include only where
// DT_HAVE_CUDA is 1.

#include <cublasLt.h>
#include <cublas_v2.h>
#include <cudnn.h>

#include "core/cuda_check.h"

namespace dtrain::detail {
const char* CublasStatusString(cublasStatus_t s);
}  // namespace dtrain::detail

#define DT_CUBLAS_CHECK(expr)                                                                                  \
  do {                                                                                                         \
    cublasStatus_t _dt_s = (expr);                                                                             \
    if (_dt_s != CUBLAS_STATUS_SUCCESS) {                                                                      \
      return ::dtrain::Status::Internal(::dtrain::detail::Where(__FILE__, __LINE__) + ": " #expr ": cuBLAS " + \
                                        ::dtrain::detail::CublasStatusString(_dt_s));                          \
    }                                                                                                          \
  } while (0)

#define DT_CUDNN_CHECK(expr)                                                                                  \
  do {                                                                                                        \
    cudnnStatus_t _dt_s = (expr);                                                                             \
    if (_dt_s != CUDNN_STATUS_SUCCESS) {                                                                      \
      return ::dtrain::Status::Internal(::dtrain::detail::Where(__FILE__, __LINE__) + ": " #expr ": cuDNN " + \
                                        cudnnGetErrorString(_dt_s));                                          \
    }                                                                                                         \
  } while (0)
