#pragma once
// bfloat16 on raw bits, one definition for every layer (host and device inline functions, so CPU references, host
// paths and CUDA kernels give the same bf16 for the same f32, bit for bit):
//   F32Bits(x) / BitsToF32(u): a float's bit pattern and back.
//   Bf16BitsToF32(h): the bf16 with bits h as f32 (exact).
//   RoundBf16Rne(x): f32 -> bf16 rounded to nearest even, NaN kept a quiet NaN: CUDA's __float2bfloat16_rn.
// Stochastic rounding and the split of f32 into two halves are kernels/bf16_round.h's.
// Thread-safety: pure functions.

#include <cstdint>
#include <cstring>

#if defined(__CUDACC__)
#define DT_BF16_HD __host__ __device__ __forceinline__
#else
#define DT_BF16_HD inline
#endif

namespace dtrain {

DT_BF16_HD uint32_t F32Bits(float x) {
#if defined(__CUDA_ARCH__)
  return __float_as_uint(x);
#else
  uint32_t u;
  std::memcpy(&u, &x, sizeof(u));
  return u;
#endif
}

DT_BF16_HD float BitsToF32(uint32_t u) {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(u);
#else
  float f;
  std::memcpy(&f, &u, sizeof(f));
  return f;
#endif
}

DT_BF16_HD float Bf16BitsToF32(uint16_t h) { return BitsToF32(static_cast<uint32_t>(h) << 16); }

DT_BF16_HD uint16_t RoundBf16Rne(float x) {
  uint32_t u = F32Bits(x);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x40u);  // NaN stays NaN
  u += 0x7fffu + ((u >> 16) & 1u);
  return static_cast<uint16_t>(u >> 16);
}

}  // namespace dtrain
