#pragma once
// Host-side bfloat16 <-> float conversion: round-to-nearest-even, NaN kept a (quiet) NaN — the same
// rounding as CUDA's __float2bfloat16_rn, so CPU and GPU compression paths agree bit for bit.

#include <cstdint>
#include <cstring>

namespace dtrain::comm {

inline uint16_t F32ToBf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof(u));
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x40u);  // NaN stays NaN
  u += 0x7fffu + ((u >> 16) & 1u);
  return static_cast<uint16_t>(u >> 16);
}

inline float Bf16ToF32(uint16_t h) {
  const uint32_t u = static_cast<uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &u, sizeof(f));
  return f;
}

}  // namespace dtrain::comm
