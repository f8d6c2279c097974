#pragma once
// Device-only building blocks of the tensor-core flash attention (flash_attention_fwd.cu, flash_attention_bwd.cu;
// include from .cu files only). T is the 16-bit element type (__nv_bfloat16 or __half), HS the head size.
//
// Tensor cores through mma.sync.m16n8k16 (fp32 accumulation). Per lane, g = lane / 4 and q = lane % 4:
//   A (16x16, row-major) 4 regs: a0 (g, 2q..2q+1), a1 (g+8, 2q..), a2 (g, 2q+8..), a3 (g+8, 2q+8..)
//   B (16x8, k x n)      2 regs: b0 (k 2q..2q+1, n g), b1 (k 2q+8.., n g)
//   C (16x8, fp32)       4 regs: c0, c1 (g, 2q, 2q+1), c2, c3 (g+8, 2q, 2q+1)
// so an accumulator pair of n-tiles (2i, 2i+1) is, packed to 16 bits, the A fragment of k-step i (FA2's P reuse).
// Shared tiles are kTile rows of HS elements with a row stride of HS + 8 (16 bytes of padding: the 8 rows an
// ldmatrix phase reads start 4 banks apart, so they hit 8 distinct 16-byte bank groups).

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <initializer_list>
#include <type_traits>

#include "core/check.h"
#include "core/status.h"
#include "kernels/bf16_vec.cuh"

namespace dtrain::ops::flash {

constexpr int kTile = 64;  // query rows and key rows per tile
constexpr int kWarps = 4;  // each warp owns 16 rows of the CTA's tile
constexpr int kThreads = 32 * kWarps;
constexpr float kLog2e = 1.4426950408889634f;

template <int HS>
constexpr int kLd = HS + 8;  // shared row stride, elements
template <int HS>
constexpr int kTileElems = (HS + 8) * kTile;

// Host-side preconditions of the entry points: head size 64 or 128, grid limits, NKV dividing NH, 16-byte aligned
// tensors (the tiles move as 16-byte vectors; with hs % 8 == 0 every row start is then aligned too).
inline Status CheckArgs(int64_t b, int64_t t, int64_t nh, int64_t nkv, int64_t hs,
                        std::initializer_list<const void*> ptrs) {
  DT_CHECK_ARG(hs == 64 || hs == 128, "flash attention: head size " << hs << " is not 64 or 128");
  DT_CHECK_ARG(b > 0 && b < 65536 && nh > 0 && nh < 65536 && t > 0 && t < (int64_t{1} << 30),
               "flash attention: unsupported B = " << b << ", T = " << t << ", NH = " << nh);
  DT_CHECK_ARG(nkv > 0 && nh % nkv == 0, "flash attention: NH = " << nh << " is not a multiple of NKV = " << nkv);
  for (const void* p : ptrs) {
    DT_CHECK_ARG(reinterpret_cast<uintptr_t>(p) % 16 == 0,
                 "flash attention: tensor at " << p << " not 16-byte aligned");
  }
  return Status::OK();
}

template <typename T>
__device__ __forceinline__ float ToF32(T x) {
  if constexpr (std::is_same_v<T, __nv_bfloat16>) {
    return __bfloat162float(x);
  } else {
    return __half2float(x);
  }
}

// Two floats rounded (nearest even) to T, lo in the low 16 bits (the lower column of a fragment pair).
template <typename T>
__device__ __forceinline__ uint32_t Pack(float lo, float hi) {
  if constexpr (std::is_same_v<T, __nv_bfloat16>) {
    const __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
    return *reinterpret_cast<const uint32_t*>(&v);
  } else {
    const __half2 v = __floats2half2_rn(lo, hi);
    return *reinterpret_cast<const uint32_t*>(&v);
  }
}

// d += a b on the tensor cores (m16n8k16, fp32 accumulate).
template <typename T>
__device__ __forceinline__ void Mma(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  if constexpr (std::is_same_v<T, __nv_bfloat16>) {
    asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
        "{%0,%1,%2,%3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  } else {
    asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
        "{%0,%1,%2,%3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  }
}

using detail::SharedAddr;

// ---- shared -> register fragments (ldmatrix; each lane passes one 16-byte row address) --------------------------

// A fragment of the 16x16 block at (row0, k0) of a row-major [rows][k] tile.
template <int HS, typename T>
__device__ __forceinline__ void LoadA(uint32_t (&a)[4], const T* sm, int row0, int k0) {
  const int lane = threadIdx.x % 32;
  const T* p = sm + (row0 + (lane & 15)) * kLd<HS> + k0 + (lane >> 4) * 8;
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(a[0]), "=r"(a[1]), "=r"(a[2]), "=r"(a[3])
               : "r"(SharedAddr(p))
               : "memory");
}

// B fragments of n-tiles n0 and n0 + 8 (k-step k0) from a tile stored [n][k] (e.g. K for S = Q K^T):
// b[0], b[1] for n0 and b[2], b[3] for n0 + 8.
template <int HS, typename T>
__device__ __forceinline__ void LoadBFromNK(uint32_t (&b)[4], const T* sm, int n0, int k0) {
  const int lane = threadIdx.x % 32;
  const T* p = sm + (n0 + (lane & 7) + ((lane >> 4) << 3)) * kLd<HS> + k0 + ((lane >> 3) & 1) * 8;
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(b[0]), "=r"(b[1]), "=r"(b[2]), "=r"(b[3])
               : "r"(SharedAddr(p))
               : "memory");
}

