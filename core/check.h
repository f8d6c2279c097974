#pragma once
// Generic check macros. Library-specific ones: cuda_check.h (CUDA, cuBLAS, cuDNN),
// nccl_check.h, mpi_check.h. Each returns a Status from the enclosing function.

#include <sstream>
#include <string>

#include "core/logging.h"
#include "core/status.h"

namespace dtrain::detail {

inline std::string Where(const char* file, int line) {
  std::string f(file);
  const auto pos = f.rfind('/');
  return (pos == std::string::npos ? f : f.substr(pos + 1)) + ":" + std::to_string(line);
}

}  // namespace dtrain::detail

// Propagates a non-OK Status, logging a "->" trace line at debug level (like NCCLCHECK's frames).
#define DT_RETURN_IF_ERROR(expr)                                                                            \
  do {                                                                                                      \
    ::dtrain::Status _dt_st = (expr);                                                                       \
    if (!_dt_st.ok()) {                                                                                     \
      DT_LOG_DEBUG(kCore, "-> {} from {}", _dt_st.ToString(), ::dtrain::detail::Where(__FILE__, __LINE__)); \
      return _dt_st;                                                                                        \
    }                                                                                                       \
  } while (0)

// Returns InvalidArgument("<file:line> check failed: cond: msg") when cond is false.
// For preconditions on user-visible inputs and shapes; cheap enough to keep in release builds.
#define DT_CHECK_ARG(cond, msg)                                                               \
  do {                                                                                        \
    if (!(cond)) {                                                                            \
      std::ostringstream _dt_os;                                                              \
      _dt_os << msg;                                                                          \
      return ::dtrain::Status::InvalidArgument(::dtrain::detail::Where(__FILE__, __LINE__) +  \
                                               ": check failed: " #cond ": " + _dt_os.str()); \
    }                                                                                         \
  } while (0)

// Debug-only shape preconditions inside hot op launchers.
#ifdef NDEBUG
#define DT_DCHECK(cond, msg) \
  do {                       \
  } while (0)
#else
#define DT_DCHECK(cond, msg) DT_CHECK_ARG(cond, msg)
#endif
