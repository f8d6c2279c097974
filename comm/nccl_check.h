#pragma once
// DT_NCCL_CHECK: NCCL failures become Status::Internal with file:line, ncclGetErrorString and
// ncclGetLastError (the detail NCCL keeps for the last failing call). Include only with DT_HAVE_CUDA.

#include <nccl.h>

#include "core/check.h"

#define DT_NCCL_CHECK(expr)                                                                                  \
  do {                                                                                                       \
    ncclResult_t _dt_r = (expr);                                                                             \
    if (_dt_r != ncclSuccess && _dt_r != ncclInProgress) {                                                   \
      return ::dtrain::Status::Internal(::dtrain::detail::Where(__FILE__, __LINE__) + ": " #expr ": NCCL " + \
                                        ncclGetErrorString(_dt_r) + " (" + ncclGetLastError(nullptr) + ")"); \
    }                                                                                                        \
  } while (0)
