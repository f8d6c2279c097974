#include <cuda_bf16.h>

#include <algorithm>
#include <cstdint>

#include "core/cuda_check.h"
#include "core/nvtx.h"
#include "kernels/attention.h"

namespace dtrain::ops {

namespace {

// Tiles of kTile query rows against kTile key rows. 256 threads: thread (r = tid / 8, g = tid % 8) owns tile row r,
// and within it score columns g, g + 8, g + 16, g + 24 and head dims g, g + 8, ... (so the 8 lanes of a row group
// are consecutive lanes of one warp: row reductions are 3 shuffles). Shared tiles are fp32 with a row stride of
// hs + 1 floats, so the 8 lanes reading 8 different rows of a K/V tile hit 8 different banks.
constexpr int kTile = 32;
constexpr int kThreads = 256;
constexpr int kGroup = 8;                                     // lanes per tile row
constexpr int kColsPerLane = kTile / kGroup;                  // score columns per lane
constexpr int kDimsPerLane = kAttentionMaxHeadSize / kGroup;  // head dims per lane (upper bound)
constexpr int kPld = kTile + 1;                               // row stride of score tiles
static_assert(kTile * kGroup == kThreads, "one row group per tile row");

__device__ __forceinline__ float ToFloat(float x) { return x; }
__device__ __forceinline__ float ToFloat(__nv_bfloat16 x) { return __bfloat162float(x); }
__device__ __forceinline__ void StoreAs(float* p, float v) { *p = v; }
__device__ __forceinline__ void StoreAs(__nv_bfloat16* p, float v) { *p = __float2bfloat16(v); }

__device__ __forceinline__ float GroupMax(float v) {
  for (int off = kGroup / 2; off > 0; off /= 2) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, off));
  return v;
}
__device__ __forceinline__ float GroupSum(float v) {
  for (int off = kGroup / 2; off > 0; off /= 2) v += __shfl_xor_sync(0xffffffffu, v, off);
  return v;
}

// sm[r][d] = src[(row0 + r) * stride + d] as fp32 for rows < t, 0 beyond (the tail of the last tile).
template <typename T>
__device__ void LoadTile(float* sm, const T* src, int row0, int t, int64_t stride, int hs) {
  const int ld = hs + 1;
  for (int idx = threadIdx.x; idx < kTile * hs; idx += kThreads) {
    const int r = idx / hs, d = idx % hs;
    sm[r * ld + d] = row0 + r < t ? ToFloat(src[static_cast<int64_t>(row0 + r) * stride + d]) : 0.f;
  }
}

// Dot product of two shared rows of length hs.
__device__ __forceinline__ float RowDot(const float* a, const float* b, int hs) {
  float acc = 0.f;
  for (int d = 0; d < hs; ++d) acc = fmaf(a[d], b[d], acc);
  return acc;
}

// Row layout of qkv (see attention.h): q of head h at column h*hs, k / v of kv head g at (nh + g) hs /
// (nh + nkv + g) hs, rows (nh + 2 nkv) hs apart.
struct QkvCols {
  int nh, nkv, hs;
  __device__ int64_t stride() const { return static_cast<int64_t>(nh + 2 * nkv) * hs; }
  __device__ int64_t q(int h) const { return static_cast<int64_t>(h) * hs; }
  __device__ int64_t k(int g) const { return static_cast<int64_t>(nh + g) * hs; }
  __device__ int64_t v(int g) const { return static_cast<int64_t>(nh + nkv + g) * hs; }
};

