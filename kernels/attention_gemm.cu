// Tensor-core bf16 causal attention through cuBLAS (llm.c's pre-cuDNN scheme): permute qkv into head-major Q, K, V,
// materialize the T x T scores with strided-batched GEMMs, causal softmax per row, and GEMM back. See attention.h.
// Grouped-query attention batches the GEMMs per (b, kv head): the group's NH / NKV query heads are consecutive in
// head-major Q, so they form one [group T, hs] matrix against the kv head's [T, hs] K and V; dK = dS^T Q and
// dV = P^T dO then sum over the group's rows inside one GEMM (no atomics, a fixed reduction order).
#include <cuda_bf16.h>

#include <algorithm>
#include <cstdint>
#include <string>
#include <type_traits>

#include "core/cuda_lib_check.h"
#include "core/cuda_handles.h"
#include "core/nvtx.h"
#include "kernels/attention.h"

namespace dtrain::ops {

namespace {

using bf16 = __nv_bfloat16;
constexpr int kThreads = 256;
constexpr int kRowsPerBlock = kThreads / 32;  // softmax kernels: one warp per row
constexpr size_t kAlign = 256;                // workspace sub-buffer alignment (cuBLAS wants >= 16 B)

// Carves the workspace into aligned sub-buffers; with base == nullptr it only measures (bytes()).
class Carver {
 public:
  explicit Carver(void* base) : base_(static_cast<char*>(base)) {}
  template <typename T>
  T* Take(int64_t n) {
    off_ = (off_ + kAlign - 1) / kAlign * kAlign;
    T* p = base_ == nullptr ? nullptr : reinterpret_cast<T*>(base_ + off_);
    off_ += static_cast<size_t>(n) * sizeof(T);
    return p;
  }
  size_t bytes() const { return off_; }