// The same from a tile stored [k][n] (e.g. V for O = P V), transposed by ldmatrix.trans.
template <int HS, typename T>
__device__ __forceinline__ void LoadBFromKN(uint32_t (&b)[4], const T* sm, int k0, int n0) {
  const int lane = threadIdx.x % 32;
  const T* p = sm + (k0 + (lane & 15)) * kLd<HS> + n0 + (lane >> 4) * 8;
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(b[0]), "=r"(b[1]), "=r"(b[2]), "=r"(b[3])
               : "r"(SharedAddr(p))
               : "memory");
}

// acc[n-tiles of N] += A (16 x K, row-major at rows row0.. of sa) * B where B (K x N) is stored [n][k] in sb
// (rows n0.., columns k0..): the "row . row" products S = Q K^T, S^T = K Q^T, dP = dO V^T.
template <int HS, int K, int N, typename T>
__device__ __forceinline__ void MmaRowDots(float (&acc)[N / 8][4], const T* sa, int row0, const T* sb, int n0) {
#pragma unroll
  for (int kk = 0; kk < K / 16; ++kk) {
    uint32_t a[4];
    LoadA<HS>(a, sa, row0, kk * 16);
#pragma unroll
    for (int np = 0; np < N / 16; ++np) {
      uint32_t b[4];
      LoadBFromNK<HS>(b, sb, n0 + np * 16, kk * 16);
      Mma<T>(acc[2 * np], a, b[0], b[1]);
      Mma<T>(acc[2 * np + 1], a, b[2], b[3]);
    }
  }
}

// acc[HS/8 n-tiles] += X (16 x K, fp32 accumulator layout, rounded to T) * B where B (K x HS) is stored [k][n] in sb
// (rows k0..): O += P V, dV += P^T dO, dK += dS^T Q, dQ += dS K.
template <int HS, int K, typename T>
__device__ __forceinline__ void MmaMix(float (&acc)[HS / 8][4], const float (&x)[K / 8][4], const T* sb, int k0) {
#pragma unroll
  for (int kk = 0; kk < K / 16; ++kk) {
    const uint32_t a[4] = {Pack<T>(x[2 * kk][0], x[2 * kk][1]), Pack<T>(x[2 * kk][2], x[2 * kk][3]),
                           Pack<T>(x[2 * kk + 1][0], x[2 * kk + 1][1]), Pack<T>(x[2 * kk + 1][2], x[2 * kk + 1][3])};
#pragma unroll
    for (int dn = 0; dn < HS / 16; ++dn) {
      uint32_t b[4];
      LoadBFromKN<HS>(b, sb, k0 + kk * 16, dn * 16);
      Mma<T>(acc[2 * dn], a, b[0], b[1]);
      Mma<T>(acc[2 * dn + 1], a, b[2], b[3]);
    }
  }
}