// Block (query tile, head, batch); query tiles in reverse so the longest (last) causal rows start first. Query head
// h reads kv head h / (nh / nkv).
template <typename T>
__global__ void __launch_bounds__(kThreads)
    AttentionForwardKernel(T* out, float* lse, const T* qkv, int t, QkvCols cols, float scale) {
  extern __shared__ float smem[];
  const int nh = cols.nh, hs = cols.hs;
  const int ld = hs + 1;
  float* sq = smem;
  float* sk = sq + kTile * ld;
  float* sv = sk + kTile * ld;
  float* sp = sv + kTile * ld;  // [kTile][kPld] probabilities of the current tile
  const int qt = gridDim.x - 1 - blockIdx.x, h = blockIdx.y, b = blockIdx.z;
  const int kvh = h / (nh / cols.nkv);
  const int64_t c = static_cast<int64_t>(nh) * hs, stride = cols.stride();
  const T* rows = qkv + static_cast<int64_t>(b) * t * stride;
  const int r = threadIdx.x / kGroup, g = threadIdx.x % kGroup;
  const int q0 = qt * kTile, i = q0 + r;
  LoadTile(sq, rows + cols.q(h), q0, t, stride, hs);

  float o[kDimsPerLane];
#pragma unroll
  for (int k = 0; k < kDimsPerLane; ++k) o[k] = 0.f;
  float m = -INFINITY, l = 0.f;
  for (int kt = 0; kt <= qt; ++kt) {  // causal: key tiles up to the diagonal one
    const int k0 = kt * kTile;
    __syncthreads();  // the previous tile's sk/sv/sp reads are done
    LoadTile(sk, rows + cols.k(kvh), k0, t, stride, hs);
    LoadTile(sv, rows + cols.v(kvh), k0, t, stride, hs);
    __syncthreads();
    float s[kColsPerLane];
    float tile_max = -INFINITY;
#pragma unroll
    for (int u = 0; u < kColsPerLane; ++u) {
      const int jj = g + kGroup * u, j = k0 + jj;
      s[u] = (j <= i && j < t) ? RowDot(sq + r * ld, sk + jj * ld, hs) * scale : -INFINITY;
      tile_max = fmaxf(tile_max, s[u]);
    }
    // Online softmax: rescale the running sum and output to the new row max. Every row sees key 0 in the first
    // tile, so m_new is finite from then on and corr = exp(-inf) = 0 only on the first tile.
    const float m_new = fmaxf(m, GroupMax(tile_max));
    const float corr = expf(m - m_new);
    float psum = 0.f;
#pragma unroll
    for (int u = 0; u < kColsPerLane; ++u) {
      const float p = s[u] == -INFINITY ? 0.f : expf(s[u] - m_new);
      sp[r * kPld + g + kGroup * u] = p;
      psum += p;
    }
    l = l * corr + GroupSum(psum);
    m = m_new;
    __syncwarp();  // row r of sp was written by this row group (lanes of this warp) and is read by it only
#pragma unroll
    for (int k = 0; k < kDimsPerLane; ++k) {
      const int d = g + kGroup * k;
      if (d < hs) {
        float acc = o[k] * corr;
        for (int jj = 0; jj < kTile; ++jj) acc = fmaf(sp[r * kPld + jj], sv[jj * ld + d], acc);
        o[k] = acc;
      }
    }
  }
  if (i < t) {
    T* orow = out + (static_cast<int64_t>(b) * t + i) * c + h * hs;
    const float inv_l = 1.f / l;
#pragma unroll
    for (int k = 0; k < kDimsPerLane; ++k) {
      const int d = g + kGroup * k;
      if (d < hs) StoreAs(orow + d, o[k] * inv_l);
    }
    if (g == 0) lse[(static_cast<int64_t>(b) * nh + h) * t + i] = m + logf(l);
  }
}

