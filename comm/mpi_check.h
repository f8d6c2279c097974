#pragma once
// DT_MPI_CHECK: MPI failures become Status::Internal with file:line and MPI_Error_string.
// The communicators set MPI_ERRORS_RETURN so that errors reach this macro instead of aborting.
// Include only with DT_HAVE_MPI.

#include <mpi.h>

#include <string>

#include "core/check.h"

namespace dtrain::detail {
inline std::string MpiErrorString(int code) {
  char buf[MPI_MAX_ERROR_STRING];
  int len = 0;
  if (MPI_Error_string(code, buf, &len) != MPI_SUCCESS) return "MPI error " + std::to_string(code);
  return std::string(buf, len);
}
}  // namespace dtrain::detail

#define DT_MPI_CHECK(expr)                                                                                  \
  do {                                                                                                      \
    int _dt_rc = (expr);                                                                                    \
    if (_dt_rc != MPI_SUCCESS) {                                                                            \
      return ::dtrain::Status::Internal(::dtrain::detail::Where(__FILE__, __LINE__) + ": " #expr ": MPI " + \
                                        ::dtrain::detail::MpiErrorString(_dt_rc));                          \
    }                                                                                                       \
  } while (0)
