// Tensor-core causal flash attention, forward (FlashAttention-2 scheme; see attention.h and flash_attention.cuh).
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

#include "core/cuda_check.h"
#include "core/nvtx.h"
#include "kernels/attention.h"
#include "kernels/flash_attention.cuh"

namespace dtrain::ops {

namespace {

using flash::kLd;
using flash::kThreads;
using flash::kTile;
using flash::kTileElems;

// CTAs per SM the forward is built for: hs = 64 fits 4 (46 KiB of shared memory each) at <= 128 registers a thread.
template <int HS>
constexpr int kMinBlocks = HS == 64 ? 4 : 1;

// CTA (query tile, head, batch) with 4 warps of 16 query rows. Query tiles run in reverse block order so the
// longest causal rows start first. Key tiles go from the diagonal one (the only one needing the causal mask; it
// holds key q0 <= every row, so each row's running max is finite after it) down to 0, double-buffered through
// cp.async: tile kt - 1 is in flight while tile kt is used. Shared: Q, then K[2], V[2]. Query head h reads kv head
// h / (nh / nkv); the query heads sharing a kv head are adjacent in blockIdx.y, so their K/V reads meet in L2.
template <typename T, int HS>
__global__ void __launch_bounds__(kThreads, kMinBlocks<HS>)
    FlashForwardKernel(T* out, float* lse, const T* qkv, int t, int nh, int nkv, float scale, float scale_log2) {
  extern __shared__ __align__(16) unsigned char smem_raw[];
  T* sq = reinterpret_cast<T*>(smem_raw);
  T* sk = sq + kTileElems<HS>;
  T* sv = sk + 2 * kTileElems<HS>;
  const int qt = gridDim.x - 1 - blockIdx.x, h = blockIdx.y, b = blockIdx.z;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, q = lane % 4;
  const int kvh = h / (nh / nkv);
  const int64_t c = static_cast<int64_t>(nh) * HS, stride = static_cast<int64_t>(nh + 2 * nkv) * HS;
  const T* rows = qkv + static_cast<int64_t>(b) * t * stride;
  const T* qb = rows + static_cast<int64_t>(h) * HS;
  const T* kb = rows + static_cast<int64_t>(nh + kvh) * HS;
  const T* vb = rows + static_cast<int64_t>(nh + nkv + kvh) * HS;
  const int q0 = qt * kTile, row0 = warp * 16;

  flash::LoadTileAsync<HS>(sq, qb, stride, q0, t);
  flash::LoadTileAsync<HS>(sk, kb, stride, q0, t);
  flash::LoadTileAsync<HS>(sv, vb, stride, q0, t);
  flash::CpAsyncCommit();

  uint32_t qf[HS / 16][4];  // this warp's Q rows as A fragments, loaded once
  float o[HS / 8][4];
  flash::Zero(o);
  float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.f, 0.f};  // rows g, g + 8: raw-score max, partial sums
  for (int kt = qt, it = 0; kt >= 0; --kt, ++it) {
    const int buf = it & 1;
    if (kt > 0) {
      const int nb = (buf ^ 1) * kTileElems<HS>;
      flash::LoadTileAsync<HS>(sk + nb, kb, stride, (kt - 1) * kTile, t);
      flash::LoadTileAsync<HS>(sv + nb, vb, stride, (kt - 1) * kTile, t);
      flash::CpAsyncCommit();
      flash::CpAsyncWait<1>();
    } else {
      flash::CpAsyncWait<0>();
    }
    __syncthreads();  // tile kt (and Q) landed for every thread's copies
    if (it == 0) {
#pragma unroll
      for (int kk = 0; kk < HS / 16; ++kk) flash::LoadA<HS>(qf[kk], sq, row0, kk * 16);
    }
    const T* skb = sk + buf * kTileElems<HS>;
    const T* svb = sv + buf * kTileElems<HS>;

    float s[kTile / 8][4];  // S = Q K^T for 16 rows x 64 keys (raw, unscaled)
    flash::Zero(s);
#pragma unroll
    for (int kk = 0; kk < HS / 16; ++kk) {
#pragma unroll
      for (int np = 0; np < kTile / 16; ++np) {
        uint32_t bf[4];
        flash::LoadBFromNK<HS>(bf, skb, np * 16, kk * 16);
        flash::Mma<T>(s[2 * np], qf[kk], bf[0], bf[1]);
        flash::Mma<T>(s[2 * np + 1], qf[kk], bf[2], bf[3]);
      }
    }
    if (kt == qt) {  // diagonal tile: k0 == q0, so key column > query row (tile-relative) is in the future
#pragma unroll
      for (int j = 0; j < kTile / 8; ++j) {
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          if (j * 8 + 2 * q + (e & 1) > row0 + g + (e >> 1) * 8) s[j][e] = -INFINITY;
        }
      }
    }
    // Online softmax per row half r (row g + 8r): the quad (4 lanes of a row) shares the max.
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      float mx = m[r];
#pragma unroll
      for (int j = 0; j < kTile / 8; ++j) mx = fmaxf(mx, fmaxf(s[j][2 * r], s[j][2 * r + 1]));
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
      const float corr = exp2f((m[r] - mx) * scale_log2);  // 0 on the first tile (m = -inf, mx finite)
      const float neg = -mx * scale_log2;
      float sum = 0.f;
#pragma unroll
      for (int j = 0; j < kTile / 8; ++j) {
        s[j][2 * r] = exp2f(fmaf(s[j][2 * r], scale_log2, neg));
        s[j][2 * r + 1] = exp2f(fmaf(s[j][2 * r + 1], scale_log2, neg));
        sum += s[j][2 * r] + s[j][2 * r + 1];
      }
      l[r] = l[r] * corr + sum;
      m[r] = mx;
#pragma unroll
      for (int j = 0; j < HS / 8; ++j) {
        o[j][2 * r] *= corr;
        o[j][2 * r + 1] *= corr;
      }
    }
    flash::MmaMix<HS, kTile, T>(o, s, svb, 0);  // O += P V (P rounded to T)
    __syncthreads();  // every warp is done with buffer buf before the next iteration refills it
  }

  // Epilogue: full row sums, O / l through this warp's rows of the (no longer read) Q tile, lse = m scale + log l.
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    l[r] += __shfl_xor_sync(0xffffffffu, l[r], 1);
    l[r] += __shfl_xor_sync(0xffffffffu, l[r], 2);
  }
  flash::StageWarpRows<HS>(sq, o, row0, 1.f / l[0], 1.f / l[1]);
  __syncwarp();
  flash::StoreWarpRows<HS>(out + static_cast<int64_t>(b) * t * c + h * HS, c, sq, row0, q0, t);
  if (q == 0) {
    float* lse_bh = lse + (static_cast<int64_t>(b) * nh + h) * t;
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const int i = q0 + row0 + g + 8 * r;
      if (i < t) lse_bh[i] = m[r] * scale + logf(l[r]);
    }
  }
}

