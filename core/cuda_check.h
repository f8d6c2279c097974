#pragma once
// Check macros for CUDA runtime calls: a failure becomes Status::Internal("<file:line> <call>: <CUDA's own
// message>"), returned. cuBLAS and cuDNN calls: core/cuda_lib_check.h (apart, because cublas*.h and cudnn.h cost
// every .cu file that included them ~2.5 s of nvcc's CPU time). Include only where DT_HAVE_CUDA is 1.

#include <cuda_runtime.h>

#include "core/check.h"

#define DT_CUDA_CHECK(expr)                                                                                  \
  do {                                                                                                       \
    cudaError_t _dt_e = (expr);                                                                              \
    if (_dt_e != cudaSuccess) {                                                                              \
      return ::dtrain::Status::Internal(::dtrain::detail::Where(__FILE__, __LINE__) + ": " #expr ": CUDA " + \
                                        cudaGetErrorName(_dt_e) + ": " + cudaGetErrorString(_dt_e));         \
    }                                                                                                        \
  } while (0)

// After every kernel launch: catches bad launch configurations immediately.
#define DT_CUDA_CHECK_LAUNCH() DT_CUDA_CHECK(cudaGetLastError())