// delta[b, h, i] = dout_i . out_i (per head), one warp per (b, i, h).
template <typename T>
__global__ void AttentionDeltaKernel(float* delta, const T* dout, const T* out, int b_len, int t, int nh, int hs) {
  const int64_t rows = static_cast<int64_t>(b_len) * t * nh;
  const int lane = threadIdx.x % 32;
  for (int64_t w = (blockIdx.x * int64_t{blockDim.x} + threadIdx.x) / 32; w < rows;
       w += int64_t{gridDim.x} * blockDim.x / 32) {
    const int64_t bt = w / nh;  // b * t + i
    const int h = static_cast<int>(w % nh);
    const int64_t off = bt * nh * hs + static_cast<int64_t>(h) * hs;
    float acc = 0.f;
    for (int d = lane; d < hs; d += 32) acc = fmaf(ToFloat(dout[off + d]), ToFloat(out[off + d]), acc);
    for (int s = 16; s > 0; s /= 2) acc += __shfl_xor_sync(0xffffffffu, acc, s);
    if (lane == 0) delta[(bt / t * nh + h) * t + bt % t] = acc;
  }
}

// Shared state of one (query tile, key tile) pair in backward: Q and dO rows with their lse and D, K and V rows.
struct BwdTiles {
  float *sq, *sdo, *sk, *sv, *slse, *sdelta;
};

// For tile row r (query i = q0 + r) and this lane's columns jj: P_ij and dS_ij = P_ij (dO_i . v_j - D_i), masked to
// 0 where j > i or either index is past T. Written to sp (when not null) and sds, [kTile][kPld].
__device__ __forceinline__ void ScoresAndGrads(const BwdTiles& s, float* sp, float* sds, int q0, int k0, int t, int hs,
                                               float scale, int r, int g) {
  const int ld = hs + 1, i = q0 + r;
#pragma unroll
  for (int u = 0; u < kColsPerLane; ++u) {
    const int jj = g + kGroup * u, j = k0 + jj;
    float p = 0.f, ds = 0.f;
    if (j <= i && i < t) {
      p = expf(RowDot(s.sq + r * ld, s.sk + jj * ld, hs) * scale - s.slse[r]);
      ds = p * (RowDot(s.sdo + r * ld, s.sv + jj * ld, hs) - s.sdelta[r]);
    }
    if (sp != nullptr) sp[r * kPld + jj] = p;
    sds[r * kPld + jj] = ds;
  }
}

// Loads lse and D of query rows q0.. (0 past T).
__device__ __forceinline__ void LoadRowStats(const BwdTiles& s, const float* lse, const float* delta, int q0, int t) {
  if (threadIdx.x < kTile) {
    const int i = q0 + threadIdx.x;
    s.slse[threadIdx.x] = i < t ? lse[i] : 0.f;
    s.sdelta[threadIdx.x] = i < t ? delta[i] : 0.f;
  }
}

__device__ BwdTiles CarveBwd(float* smem, int hs) {
  const int tile = kTile * (hs + 1);
  return {smem, smem + tile, smem + 2 * tile, smem + 3 * tile, smem + 4 * tile, smem + 4 * tile + kTile};
}

