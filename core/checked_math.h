#pragma once
// Checked arithmetic for products and sums of user-given sizes (config values, header fields): the result, or
// InvalidArgument naming what was computed, instead of signed overflow (undefined behaviour) or a wrapped size.
//   int64_t steps;
//   DT_RETURN_IF_ERROR(CheckedMul(epochs, steps_per_epoch, "train.epochs x steps per epoch", &steps));
// Thread-safe; header-only.

#include <cstdint>
#include <string>

#include "core/status.h"

namespace dtrain {

// *out = a * b. InvalidArgument "<what>: <a> x <b> does not fit in a 64-bit integer" on overflow (*out untouched).
template <typename T>
[[nodiscard]] Status CheckedMul(T a, T b, const std::string& what, T* out) {
  T r;
  if (__builtin_mul_overflow(a, b, &r)) {
    return Status::InvalidArgument(what + ": " + std::to_string(a) + " x " + std::to_string(b) + " does not fit in a " +
                                   std::to_string(8 * sizeof(T)) + "-bit integer");
  }
  *out = r;
  return Status::OK();
}

// *out = a + b, the same way.
template <typename T>
[[nodiscard]] Status CheckedAdd(T a, T b, const std::string& what, T* out) {
  T r;
  if (__builtin_add_overflow(a, b, &r)) {
    return Status::InvalidArgument(what + ": " + std::to_string(a) + " + " + std::to_string(b) + " does not fit in a " +
                                   std::to_string(8 * sizeof(T)) + "-bit integer");
  }
  *out = r;
  return Status::OK();
}

}  // namespace dtrain
