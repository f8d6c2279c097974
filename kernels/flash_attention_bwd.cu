// Tensor-core causal flash attention, backward (FlashAttention-2 scheme; see attention.h and flash_attention.cuh).
// Three launches, all deterministic (fixed summation orders, no atomics): D_i = dO_i . O_i; dK and dV per key tile;
// dQ per query tile. Both tile kernels recompute P = exp(S - lse) from Q, K and the forward's lse.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
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

// Rows (columns of the score tile) per inner step: 64 for hs = 64; 32 for hs = 128 keeps the two score blocks small
// next to the larger dK/dV (or dQ) accumulators, well under 255 registers.
template <int HS>
constexpr int kChunk = HS == 64 ? 64 : 32;

// delta[b, h, i] = dout_i . out_i over head h's HS columns, in fp32. HS / 8 lanes per row, 8 elements per lane; the
// whole warp runs every iteration (lanes past the end contribute 0) so the shuffles see all 32 lanes.
template <typename T, int HS>
__global__ void FlashDeltaKernel(float* delta, const T* dout, const T* out, int64_t rows, int t, int nh) {
  constexpr int kLanes = HS / 8;
  const int lane = threadIdx.x % 32;
  const int64_t n = rows * kLanes;
  const int64_t warp0 = (blockIdx.x * int64_t{blockDim.x} + threadIdx.x) / 32;
  for (int64_t w = warp0 * 32; w < n; w += int64_t{gridDim.x} * blockDim.x) {
    const int64_t idx = w + lane;  // element chunk: row idx / kLanes ((b * t + i) * nh + h), chunk idx % kLanes
    float acc = 0.f;
    if (idx < n) {
      const int4 dv = *reinterpret_cast<const int4*>(dout + idx * 8);
      const int4 ov = *reinterpret_cast<const int4*>(out + idx * 8);
      const T* de = reinterpret_cast<const T*>(&dv);
      const T* oe = reinterpret_cast<const T*>(&ov);
#pragma unroll
      for (int e = 0; e < 8; ++e) acc = fmaf(flash::ToF32(de[e]), flash::ToF32(oe[e]), acc);
    }
#pragma unroll
    for (int off = kLanes / 2; off > 0; off /= 2) acc += __shfl_xor_sync(0xffffffffu, acc, off);
    if (idx < n && idx % kLanes == 0) {
      const int64_t row = idx / kLanes, bt = row / nh;
      const int h = static_cast<int>(row % nh);
      delta[(bt / t * nh + h) * t + bt % t] = acc;
    }
  }
}

// lse (in log2 units: lse * log2 e) and D of query rows q0 .. q0 + 63 into shared memory; rows >= t get lse = +inf,
// which makes their P (and so dS) exactly 0 against every key.
__device__ __forceinline__ void LoadRowStats(float* slse, float* sdelta, const float* lse, const float* delta, int q0,
                                             int t) {
  if (threadIdx.x < kTile) {
    const int i = q0 + threadIdx.x;
    slse[threadIdx.x] = i < t ? lse[i] * flash::kLog2e : INFINITY;
    sdelta[threadIdx.x] = i < t ? delta[i] : 0.f;
  }
}

