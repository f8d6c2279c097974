#pragma once
// Check macros for CUDA runtime, cuBLAS and cuDNN calls. Each turns a failure into
// Status::Internal("<file:line> <call>: <library's own message>") and returns it.
// Include only where DT_HAVE_CUDA is 1.

#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <cudnn.h>

#include "core/check.h"

namespace dtrain::detail {
const char* CublasStatusString(cublasStatus_t s);
}  // namespace dtrain::detail

#define DT_CUDA_CHECK(expr)                                                                                  \
  do {                                                                                                       \
    cudaError_t _dt_e = (expr);                                                                              \
    if (_dt_e != cudaSuccess) {                                                                              \
      return ::dtrain::Status::Internal(::dtrain::detail::Where(__FILE__, __LINE__) + ": " #expr ": CUDA " + \
                                        cudaGetErrorName(_dt_e) + ": " + cudaGetErrorString(_dt_e));         \
    }                                                                                                        \
  } while (0)

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

// After every kernel launch: catches bad launch configurations immediately.
#define DT_CUDA_CHECK_LAUNCH() DT_CUDA_CHECK(cudaGetLastError())