// Block (key tile, kv head, batch): dK and dV of kTile key rows, summed over the kv head's query heads in order and,
// for each, over every query tile at or after the key tile (earlier queries cannot see these keys). Thread (r, g)
// accumulates key row k0 + r, dims g, g + 8, ...
template <typename T>
__global__ void __launch_bounds__(kThreads)
    AttentionBackwardKvKernel(T* dqkv, const T* dout, const T* qkv, const float* lse, const float* delta, int t,
                              QkvCols cols, float scale) {
  extern __shared__ float smem[];
  const int nh = cols.nh, hs = cols.hs;
  const BwdTiles s = CarveBwd(smem, hs);
  float* sp = s.sdelta + kTile;  // [kTile][kPld]
  float* sds = sp + kTile * kPld;
  const int ld = hs + 1;
  const int kt = blockIdx.x, kvh = blockIdx.y, b = blockIdx.z, nt = gridDim.x;
  const int group = nh / cols.nkv;
  const int64_t c = static_cast<int64_t>(nh) * hs, stride = cols.stride();
  const int64_t row_base = static_cast<int64_t>(b) * t;
  const T* rows = qkv + row_base * stride;
  const int r = threadIdx.x / kGroup, g = threadIdx.x % kGroup;
  const int k0 = kt * kTile;
  LoadTile(s.sk, rows + cols.k(kvh), k0, t, stride, hs);
  LoadTile(s.sv, rows + cols.v(kvh), k0, t, stride, hs);

  float dk[kDimsPerLane], dv[kDimsPerLane];
#pragma unroll
  for (int k = 0; k < kDimsPerLane; ++k) dk[k] = dv[k] = 0.f;
  for (int h = kvh * group; h < (kvh + 1) * group; ++h) {
    const float* lse_bh = lse + (static_cast<int64_t>(b) * nh + h) * t;
    const float* delta_bh = delta + (static_cast<int64_t>(b) * nh + h) * t;
    for (int qt = kt; qt < nt; ++qt) {
      const int q0 = qt * kTile;
      __syncthreads();  // the previous query tile's reads are done
      LoadTile(s.sq, rows + cols.q(h), q0, t, stride, hs);
      LoadTile(s.sdo, dout + row_base * c + static_cast<int64_t>(h) * hs, q0, t, c, hs);
      LoadRowStats(s, lse_bh, delta_bh, q0, t);
      __syncthreads();
      ScoresAndGrads(s, sp, sds, q0, k0, t, hs, scale, r, g);
      __syncthreads();  // key row r needs column r of every query row's P and dS
#pragma unroll
      for (int k = 0; k < kDimsPerLane; ++k) {
        const int d = g + kGroup * k;
        if (d < hs) {
          float acc_v = dv[k], acc_k = dk[k];
          for (int ii = 0; ii < kTile; ++ii) {
            acc_v = fmaf(sp[ii * kPld + r], s.sdo[ii * ld + d], acc_v);
            acc_k = fmaf(sds[ii * kPld + r], s.sq[ii * ld + d], acc_k);
          }
          dv[k] = acc_v;
          dk[k] = acc_k;
        }
      }
    }
  }
  const int j = k0 + r;
  if (j < t) {
    T* row = dqkv + (row_base + j) * stride;
#pragma unroll
    for (int k = 0; k < kDimsPerLane; ++k) {
      const int d = g + kGroup * k;
      if (d < hs) {
        StoreAs(row + cols.k(kvh) + d, dk[k] * scale);
        StoreAs(row + cols.v(kvh) + d, dv[k]);
      }
    }
  }
}

// Block (query tile, head, batch): dQ of kTile query rows over the key tiles (of the head's kv head) up to the
// diagonal.
template <typename T>
__global__ void __launch_bounds__(kThreads)
    AttentionBackwardQKernel(T* dqkv, const T* dout, const T* qkv, const float* lse, const float* delta, int t,
                             QkvCols cols, float scale) {
  extern __shared__ float smem[];
  const int nh = cols.nh, hs = cols.hs;
  const BwdTiles s = CarveBwd(smem, hs);
  float* sds = s.sdelta + kTile;  // [kTile][kPld]
  const int ld = hs + 1;
  const int qt = gridDim.x - 1 - blockIdx.x, h = blockIdx.y, b = blockIdx.z;
  const int kvh = h / (nh / cols.nkv);
  const int64_t c = static_cast<int64_t>(nh) * hs, stride = cols.stride();
  const int64_t row_base = static_cast<int64_t>(b) * t;
  const T* rows = qkv + row_base * stride;
  const int r = threadIdx.x / kGroup, g = threadIdx.x % kGroup;
  const int q0 = qt * kTile;
  LoadTile(s.sq, rows + cols.q(h), q0, t, stride, hs);
  LoadTile(s.sdo, dout + row_base * c + h * hs, q0, t, c, hs);
  LoadRowStats(s, lse + (static_cast<int64_t>(b) * nh + h) * t, delta + (static_cast<int64_t>(b) * nh + h) * t, q0, t);

  float dq[kDimsPerLane];
#pragma unroll
  for (int k = 0; k < kDimsPerLane; ++k) dq[k] = 0.f;
  for (int kt = 0; kt <= qt; ++kt) {
    const int k0 = kt * kTile;
    __syncthreads();  // the previous key tile's reads are done (and, on the first pass, the Q/dO loads)
    LoadTile(s.sk, rows + cols.k(kvh), k0, t, stride, hs);
    LoadTile(s.sv, rows + cols.v(kvh), k0, t, stride, hs);
    __syncthreads();
    ScoresAndGrads(s, nullptr, sds, q0, k0, t, hs, scale, r, g);
    __syncwarp();  // row r of sds was written by this row group (lanes of this warp) and is read by it only
#pragma unroll
    for (int k = 0; k < kDimsPerLane; ++k) {
      const int d = g + kGroup * k;
      if (d < hs) {
        float acc = dq[k];
        for (int jj = 0; jj < kTile; ++jj) acc = fmaf(sds[r * kPld + jj], s.sk[jj * ld + d], acc);
        dq[k] = acc;
      }
    }
  }
  const int i = q0 + r;
  if (i < t) {
    T* row = dqkv + (row_base + i) * stride + cols.q(h);
#pragma unroll
    for (int k = 0; k < kDimsPerLane; ++k) {
      const int d = g + kGroup * k;
      if (d < hs) StoreAs(row + d, dq[k] * scale);
    }
  }
}