// CTA (key tile, kv head, batch) with 4 warps of 16 key rows: dK and dV of those keys, summed over the kv head's
// query heads h (in order) and, for each, over the query tiles from the diagonal one to the last (block x = key tile:
// the longest loops start first). K and V are loaded once for the whole group and the sums stay in registers: no
// atomics, no partial dK/dV in memory. Works in the transposed frame (keys as rows): S^T = K Q^T, P^T,
// dP^T = V dO^T, dS^T = P^T (dP^T - D), dV += P^T dO, dK += dS^T Q. Shared: K, V, then Q[2], dO[2] (the (head,
// query tile) steps, double-buffered through cp.async), lse[2][64], D[2][64].
template <typename T, int HS>
__global__ void __launch_bounds__(kThreads)
    FlashBackwardKvKernel(T* dqkv, const T* dout, const T* qkv, const float* lse, const float* delta, int t, int nh,
                          int nkv, float scale, float scale_log2) {
  constexpr int kC = kChunk<HS>;
  extern __shared__ __align__(16) unsigned char smem_raw[];
  T* sk = reinterpret_cast<T*>(smem_raw);
  T* sv = sk + kTileElems<HS>;
  T* sq = sv + kTileElems<HS>;
  T* sdo = sq + 2 * kTileElems<HS>;
  float* slse = reinterpret_cast<float*>(sdo + 2 * kTileElems<HS>);
  float* sdelta = slse + 2 * kTile;
  const int kt = blockIdx.x, kvh = blockIdx.y, b = blockIdx.z, nt = gridDim.x;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, q = lane % 4;
  const int64_t c = static_cast<int64_t>(nh) * HS, stride = static_cast<int64_t>(nh + 2 * nkv) * HS;
  const int64_t row_base = static_cast<int64_t>(b) * t;
  const T* rows = qkv + row_base * stride;
  // Query head h's Q, dO, lse and D.
  auto q_base = [&](int h) { return rows + static_cast<int64_t>(h) * HS; };
  auto dout_base = [&](int h) { return dout + row_base * c + static_cast<int64_t>(h) * HS; };
  auto lse_bh = [&](int h) { return lse + (static_cast<int64_t>(b) * nh + h) * t; };
  auto delta_bh = [&](int h) { return delta + (static_cast<int64_t>(b) * nh + h) * t; };
  const int h_begin = kvh * (nh / nkv), h_end = h_begin + nh / nkv;
  const int k0 = kt * kTile, row0 = warp * 16;

  flash::LoadTileAsync<HS>(sk, rows + static_cast<int64_t>(nh + kvh) * HS, stride, k0, t);
  flash::LoadTileAsync<HS>(sv, rows + static_cast<int64_t>(nh + nkv + kvh) * HS, stride, k0, t);
  flash::LoadTileAsync<HS>(sq, q_base(h_begin), stride, k0, t);
  flash::LoadTileAsync<HS>(sdo, dout_base(h_begin), c, k0, t);
  flash::CpAsyncCommit();
  LoadRowStats(slse, sdelta, lse_bh(h_begin), delta_bh(h_begin), k0, t);

  float dk[HS / 8][4], dv[HS / 8][4];
  flash::Zero(dk);
  flash::Zero(dv);
  // Steps (h, qt): qt from kt to nt - 1 for each h of the group in turn; (h1, qt1) is the step after.
  for (int h = h_begin, qt = kt, it = 0; h < h_end; ++it) {
    const int buf = it & 1;
    int h1 = h, qt1 = qt + 1;
    if (qt1 == nt) {
      qt1 = kt;
      ++h1;
    }
    if (h1 < h_end) {
      const int nb = (buf ^ 1) * kTileElems<HS>, q1 = qt1 * kTile;
      flash::LoadTileAsync<HS>(sq + nb, q_base(h1), stride, q1, t);
      flash::LoadTileAsync<HS>(sdo + nb, dout_base(h1), c, q1, t);
      flash::CpAsyncCommit();
      LoadRowStats(slse + (buf ^ 1) * kTile, sdelta + (buf ^ 1) * kTile, lse_bh(h1), delta_bh(h1), q1, t);
      flash::CpAsyncWait<1>();
    } else {
      flash::CpAsyncWait<0>();
    }
    __syncthreads();  // query tile qt (and K, V) landed; its row stats are visible
    const T* sqb = sq + buf * kTileElems<HS>;
    const T* sdob = sdo + buf * kTileElems<HS>;
    const float* slb = slse + buf * kTile;
    const float* sdb = sdelta + buf * kTile;
#pragma unroll
    for (int qc = 0; qc < kTile; qc += kC) {
      float p[kC / 8][4], ds[kC / 8][4];  // P^T, then dP^T -> dS^T: 16 keys x kC queries
      flash::Zero(p);
      flash::Zero(ds);
      flash::MmaRowDots<HS, HS, kC>(p, sk, row0, sqb, qc);
      flash::MmaRowDots<HS, HS, kC>(ds, sv, row0, sdob, qc);
#pragma unroll
      for (int j = 0; j < kC / 8; ++j) {
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int qi = qc + j * 8 + 2 * q + (e & 1);  // query (column), tile-relative
          float pv = exp2f(fmaf(p[j][e], scale_log2, -slb[qi]));
          if (qt == kt && row0 + g + (e >> 1) * 8 > qi) pv = 0.f;  // diagonal tile (q0 == k0): key after query
          p[j][e] = pv;
          ds[j][e] = pv * (ds[j][e] - sdb[qi]);
        }
      }
      flash::MmaMix<HS, kC, T>(dv, p, sdob, qc);  // dV += P^T dO
      flash::MmaMix<HS, kC, T>(dk, ds, sqb, qc);  // dK += dS^T Q
    }
    __syncthreads();  // every warp is done with buffer buf before the next iteration refills it
    h = h1;
    qt = qt1;
  }

  // Each warp stages only its own 16 rows of K / V (which only it read), so a warp barrier suffices.
  T* row_out = dqkv + row_base * stride;
  flash::StageWarpRows<HS>(sk, dk, row0, scale, scale);
  flash::StageWarpRows<HS>(sv, dv, row0, 1.f, 1.f);
  __syncwarp();
  flash::StoreWarpRows<HS>(row_out + static_cast<int64_t>(nh + kvh) * HS, stride, sk, row0, k0, t);
  flash::StoreWarpRows<HS>(row_out + static_cast<int64_t>(nh + nkv + kvh) * HS, stride, sv, row0, k0, t);
}