template <typename T, int HS>
Status LaunchForward(T* out, float* lse, const T* qkv, int64_t b, int64_t t, int64_t nh, int64_t nkv,
                     cudaStream_t stream) {
  const size_t smem = sizeof(T) * 5 * kTileElems<HS>;
  DT_CUDA_CHECK(cudaFuncSetAttribute(FlashForwardKernel<T, HS>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                     static_cast<int>(smem)));
  const float scale = 1.f / sqrtf(static_cast<float>(HS));
  const dim3 grid(static_cast<unsigned>((t + kTile - 1) / kTile), static_cast<unsigned>(nh), static_cast<unsigned>(b));
  FlashForwardKernel<T, HS><<<grid, kThreads, smem, stream>>>(out, lse, qkv, static_cast<int>(t), static_cast<int>(nh),
                                                              static_cast<int>(nkv), scale, scale * flash::kLog2e);
  DT_CUDA_CHECK_LAUNCH();
  return Status::OK();
}

template <typename T>
Status Forward(T* out, float* lse, const T* qkv, int64_t b, int64_t t, int64_t nh, int64_t nkv, int64_t hs,
               cudaStream_t stream) {
  DT_RETURN_IF_ERROR(flash::CheckArgs(b, t, nh, nkv, hs, {qkv, out}));
  if (hs == 64) return LaunchForward<T, 64>(out, lse, qkv, b, t, nh, nkv, stream);
  return LaunchForward<T, 128>(out, lse, qkv, b, t, nh, nkv, stream);
}

}  // namespace

Status FlashAttentionForwardBf16(uint16_t* out, float* lse, const uint16_t* qkv, int64_t b, int64_t t, int64_t nh,
                                 int64_t nkv, int64_t hs, cudaStream_t stream) {
  DT_NVTX_RANGE("FlashAttentionForwardBf16");
  return Forward(reinterpret_cast<__nv_bfloat16*>(out), lse, reinterpret_cast<const __nv_bfloat16*>(qkv), b, t, nh, nkv,
                 hs, stream);
}

Status FlashAttentionForwardFp16(uint16_t* out, float* lse, const uint16_t* qkv, int64_t b, int64_t t, int64_t nh,
                                 int64_t nkv, int64_t hs, cudaStream_t stream) {
  DT_NVTX_RANGE("FlashAttentionForwardFp16");
  return Forward(reinterpret_cast<__half*>(out), lse, reinterpret_cast<const __half*>(qkv), b, t, nh, nkv, hs, stream);
}

}  // namespace dtrain::ops