Status CheckDims(int64_t b, int64_t t, int64_t nh, int64_t nkv, int64_t hs) {
  DT_CHECK_ARG(b > 0 && b < 65536 && nh > 0 && nh < 65536 && t > 0 && t < (int64_t{1} << 30),
               "attention: unsupported B = " << b << ", T = " << t << ", NH = " << nh);
  DT_CHECK_ARG(nkv > 0 && nh % nkv == 0, "attention: NH = " << nh << " is not a multiple of NKV = " << nkv);
  DT_CHECK_ARG(hs > 0 && hs <= kAttentionMaxHeadSize, "attention: head size " << hs << " not in [1, 128]");
  return Status::OK();
}

// Dynamic shared memory above the 48 KiB default needs an opt-in per kernel (hs > ~90 here).
template <typename Kernel>
Status LaunchSetup(Kernel kernel, size_t smem_bytes) {
  if (smem_bytes > 48 * 1024) {
    DT_CUDA_CHECK(
        cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem_bytes)));
  }
  return Status::OK();
}

dim3 TileGrid(int64_t b, int64_t t, int64_t nh) {
  return dim3(static_cast<unsigned>((t + kTile - 1) / kTile), static_cast<unsigned>(nh), static_cast<unsigned>(b));
}

QkvCols Cols(int64_t nh, int64_t nkv, int64_t hs) {
  return {static_cast<int>(nh), static_cast<int>(nkv), static_cast<int>(hs)};
}

template <typename T>
Status Forward(T* out, float* lse, const T* qkv, int64_t b, int64_t t, int64_t nh, int64_t nkv, int64_t hs,
               cudaStream_t stream) {
  DT_NVTX_RANGE("AttentionForwardCuda");
  DT_RETURN_IF_ERROR(CheckDims(b, t, nh, nkv, hs));
  const size_t smem = sizeof(float) * (3 * kTile * (hs + 1) + kTile * kPld);
  DT_RETURN_IF_ERROR(LaunchSetup(AttentionForwardKernel<T>, smem));
  const float scale = 1.f / sqrtf(static_cast<float>(hs));
  AttentionForwardKernel<T>
      <<<TileGrid(b, t, nh), kThreads, smem, stream>>>(out, lse, qkv, static_cast<int>(t), Cols(nh, nkv, hs), scale);
  DT_CUDA_CHECK_LAUNCH();
  return Status::OK();
}

