#pragma once
// Device-only helpers shared by the 16-bit (bf16 and fp16) kernels of kernels (include from .cu files only).
//
// Every 16-bit kernel computes in fp32: LoadV widens V elements of T (float, __nv_bfloat16 or __half) to float,
// StoreV rounds them back (round-to-nearest-even, like core/bf16.h on the host; fp16 overflows to +-inf past
// 65504). When V * sizeof(T) == 16 the access is one 128-bit load/store, so the pointer must be 16-byte aligned:
// launchers pick V with VecWidth(). The kernels are templates on T; bf16 and fp16 are two instantiations.
// 16-bit buffers cross the host API as uint16_t (raw bits); AsBf16() / AsF16() reinterpret them.

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <initializer_list>
#include <type_traits>

namespace dtrain::ops::detail {

__device__ __forceinline__ float ToF32(float x) { return x; }
__device__ __forceinline__ float ToF32(__nv_bfloat16 x) { return __bfloat162float(x); }
__device__ __forceinline__ float ToF32(__half x) { return __half2float(x); }

template <typename T>
__device__ __forceinline__ T FromF32(float x);
template <>
__device__ __forceinline__ float FromF32<float>(float x) {
  return x;
}
template <>
__device__ __forceinline__ __nv_bfloat16 FromF32<__nv_bfloat16>(float x) {
  return __float2bfloat16_rn(x);
}
template <>
__device__ __forceinline__ __half FromF32<__half>(float x) {
  return __float2half_rn(x);
}

// ---- amax fused into the kernel that writes a tensor (kernels/fp8.h's Fp8Amax, without its own pass) -------------
// |v| as an unsigned: for non-negative floats (NaN above inf) the order of the bits is the order of the values, so
// atomicMax on them is exact and order-independent: a fused amax equals Fp8Amax's bit for bit.
__device__ __forceinline__ unsigned AbsBits(float v) { return __float_as_uint(v) & 0x7FFFFFFFu; }

// m = max(m, |f[i]| as stored in T (rounded as StoreV rounds)).
template <int V, typename T>
__device__ __forceinline__ void FoldAmax(unsigned& m, const float (&f)[V]) {
#pragma unroll
  for (int i = 0; i < V; ++i) m = max(m, AbsBits(ToF32(FromF32<T>(f[i]))));
}

// Called by all 32 lanes of a warp: *amax = max(*amax, the lanes' m). The atomic is skipped when *amax already holds
// at least the warp's maximum (most warps, once the first ones are in: no contention on one address). No-op for a
// null amax.
__device__ __forceinline__ void WarpAmaxToGlobal(float* amax, unsigned m) {
  if (amax == nullptr) return;
  for (int off = 16; off > 0; off /= 2) m = max(m, __shfl_xor_sync(0xffffffffu, m, off));
  unsigned* bits = reinterpret_cast<unsigned*>(amax);
  if ((threadIdx.x & 31) == 0 && m > *reinterpret_cast<volatile unsigned*>(bits)) atomicMax(bits, m);
}

template <int V, typename T>
__device__ __forceinline__ void LoadV(const T* p, float (&f)[V]) {
  if constexpr (V * sizeof(T) == 16) {
    const int4 raw = *reinterpret_cast<const int4*>(p);
    const T* e = reinterpret_cast<const T*>(&raw);
#pragma unroll
    for (int i = 0; i < V; ++i) f[i] = ToF32(e[i]);
  } else {
#pragma unroll
    for (int i = 0; i < V; ++i) f[i] = ToF32(p[i]);
  }
}

template <int V, typename T>
__device__ __forceinline__ void StoreV(T* p, const float (&f)[V]) {
  if constexpr (V * sizeof(T) == 16) {
    int4 raw;
    T* e = reinterpret_cast<T*>(&raw);
#pragma unroll
    for (int i = 0; i < V; ++i) e[i] = FromF32<T>(f[i]);
    *reinterpret_cast<int4*>(p) = raw;
  } else {
#pragma unroll
    for (int i = 0; i < V; ++i) p[i] = FromF32<T>(f[i]);
  }
}

// V floats at p (f32 parameters or partial sums beside 16-bit activations): V / 4 128-bit accesses when V % 4 == 0
// (p then 16-byte aligned), else V scalar ones.
template <int V>
__device__ __forceinline__ void LoadF32(const float* p, float (&f)[V]) {
  if constexpr (V % 4 == 0) {
#pragma unroll
    for (int i = 0; i < V; i += 4) {
      const float4 q = *reinterpret_cast<const float4*>(p + i);
      f[i] = q.x, f[i + 1] = q.y, f[i + 2] = q.z, f[i + 3] = q.w;
    }
  } else {
#pragma unroll
    for (int i = 0; i < V; ++i) f[i] = p[i];
  }
}

template <int V>
__device__ __forceinline__ void StoreF32(float* p, const float (&f)[V]) {
  if constexpr (V % 4 == 0) {
#pragma unroll
    for (int i = 0; i < V; i += 4) *reinterpret_cast<float4*>(p + i) = make_float4(f[i], f[i + 1], f[i + 2], f[i + 3]);
  } else {
#pragma unroll
    for (int i = 0; i < V; ++i) p[i] = f[i];
  }
}

__device__ __forceinline__ uint32_t SharedAddr(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// 16 bytes global -> shared, bypassing L1; zero-filled (nothing read) when !valid. The issuing thread sees the bytes
// after its CpAsyncWait for the group; other threads only after a barrier too.
__device__ __forceinline__ void CpAsync16(void* dst, const void* src, bool valid) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(SharedAddr(dst)), "l"(src), "r"(valid ? 16 : 0)
               : "memory");
}
__device__ __forceinline__ void CpAsyncCommit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
// Waits until at most N of this thread's committed groups are still in flight.
template <int N>
__device__ __forceinline__ void CpAsyncWait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}