 private:
  char* base_;
  size_t off_ = 0;
};

// Sub-buffers. Head-major bf16: q [B, NH, T, hs], k and v [B, NKV, T, hs] (contiguous, in that order), o (forward) /
// dout_h (backward) [B, NH, T, hs], dq, dk, dv (backward, contiguous, as q, k, v). [B*NH, T, T]: s (fp32 scores,
// scaled), p (bf16 probabilities), and in backward dp (fp32) and ds (bf16).
struct Buffers {
  bf16 *qkv_h, *o_h, *dqkv_h;
  float *s, *dp;
  bf16 *p, *ds;
};

Buffers Carve(void* base, int64_t b, int64_t t, int64_t nh, int64_t nkv, int64_t hs, bool backward, size_t* bytes) {
  Carver c(base);
  const int64_t heads = b * nh * t * hs, qkv = b * (nh + 2 * nkv) * t * hs, scores = b * nh * t * t;
  Buffers x{};
  x.qkv_h = c.Take<bf16>(qkv);
  x.o_h = c.Take<bf16>(heads);
  x.s = c.Take<float>(scores);
  x.p = c.Take<bf16>(scores);
  if (backward) {
    x.dqkv_h = c.Take<bf16>(qkv);
    x.dp = c.Take<float>(scores);
    x.ds = c.Take<bf16>(scores);
  }
  if (bytes != nullptr) *bytes = c.bytes();
  return x;
}

// Head-major parts <-> row-major rows: part 0 is [B, NH, T, hs], parts 1 .. parts - 1 are [B, NKV, T, hs], one after
// the other; row (b, t) of the row-major buffer holds part 0's NH heads, then each later part's NKV heads ((NH +
// (parts - 1) NKV) hs elements: qkv for parts = 3, out for parts = 1). One thread per kVec consecutive elements of a
// head row (16-byte moves when hs % 8 == 0), indexed in head-major order; 32-bit index math (n / kVec < 2^31,
// checked by the caller).
template <bool kToHeads, int kVec>
__global__ void PermuteKernel(bf16* dst, const bf16* src, int n_vec, int parts, int b_len, int t, int nh, int nkv,
                              int hs) {
  using Chunk = std::conditional_t<kVec == 8, uint4, bf16>;
  const int hv = hs / kVec;
  const int q_vec = b_len * nh * t * hv, kv_vec = b_len * nkv * t * hv;  // chunks of part 0, of each later part
  const int64_t width = static_cast<int64_t>(nh + (parts - 1) * nkv) * hs;
  for (int e = blockIdx.x * blockDim.x + threadIdx.x; e < n_vec; e += gridDim.x * blockDim.x) {
    int part = 0, heads = nh, r = e;
    if (e >= q_vec) {
      part = 1 + (e - q_vec) / kv_vec;
      r = (e - q_vec) % kv_vec;
      heads = nkv;
    }
    const int col0 = part == 0 ? 0 : (nh + (part - 1) * nkv) * hs;
    const int rr = r / hv;
    const int d = (r - rr * hv) * kVec;
    r = rr;
    const int tt = r % t;
    r /= t;
    const int h = r % heads, bb = r / heads;
    const int64_t rm = (static_cast<int64_t>(bb) * t + tt) * width + col0 + static_cast<int64_t>(h) * hs + d;
    const int64_t hm = static_cast<int64_t>(e) * kVec;
    if (kToHeads) {
      *reinterpret_cast<Chunk*>(dst + hm) = *reinterpret_cast<const Chunk*>(src + rm);
    } else {
      *reinterpret_cast<Chunk*>(dst + rm) = *reinterpret_cast<const Chunk*>(src + hm);
    }
  }
}

__device__ __forceinline__ float WarpSum(float v) {
  for (int off = 16; off > 0; off /= 2) v += __shfl_xor_sync(0xffffffffu, v, off);
  return v;
}

// One warp per row (bh, i) of s [B*NH, T, T] (scores already scaled): lse[row] = log sum_{j<=i} exp(s_ij) and
// p_ij = exp(s_ij - lse) for j <= i, 0 for j > i (the masked half, which the P V GEMM reads too).
__global__ void CausalSoftmaxKernel(bf16* p, float* lse, const float* s, int64_t rows, int t) {
  const int64_t row = (blockIdx.x * int64_t{blockDim.x} + threadIdx.x) / 32;
  if (row >= rows) return;  // whole warps exit together (rows are warp-uniform)
  const int lane = threadIdx.x % 32, i = static_cast<int>(row % t);
  const float* srow = s + row * t;
  // Online max/sum per lane, then merged across the warp. Lane 0 always holds j = 0, so the merged max is finite.
  float m = -INFINITY, l = 0.f;
  for (int j = lane; j <= i; j += 32) {
    const float x = srow[j];
    const float m_new = fmaxf(m, x);
    l = l * expf(m - m_new) + expf(x - m_new);
    m = m_new;
  }
  for (int off = 16; off > 0; off /= 2) {
    const float m_o = __shfl_xor_sync(0xffffffffu, m, off), l_o = __shfl_xor_sync(0xffffffffu, l, off);
    const float m_new = fmaxf(m, m_o);
    if (m_new != -INFINITY) l = l * expf(m - m_new) + l_o * expf(m_o - m_new);  // both -inf: l = l_o = 0 stays
    m = m_new;
  }
  const float row_lse = m + logf(l);
  bf16* prow = p + row * t;
  for (int j = lane; j < t; j += 32) prow[j] = __float2bfloat16(j <= i ? expf(srow[j] - row_lse) : 0.f);
  if (lane == 0) lse[row] = row_lse;
}

// One warp per row (bh, i): D_i = dout_i . out_i (out read in its [B, T, C] layout, dout head-major), then for every
// j: P_ij = exp(s_ij - lse_i) and dS_ij = P_ij (dP_ij - D_i) * scale for j <= i, both 0 for j > i.
__global__ void SoftmaxBackwardKernel(bf16* p, bf16* ds, const float* s, const float* dp, const float* lse,
                                      const bf16* dout_h, const bf16* out, int64_t rows, int t, int nh, int hs,
                                      float scale) {
  const int64_t row = (blockIdx.x * int64_t{blockDim.x} + threadIdx.x) / 32;
  if (row >= rows) return;
  const int lane = threadIdx.x % 32, i = static_cast<int>(row % t);
  const int64_t bh = row / t, b = bh / nh, h = bh % nh;
  const bf16* orow = out + (b * t + i) * nh * hs + h * hs;
  const bf16* dorow = dout_h + row * hs;
  float acc = 0.f;
  for (int d = lane; d < hs; d += 32) acc = fmaf(__bfloat162float(dorow[d]), __bfloat162float(orow[d]), acc);
  const float delta = WarpSum(acc), row_lse = lse[row];
  const int64_t base = row * t;
  for (int j = lane; j < t; j += 32) {
    float pv = 0.f, dsv = 0.f;
    if (j <= i) {
      pv = expf(s[base + j] - row_lse);
      dsv = pv * (dp[base + j] - delta) * scale;
    }
    p[base + j] = __float2bfloat16(pv);
    ds[base + j] = __float2bfloat16(dsv);
  }
}

// cuBLAS is column-major: a row-major [R, K] buffer with row stride ld IS the column-major K x R matrix (its
// transpose) with leading dimension ld. Computes, for `batch` matrices, C (m x n column-major, ldc) = alpha op(A)
// op(B) with bf16 A and B, fp32 accumulation (tensor cores), C of type c_type.
Status Gemm(cublasHandle_t handle, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k, float alpha,
            const bf16* a, int lda, long long stride_a, const bf16* b, int ldb, long long stride_b, void* c,
            cudaDataType_t c_type, int ldc, long long stride_c, int batch) {
  const float beta = 0.f;
  DT_CUBLAS_CHECK(cublasGemmStridedBatchedEx(handle, ta, tb, m, n, k, &alpha, a, CUDA_R_16BF, lda, stride_a, b,
                                             CUDA_R_16BF, ldb, stride_b, &beta, c, c_type, ldc, stride_c, batch,
                                             CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
  return Status::OK();
}

// The three GEMM shapes, per (b, kv head), with every operand row-major: for the query side (Q/dO/O/dQ, and the
// scores S/P/dP/dS) the group's rows stacked, X [G T, hs] (ld hs, batch stride G T hs) and M [G T, T] (ld T, batch
// stride G T T); for the kv side (K/V/dK/dV) Xkv [T, hs] (ld hs, batch stride T hs). G = NH / NKV (1 for MHA).
struct Gemms {
  cublasHandle_t handle;
  int t, hs, group, batch;
  int rows() const { return group * t; }  // query-side rows per batch entry
  long long xs() const { return static_cast<long long>(rows()) * hs; }
  long long kvs() const { return static_cast<long long>(t) * hs; }
  long long ms() const { return static_cast<long long>(rows()) * t; }
  // M = alpha X1 Xkv^T, i.e. M[i][j] = alpha x1_i . xkv_j (S = scale Q K^T, dP = dO V^T). Column-major M^T =
  // Xkv X1^T: Xkv's buffer is Xkv^T (hs x T) so op = T; X1's buffer is X1^T (hs x G T) so op = N. m = T (cols j),
  // n = G T (rows i), k = hs, lda = ldb = hs, ldc = T. C is fp32.
  Status RowDots(float* m_out, const bf16* x1, const bf16* xkv, float alpha) const {
    return Gemm(handle, CUBLAS_OP_T, CUBLAS_OP_N, t, rows(), hs, alpha, xkv, hs, kvs(), x1, hs, xs(), m_out, CUDA_R_32F,
                t, ms(), batch);
  }
  // Y = M Xkv, i.e. Y[i][d] = sum_j M[i][j] xkv_j[d] (O = P V, dQ = dS K). Column-major Y^T = Xkv^T M^T: Xkv's buffer
  // is Xkv^T (op N, lda hs), M's buffer is M^T (op N, ldb T). m = hs, n = G T, k = T, ldc = hs. C is bf16.
  Status Mix(bf16* y, const bf16* m_in, const bf16* xkv) const {
    return Gemm(handle, CUBLAS_OP_N, CUBLAS_OP_N, hs, rows(), t, 1.f, xkv, hs, kvs(), m_in, t, ms(), y, CUDA_R_16BF, hs,
                xs(), batch);
  }
  // Ykv = M^T X, i.e. ykv_j[d] = sum_i M[i][j] x_i[d] over all G T rows i, so over the group's heads too (dV = P^T dO,
  // dK = dS^T Q). Column-major Ykv^T = X^T M: X's buffer is X^T (op N, lda hs); M's buffer is M^T, so op = T gives
  // M (ldb T). m = hs, n = T, k = G T, ldc = hs. C is bf16.
  Status MixTransposed(bf16* ykv, const bf16* m_in, const bf16* x) const {
    return Gemm(handle, CUBLAS_OP_N, CUBLAS_OP_T, hs, t, rows(), 1.f, x, hs, xs(), m_in, t, ms(), ykv, CUDA_R_16BF, hs,
                kvs(), batch);
  }
};

Status CheckDims(int64_t b, int64_t t, int64_t nh, int64_t nkv, int64_t hs) {
  DT_CHECK_ARG(b > 0 && nh > 0 && b * nh < (int64_t{1} << 31) && t > 0 && t < (int64_t{1} << 30) && hs > 0 &&
                   hs <= kAttentionMaxHeadSize && nkv > 0 && nh % nkv == 0 && nh / nkv * t < (int64_t{1} << 31),
               "attention (cuBLAS): unsupported B = " << b << ", T = " << t << ", NH = " << nh << ", NKV = " << nkv
                                                      << ", hs = " << hs);
  return Status::OK();
}

unsigned Blocks(int64_t threads) {
  return static_cast<unsigned>(std::min<int64_t>((threads + kThreads - 1) / kThreads, int64_t{1} << 20));
}

template <bool kToHeads>
Status Permute(bf16* dst, const bf16* src, int parts, int64_t b, int64_t t, int64_t nh, int64_t nkv, int64_t hs,
               cudaStream_t stream) {
  const int64_t n = b * (nh + (parts - 1) * nkv) * t * hs;
  // 16-byte chunks when every head row starts on a 16-byte boundary.
  const bool vec = hs % 8 == 0 && (reinterpret_cast<uintptr_t>(dst) | reinterpret_cast<uintptr_t>(src)) % 16 == 0;
  const int64_t n_vec = vec ? n / 8 : n;
  if (n_vec >= (int64_t{1} << 31)) {
    return Status::InvalidArgument("attention: B*NH*T*hs = " + std::to_string(n) + " is too large for one permute");
  }
  const int bi = static_cast<int>(b), ti = static_cast<int>(t), nhi = static_cast<int>(nh);
  const int nkvi = static_cast<int>(nkv), hsi = static_cast<int>(hs);
  if (vec) {
    PermuteKernel<kToHeads, 8>
        <<<Blocks(n_vec), kThreads, 0, stream>>>(dst, src, static_cast<int>(n_vec), parts, bi, ti, nhi, nkvi, hsi);
  } else {
    PermuteKernel<kToHeads, 1>
        <<<Blocks(n_vec), kThreads, 0, stream>>>(dst, src, static_cast<int>(n_vec), parts, bi, ti, nhi, nkvi, hsi);
  }
  DT_CUDA_CHECK_LAUNCH();
  return Status::OK();
}

unsigned RowBlocks(int64_t rows) { return static_cast<unsigned>((rows + kRowsPerBlock - 1) / kRowsPerBlock); }

}  // namespace

size_t AttentionGemmWorkspaceBytes(int64_t b, int64_t t, int64_t nh, int64_t nkv, int64_t hs, bool backward) {
  size_t bytes = 0;
  Carve(nullptr, b, t, nh, nkv, hs, backward, &bytes);
  return bytes;
}

Status AttentionForwardGemmBf16(const BlasHandles& blas, uint16_t* out, float* lse, const uint16_t* qkv, int64_t b,
                                int64_t t, int64_t nh, int64_t nkv, int64_t hs, void* workspace, cudaStream_t stream) {
  DT_NVTX_RANGE("AttentionForwardGemmBf16");
  DT_RETURN_IF_ERROR(CheckDims(b, t, nh, nkv, hs));
  const Buffers w = Carve(workspace, b, t, nh, nkv, hs, /*backward=*/false, nullptr);
  const int64_t heads = b * nh * t * hs, kv_heads = b * nkv * t * hs, rows = b * nh * t;
  const Gemms g{blas.cublas(), static_cast<int>(t), static_cast<int>(hs), static_cast<int>(nh / nkv),
                static_cast<int>(b * nkv)};
  bf16 *q = w.qkv_h, *k = q + heads, *v = k + kv_heads;
  DT_RETURN_IF_ERROR(Permute<true>(q, reinterpret_cast<const bf16*>(qkv), 3, b, t, nh, nkv, hs, stream));
  DT_RETURN_IF_ERROR(g.RowDots(w.s, q, k, 1.f / sqrtf(static_cast<float>(hs))));
  CausalSoftmaxKernel<<<RowBlocks(rows), kThreads, 0, stream>>>(w.p, lse, w.s, rows, static_cast<int>(t));
  DT_CUDA_CHECK_LAUNCH();
  DT_RETURN_IF_ERROR(g.Mix(w.o_h, w.p, v));
  return Permute<false>(reinterpret_cast<bf16*>(out), w.o_h, 1, b, t, nh, nkv, hs, stream);
}

Status AttentionBackwardGemmBf16(const BlasHandles& blas, uint16_t* dqkv, const uint16_t* dout, const uint16_t* qkv,
                                 const uint16_t* out, const float* lse, int64_t b, int64_t t, int64_t nh, int64_t nkv,
                                 int64_t hs, void* workspace, cudaStream_t stream) {
  DT_NVTX_RANGE("AttentionBackwardGemmBf16");
  DT_RETURN_IF_ERROR(CheckDims(b, t, nh, nkv, hs));
  const Buffers w = Carve(workspace, b, t, nh, nkv, hs, /*backward=*/true, nullptr);
  const int64_t heads = b * nh * t * hs, kv_heads = b * nkv * t * hs, rows = b * nh * t;
  const float scale = 1.f / sqrtf(static_cast<float>(hs));
  const Gemms g{blas.cublas(), static_cast<int>(t), static_cast<int>(hs), static_cast<int>(nh / nkv),
                static_cast<int>(b * nkv)};
  bf16 *q = w.qkv_h, *k = q + heads, *v = k + kv_heads, *dout_h = w.o_h;
  bf16 *dq = w.dqkv_h, *dk = dq + heads, *dv = dk + kv_heads;
  DT_RETURN_IF_ERROR(Permute<true>(q, reinterpret_cast<const bf16*>(qkv), 3, b, t, nh, nkv, hs, stream));
  DT_RETURN_IF_ERROR(Permute<true>(dout_h, reinterpret_cast<const bf16*>(dout), 1, b, t, nh, nkv, hs, stream));
  // Recompute S exactly as the forward did (same GEMM, same inputs), so exp(S - lse) reproduces the forward's P.
  DT_RETURN_IF_ERROR(g.RowDots(w.s, q, k, scale));
  DT_RETURN_IF_ERROR(g.RowDots(w.dp, dout_h, v, 1.f));
  SoftmaxBackwardKernel<<<RowBlocks(rows), kThreads, 0, stream>>>(
      w.p, w.ds, w.s, w.dp, lse, dout_h, reinterpret_cast<const bf16*>(out), rows, static_cast<int>(t),
      static_cast<int>(nh), static_cast<int>(hs), scale);
  DT_CUDA_CHECK_LAUNCH();
  DT_RETURN_IF_ERROR(g.MixTransposed(dv, w.p, dout_h));
  DT_RETURN_IF_ERROR(g.Mix(dq, w.ds, k));
  DT_RETURN_IF_ERROR(g.MixTransposed(dk, w.ds, q));
  return Permute<false>(reinterpret_cast<bf16*>(dqkv), dq, 3, b, t, nh, nkv, hs, stream);
}

}  // namespace dtrain::ops