// CTA (query tile, head, batch) with 4 warps of 16 query rows: dQ = scale * sum over keys up to the diagonal of
// dS K, with S = Q K^T, P = exp(S - lse), dP = dO V^T, dS = P (dP - D) (K, V those of the head's kv head). Key
// tiles from the diagonal down, double-buffered; query tiles in reverse block order. Shared: Q, dO, then K[2], V[2].
template <typename T, int HS>
__global__ void __launch_bounds__(kThreads)
    FlashBackwardQKernel(T* dqkv, const T* dout, const T* qkv, const float* lse, const float* delta, int t, int nh,
                         int nkv, float scale, float scale_log2) {
  constexpr int kC = kChunk<HS>;
  extern __shared__ __align__(16) unsigned char smem_raw[];
  T* sq = reinterpret_cast<T*>(smem_raw);
  T* sdo = sq + kTileElems<HS>;
  T* sk = sdo + kTileElems<HS>;
  T* sv = sk + 2 * kTileElems<HS>;
  const int qt = gridDim.x - 1 - blockIdx.x, h = blockIdx.y, b = blockIdx.z, kvh = h / (nh / nkv);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, q = lane % 4;
  const int64_t c = static_cast<int64_t>(nh) * HS, stride = static_cast<int64_t>(nh + 2 * nkv) * HS;
  const int64_t row_base = static_cast<int64_t>(b) * t;
  const T* rows = qkv + row_base * stride;
  const T* qb = rows + static_cast<int64_t>(h) * HS;
  const T* kb = rows + static_cast<int64_t>(nh + kvh) * HS;
  const T* vb = rows + static_cast<int64_t>(nh + nkv + kvh) * HS;
  const int q0 = qt * kTile, row0 = warp * 16;

  flash::LoadTileAsync<HS>(sq, qb, stride, q0, t);
  flash::LoadTileAsync<HS>(sdo, dout + row_base * c + h * HS, c, q0, t);
  flash::LoadTileAsync<HS>(sk, kb, stride, q0, t);
  flash::LoadTileAsync<HS>(sv, vb, stride, q0, t);
  flash::CpAsyncCommit();
  // This thread's rows g and g + 8: lse in log2 units (+inf past T: P = 0) and D.
  float row_lse[2], row_d[2];
  const int64_t bh = (static_cast<int64_t>(b) * nh + h) * t;
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int i = q0 + row0 + g + 8 * r;
    row_lse[r] = i < t ? lse[bh + i] * flash::kLog2e : INFINITY;
    row_d[r] = i < t ? delta[bh + i] : 0.f;
  }

  float dq[HS / 8][4];
  flash::Zero(dq);
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
    __syncthreads();
    const T* skb = sk + buf * kTileElems<HS>;
    const T* svb = sv + buf * kTileElems<HS>;
#pragma unroll
    for (int kc = 0; kc < kTile; kc += kC) {
      float p[kC / 8][4], ds[kC / 8][4];  // P, then dP -> dS: 16 queries x kC keys
      flash::Zero(p);
      flash::Zero(ds);
      flash::MmaRowDots<HS, HS, kC>(p, sq, row0, skb, kc);
      flash::MmaRowDots<HS, HS, kC>(ds, sdo, row0, svb, kc);
#pragma unroll
      for (int j = 0; j < kC / 8; ++j) {
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int r = e >> 1;
          float pv = exp2f(fmaf(p[j][e], scale_log2, -row_lse[r]));
          if (kt == qt && kc + j * 8 + 2 * q + (e & 1) > row0 + g + 8 * r) pv = 0.f;  // diagonal: key after query
          ds[j][e] = pv * (ds[j][e] - row_d[r]);
        }
      }
      flash::MmaMix<HS, kC, T>(dq, ds, skb, kc);  // dQ += dS K
    }
    __syncthreads();
  }

  flash::StageWarpRows<HS>(sq, dq, row0, scale, scale);  // this warp's own Q rows: only it read them
  __syncwarp();
  flash::StoreWarpRows<HS>(dqkv + row_base * stride + static_cast<int64_t>(h) * HS, stride, sq, row0, q0, t);
}