// ---- global <-> shared -------------------------------------------------------------------------------------------

using detail::CpAsync16;
using detail::CpAsyncCommit;
using detail::CpAsyncWait;

// Queues the copy of rows row0 .. row0 + kTile - 1 of src (row stride `stride` elements, HS columns, 16-byte
// aligned) into the shared tile sm; rows >= t are zero-filled. Whole CTA; the caller commits and waits.
template <int HS, typename T>
__device__ __forceinline__ void LoadTileAsync(T* sm, const T* src, int64_t stride, int row0, int t) {
  constexpr int kChunks = HS / 8;  // 16-byte chunks per row
  static_assert(kTile * kChunks % kThreads == 0, "whole chunks per thread");
#pragma unroll
  for (int it = 0; it < kTile * kChunks / kThreads; ++it) {
    const int idx = it * kThreads + threadIdx.x, r = idx / kChunks, ch = idx % kChunks;
    const bool valid = row0 + r < t;
    CpAsync16(sm + r * kLd<HS> + ch * 8, src + (valid ? row0 + r : 0) * stride + ch * 8, valid);
  }
}

// Writes this warp's rows row0 .. row0 + 15 of the shared tile sm (tile rows, at global row tile_row0 + r) to
// dst + (tile_row0 + r) * stride for tile_row0 + r < t, 16 bytes per lane and step.
template <int HS, typename T>
__device__ __forceinline__ void StoreWarpRows(T* dst, int64_t stride, const T* sm, int row0, int tile_row0, int t) {
  constexpr int kChunks = HS / 8;
  const int lane = threadIdx.x % 32;
#pragma unroll
  for (int it = 0; it < 16 * kChunks / 32; ++it) {
    const int idx = it * 32 + lane, r = row0 + idx / kChunks, ch = idx % kChunks;
    if (tile_row0 + r < t) {
      *reinterpret_cast<int4*>(dst + (tile_row0 + r) * stride + ch * 8) =
          *reinterpret_cast<const int4*>(sm + r * kLd<HS> + ch * 8);
    }
  }
}

// Rounds this warp's accumulator rows (16 x HS: rows row0 + g scaled by mul_lo, row0 + g + 8 by mul_hi) to T into
// the shared tile sm. The caller syncs the warp before StoreWarpRows reads them back.
template <int HS, typename T>
__device__ __forceinline__ void StageWarpRows(T* sm, const float (&acc)[HS / 8][4], int row0, float mul_lo,
                                              float mul_hi) {
  const int lane = threadIdx.x % 32, g = lane / 4, q = lane % 4;
#pragma unroll
  for (int j = 0; j < HS / 8; ++j) {
    T* p = sm + (row0 + g) * kLd<HS> + j * 8 + 2 * q;
    *reinterpret_cast<uint32_t*>(p) = Pack<T>(acc[j][0] * mul_lo, acc[j][1] * mul_lo);
    *reinterpret_cast<uint32_t*>(p + 8 * kLd<HS>) = Pack<T>(acc[j][2] * mul_hi, acc[j][3] * mul_hi);
  }
}

template <int N>
__device__ __forceinline__ void Zero(float (&acc)[N][4]) {
#pragma unroll
  for (int j = 0; j < N; ++j) acc[j][0] = acc[j][1] = acc[j][2] = acc[j][3] = 0.f;
}

}  // namespace dtrain::ops::flash