template <typename T>
Status Backward(T* dqkv, float* delta, const T* dout, const T* qkv, const T* out, const float* lse, int64_t b,
                int64_t t, int64_t nh, int64_t nkv, int64_t hs, cudaStream_t stream) {
  DT_NVTX_RANGE("AttentionBackwardCuda");
  DT_RETURN_IF_ERROR(CheckDims(b, t, nh, nkv, hs));
  const int it = static_cast<int>(t), inh = static_cast<int>(nh), ihs = static_cast<int>(hs);
  const int64_t warps = b * t * nh;
  const unsigned delta_blocks = static_cast<unsigned>(std::min<int64_t>((warps + 7) / 8, 65536));
  AttentionDeltaKernel<T><<<delta_blocks, kThreads, 0, stream>>>(delta, dout, out, static_cast<int>(b), it, inh, ihs);
  DT_CUDA_CHECK_LAUNCH();
  const float scale = 1.f / sqrtf(static_cast<float>(hs));
  const size_t tiles = 4 * kTile * (hs + 1) + 2 * kTile;  // Q, dO, K, V tiles + lse, D
  const size_t smem_kv = sizeof(float) * (tiles + 2 * kTile * kPld);
  DT_RETURN_IF_ERROR(LaunchSetup(AttentionBackwardKvKernel<T>, smem_kv));
  AttentionBackwardKvKernel<T>
      <<<TileGrid(b, t, nkv), kThreads, smem_kv, stream>>>(dqkv, dout, qkv, lse, delta, it, Cols(nh, nkv, hs), scale);
  DT_CUDA_CHECK_LAUNCH();
  const size_t smem_q = sizeof(float) * (tiles + kTile * kPld);
  DT_RETURN_IF_ERROR(LaunchSetup(AttentionBackwardQKernel<T>, smem_q));
  AttentionBackwardQKernel<T>
      <<<TileGrid(b, t, nh), kThreads, smem_q, stream>>>(dqkv, dout, qkv, lse, delta, it, Cols(nh, nkv, hs), scale);
  DT_CUDA_CHECK_LAUNCH();
  return Status::OK();
}

}  // namespace

Status AttentionForwardCuda(float* out, float* lse, const float* qkv, int64_t b, int64_t t, int64_t nh, int64_t nkv,
                            int64_t hs, cudaStream_t stream) {
  return Forward(out, lse, qkv, b, t, nh, nkv, hs, stream);
}

Status AttentionBackwardCuda(float* dqkv, float* delta, const float* dout, const float* qkv, const float* out,
                             const float* lse, int64_t b, int64_t t, int64_t nh, int64_t nkv, int64_t hs,
                             cudaStream_t stream) {
  return Backward(dqkv, delta, dout, qkv, out, lse, b, t, nh, nkv, hs, stream);
}

Status AttentionForwardCudaBf16(uint16_t* out, float* lse, const uint16_t* qkv, int64_t b, int64_t t, int64_t nh,
                                int64_t nkv, int64_t hs, cudaStream_t stream) {
  return Forward(reinterpret_cast<__nv_bfloat16*>(out), lse, reinterpret_cast<const __nv_bfloat16*>(qkv), b, t, nh, nkv,
                 hs, stream);
}

Status AttentionBackwardCudaBf16(uint16_t* dqkv, float* delta, const uint16_t* dout, const uint16_t* qkv,
                                 const uint16_t* out, const float* lse, int64_t b, int64_t t, int64_t nh, int64_t nkv,
                                 int64_t hs, cudaStream_t stream) {
  return Backward(reinterpret_cast<__nv_bfloat16*>(dqkv), delta, reinterpret_cast<const __nv_bfloat16*>(dout),
                  reinterpret_cast<const __nv_bfloat16*>(qkv), reinterpret_cast<const __nv_bfloat16*>(out), lse, b, t,
                  nh, nkv, hs, stream);
}

}  // namespace dtrain::ops