template <typename Kernel>
Status SetSmem(Kernel kernel, size_t bytes) {
  DT_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(bytes)));
  return Status::OK();
}

template <typename T, int HS>
Status LaunchBackward(T* dqkv, float* delta, const T* dout, const T* qkv, const T* out, const float* lse, int64_t b,
                      int64_t t, int64_t nh, int64_t nkv, cudaStream_t stream) {
  const int64_t rows = b * t * nh;
  const int64_t warps = (rows * (HS / 8) + 31) / 32;
  const unsigned delta_blocks = static_cast<unsigned>(std::min<int64_t>((warps + 7) / 8, 1 << 16));
  FlashDeltaKernel<T, HS>
      <<<delta_blocks, 256, 0, stream>>>(delta, dout, out, rows, static_cast<int>(t), static_cast<int>(nh));
  DT_CUDA_CHECK_LAUNCH();
  const float scale = 1.f / sqrtf(static_cast<float>(HS)), scale_log2 = scale * flash::kLog2e;
  const unsigned tiles = static_cast<unsigned>((t + kTile - 1) / kTile);
  const int it = static_cast<int>(t), inh = static_cast<int>(nh), inkv = static_cast<int>(nkv);
  const size_t smem_kv = sizeof(T) * 6 * kTileElems<HS> + sizeof(float) * 4 * kTile;
  DT_RETURN_IF_ERROR(SetSmem(FlashBackwardKvKernel<T, HS>, smem_kv));
  FlashBackwardKvKernel<T, HS>
      <<<dim3(tiles, static_cast<unsigned>(nkv), static_cast<unsigned>(b)), kThreads, smem_kv, stream>>>(
          dqkv, dout, qkv, lse, delta, it, inh, inkv, scale, scale_log2);
  DT_CUDA_CHECK_LAUNCH();
  const size_t smem_q = sizeof(T) * 6 * kTileElems<HS>;
  DT_RETURN_IF_ERROR(SetSmem(FlashBackwardQKernel<T, HS>, smem_q));
  FlashBackwardQKernel<T, HS>
      <<<dim3(tiles, static_cast<unsigned>(nh), static_cast<unsigned>(b)), kThreads, smem_q, stream>>>(
          dqkv, dout, qkv, lse, delta, it, inh, inkv, scale, scale_log2);
  DT_CUDA_CHECK_LAUNCH();
  return Status::OK();
}

template <typename T>
Status Backward(T* dqkv, float* delta, const T* dout, const T* qkv, const T* out, const float* lse, int64_t b,
                int64_t t, int64_t nh, int64_t nkv, int64_t hs, cudaStream_t stream) {
  DT_RETURN_IF_ERROR(flash::CheckArgs(b, t, nh, nkv, hs, {dqkv, dout, qkv, out}));
  if (hs == 64) return LaunchBackward<T, 64>(dqkv, delta, dout, qkv, out, lse, b, t, nh, nkv, stream);
  return LaunchBackward<T, 128>(dqkv, delta, dout, qkv, out, lse, b, t, nh, nkv, stream);
}

}  // namespace

Status FlashAttentionBackwardBf16(uint16_t* dqkv, float* delta, const uint16_t* dout, const uint16_t* qkv,
                                  const uint16_t* out, const float* lse, int64_t b, int64_t t, int64_t nh, int64_t nkv,
                                  int64_t hs, cudaStream_t stream) {
  DT_NVTX_RANGE("FlashAttentionBackwardBf16");
  using bf16 = __nv_bfloat16;
  return Backward(reinterpret_cast<bf16*>(dqkv), delta, reinterpret_cast<const bf16*>(dout),
                  reinterpret_cast<const bf16*>(qkv), reinterpret_cast<const bf16*>(out), lse, b, t, nh, nkv, hs,
                  stream);
}

Status FlashAttentionBackwardFp16(uint16_t* dqkv, float* delta, const uint16_t* dout, const uint16_t* qkv,
                                  const uint16_t* out, const float* lse, int64_t b, int64_t t, int64_t nh, int64_t nkv,
                                  int64_t hs, cudaStream_t stream) {
  DT_NVTX_RANGE("FlashAttentionBackwardFp16");
  return Backward(reinterpret_cast<__half*>(dqkv), delta, reinterpret_cast<const __half*>(dout),
                  reinterpret_cast<const __half*>(qkv), reinterpret_cast<const __half*>(out), lse, b, t, nh, nkv, hs,
                  stream);
}

}  // namespace dtrain::ops
