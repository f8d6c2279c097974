#pragma once
// Host rounding of a value to the 16-bit float types, as the device's conversions round (round to nearest even),
// for building the expected values of 16-bit tests. Both take a double that is first rounded to f32.

#include <algorithm>
#include <cmath>

#include "core/bf16.h"

namespace dtrain::testing {

// bf16: through comm's f32 <-> bf16 conversion (NaN stays NaN).
inline double RoundToBf16(double x) { return Bf16BitsToF32(RoundBf16Rne(static_cast<float>(x))); }

// IEEE binary16: |x| >= 65520 overflows to inf; below 2^-14 the quantum stays 2^-24 (subnormals). Exact in double.
inline double RoundToF16(double x) {
  x = static_cast<float>(x);
  if (std::isnan(x) || x == 0) return x;
  if (std::fabs(x) >= 65520.0) return std::copysign(INFINITY, x);
  const int e = std::max(std::ilogb(x), -14);
  const double quantum = std::ldexp(1.0, e - 10);
  return std::nearbyint(x / quantum) * quantum;  // the default rounding mode: ties to even
}

}  // namespace dtrain::testing