__device__ __forceinline__ float WarpSum(float v) {
  for (int off = 16; off > 0; off /= 2) v += __shfl_xor_sync(0xffffffffu, v, off);
  return v;
}

// Grid-stride loop over n elements: body(i, std::integral_constant<int, W>) handles elements [i, i + W), first in
// chunks of V (aligned 128-bit accesses when V > 1), then the last n % V elements with W = 1.
template <int V, typename Body>
__device__ __forceinline__ void GridStrideVec(int64_t n, Body body) {
  const int64_t stride = int64_t{gridDim.x} * blockDim.x;
  const int64_t tid = blockIdx.x * int64_t{blockDim.x} + threadIdx.x;
  const int64_t chunks = n / V;
  for (int64_t c = tid; c < chunks; c += stride) body(c * V, std::integral_constant<int, V>{});
  if constexpr (V > 1) {
    for (int64_t i = chunks * V + tid; i < n; i += stride) body(i, std::integral_constant<int, 1>{});
  }
}

inline __nv_bfloat16* AsBf16(uint16_t* p) { return reinterpret_cast<__nv_bfloat16*>(p); }
inline const __nv_bfloat16* AsBf16(const uint16_t* p) { return reinterpret_cast<const __nv_bfloat16*>(p); }
inline __half* AsF16(uint16_t* p) { return reinterpret_cast<__half*>(p); }
inline const __half* AsF16(const uint16_t* p) { return reinterpret_cast<const __half*>(p); }

// True when every pointer is 16-byte aligned (nullptr counts as aligned).
inline bool Aligned16(std::initializer_list<const void*> ptrs) {
  for (const void* p : ptrs) {
    if (reinterpret_cast<uintptr_t>(p) % 16 != 0) return false;
  }
  return true;
}

// Elements per 128-bit access of T when rows of `row_len` elements keep every pointer 16-byte aligned, else 1.
template <typename T>
inline int VecWidth(int64_t row_len, std::initializer_list<const void*> ptrs) {
  constexpr int kV = 16 / sizeof(T);
  return row_len % kV == 0 && Aligned16(ptrs) ? kV : 1;
}

// Grid for a grid-stride loop over `n` items with `threads` per block.
inline unsigned GridFor(int64_t n, int threads, int64_t max_blocks = 65536) {
  const int64_t blocks = (n + threads - 1) / threads;
  return static_cast<unsigned>(blocks < 1 ? 1 : (blocks > max_blocks ? max_blocks : blocks));
}

}  // namespace dtrain::ops::detail
