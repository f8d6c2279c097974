#pragma once
// f32 -> bf16 rounding shared by CPU references and CUDA kernels (host and device inline functions on raw bits, so
// both give the same bf16 for the same f32, bit for bit):
//   RoundBf16Rne(x), Bf16BitsToF32(h), F32Bits(x), BitsToF32(u): core/bf16.h's.
//   RoundBf16Sr(x, r): stochastic rounding with 16 random bits r: the f32 bit pattern plus r, truncated to its top
//     16 bits. A finite x between two neighbouring bf16 values lo < x < hi (same sign) becomes the one further from
//     zero with probability (x's 16 dropped bits) / 2^16 = |x - near| / (hi - lo), so E[RoundBf16Sr(x, r)] = x for
//     r uniform on [0, 2^16): unbiased, unlike round-to-nearest, where an update smaller than half a bf16 ulp (2^-9
//     relative) is lost every time. inf and NaN round as RoundBf16Rne; a finite x past the largest bf16 may round
//     to inf (the next value up).
//   SrBits(key, index): 64 counter-based random bits: output number `index` of a SplitMix64 stream whose state
//     starts at `key` (Steele et al. 2014: state += golden gamma, then the Stafford variant-13 finaliser). No state is
//     kept anywhere: any element's bits follow from (key, index) alone, so a kernel, its CPU reference and any cut of
//     the buffer into ranges draw the same bits.
//   SrKey(seed, step): the per-update key, SplitMix64's finaliser of seed xor the finaliser of step.
//   SplitF32(x, &hi, &lo): x's bits as two 16-bit halves: hi the bf16 nearest x, ties away from zero (the bits plus
//     0x8000, truncated; NaN stays a quiet NaN), lo the low 16 bits of x. JoinF32(hi, lo) is x again, bit for bit (a
//     NaN: a NaN): hi was rounded up exactly when lo >= 0x8000. train.master_weights split keeps fp32 master weights
//     so: hi is the bf16 weight the GEMMs read, lo an optimizer state.
// Thread-safety: pure functions.

#include <cstdint>

#include "core/bf16.h"

namespace dtrain::ops {

DT_BF16_HD void SplitF32(float x, uint16_t* hi, uint16_t* lo) {
  const uint32_t u = F32Bits(x);
  *lo = static_cast<uint16_t>(u & 0xffffu);
  *hi = (u & 0x7fffffffu) > 0x7f800000u ? static_cast<uint16_t>((u >> 16) | 0x40u)  // NaN stays NaN
                                        : static_cast<uint16_t>((u + 0x8000u) >> 16);
}

DT_BF16_HD float JoinF32(uint16_t hi, uint16_t lo) {
  return BitsToF32(((static_cast<uint32_t>(hi) - (lo >= 0x8000u ? 1u : 0u)) << 16) | lo);
}

DT_BF16_HD uint16_t RoundBf16Sr(float x, uint32_t r16) {
  const uint32_t u = F32Bits(x);
  if ((u & 0x7f800000u) == 0x7f800000u) return RoundBf16Rne(x);  // inf, NaN
  return static_cast<uint16_t>((u + (r16 & 0xffffu)) >> 16);
}

DT_BF16_HD uint64_t SplitMix64Finalize(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

DT_BF16_HD uint64_t SrBits(uint64_t key, uint64_t index) {
  return SplitMix64Finalize(key + (index + 1) * 0x9e3779b97f4a7c15ull);
}

DT_BF16_HD uint64_t SrKey(uint64_t seed, uint64_t step) { return SplitMix64Finalize(seed ^ SplitMix64Finalize(step)); }

}  // namespace dtrain::ops
