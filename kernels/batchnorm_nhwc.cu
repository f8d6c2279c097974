// BatchNorm over channels-last bf16 activations (batchnorm_nhwc.h): statistics, finish and apply kernels.
#include <cuda_bf16.h>

#include <algorithm>
#include <cstdint>

#include "core/cuda_check.h"
#include "core/nvtx.h"
#include "kernels/batchnorm_nhwc.h"
#include "kernels/bf16_vec.cuh"

namespace dtrain::ops {

namespace {

using bf16 = __nv_bfloat16;
using detail::LoadV;
using detail::StoreV;

// A block is kThreads threads seen as rpp rows of bc column slots: slot tx of row ty owns the V channels
// [(blockIdx.y * bc + tx) * V, + V) and walks rows ty, ty + rpp, ... of the block's chunk of `chunk` rows, so a warp
// reads 32 * 16 contiguous bytes (C = 32: 8 rows of 4 slots; C = 128: 2 rows of 16 slots) and each thread loads
// its channels' parameters once. Threads past rpp * bc (bc not a power of 2) idle.
constexpr int kThreads = 256;
constexpr int kMaxV = 8;  // bf16 channels per 128-bit access
// Statistics grids aim at kTargetBlocks blocks (4 per SM of a 132-SM H200) but give every thread at least
// kMinPasses rows: the CNN's 128x28x28x32 map is 523 chunks of 192 rows, 128x7x7x128 is 196 chunks of 32 rows. A
// constant rather than the device's SM count, so the summation order (and so every bit) is the same on any GPU.
constexpr int64_t kTargetBlocks = 528;
constexpr int64_t kMinPasses = 2;
// Finish kernels: one block per 32 channels, warp w adding chunks w, w + kFinishWarps, ... (at most 33 each).
constexpr int kFinishWarps = 16;

struct Tiling {
  int64_t cv = 0;      // column slots per row: C / V
  int bc = 0;          // column slots per block
  int rpp = 0;         // rows per pass: kThreads / bc
  int64_t slabs = 0;   // blocks across the columns: ceil(cv / bc)
  int64_t chunk = 0;   // rows per block, a multiple of rpp
  int64_t chunks = 0;  // blocks along the rows: ceil(M / chunk)
  dim3 grid() const { return dim3(static_cast<unsigned>(chunks), static_cast<unsigned>(slabs)); }
};

Tiling TilingOf(int64_t m, int64_t c, int v) {
  Tiling t;
  t.cv = c / v;
  t.bc = static_cast<int>(std::min<int64_t>(t.cv, kThreads));
  t.rpp = kThreads / t.bc;
  t.slabs = (t.cv + t.bc - 1) / t.bc;
  const int64_t target_chunks = std::max<int64_t>(1, kTargetBlocks / t.slabs);
  int64_t rows = std::max<int64_t>(t.rpp * kMinPasses, (m + target_chunks - 1) / target_chunks);
  rows = (rows + t.rpp - 1) / t.rpp * t.rpp;
  t.chunk = rows;
  t.chunks = (m + rows - 1) / rows;
  return t;
}

// 8 channels a thread with 128-bit accesses when C % 8 == 0 and every [M, C] pointer is 16-byte aligned, else 1.
int VecOf(int64_t c, std::initializer_list<const void*> ptrs) { return detail::VecWidth<bf16>(c, ptrs); }

// This thread's slot: its row in the block (ty), its first channel (ch0), and whether it has work.
struct Slot {
  int tx, ty;
  int64_t ch0;
  bool active;
};
template <int V>
__device__ __forceinline__ Slot SlotOf(int64_t c, int bc, int rpp) {
  Slot s;
  s.tx = threadIdx.x % bc;
  s.ty = threadIdx.x / bc;
  s.ch0 = (blockIdx.y * int64_t{bc} + s.tx) * V;
  s.active = s.ty < rpp && s.ch0 < c;
  return s;
}

// Calls fn(row) for this thread's rows of chunk blockIdx.x, with up to 4 rows' loads in flight.
template <typename Fn>
__device__ __forceinline__ void ForRows(const Slot& s, int64_t m, int rpp, int64_t chunk, Fn fn) {
  const int64_t r1 = min(m, (blockIdx.x + int64_t{1}) * chunk);
#pragma unroll 4
  for (int64_t r = blockIdx.x * chunk + s.ty; r < r1; r += rpp) fn(r);
}

// Adds the rpp rows of per-thread sums (a[V], b[V] of slot (tx, ty)) per column with a fixed tree, then writes the
// block's column totals to part[(blockIdx.x * 2 + {0, 1}) * c + channel]. Every thread of the block must call it.
template <int V>
__device__ void BlockColumnSums(double* part, const double (&a)[V], const double (&b)[V], const Slot& s, int64_t c,
                                int bc, int rpp) {
  __shared__ double red[2 * kThreads * V];  // [2][rpp][bc * V]; 32 KB at V = 8
  const int w = bc * V;
  if (s.ty < rpp) {
#pragma unroll
    for (int i = 0; i < V; ++i) {
      red[s.ty * w + s.tx * V + i] = a[i];
      red[(rpp + s.ty) * w + s.tx * V + i] = b[i];
    }
  }
  __syncthreads();
  int half = 1;
  while (half < rpp) half *= 2;
  for (half /= 2; half >= 1; half /= 2) {  // rows [0, half) += rows [half, rpp)
    const int n = half * w;
    for (int idx = threadIdx.x; idx < 2 * n; idx += kThreads) {
      const int q = idx / n, rem = idx - q * n, row = rem / w, col = rem - row * w;
      if (row + half < rpp) red[(q * rpp + row) * w + col] += red[(q * rpp + row + half) * w + col];
    }
    __syncthreads();
  }
  for (int idx = threadIdx.x; idx < 2 * w; idx += kThreads) {
    const int q = idx / w, col = idx - q * w;
    const int64_t ch = blockIdx.y * int64_t{w} + col;
    if (ch < c) part[(blockIdx.x * int64_t{2} + q) * c + ch] = red[q * rpp * w + col];
  }
}

// Forward statistics: per (chunk, channel) sum of x and of x^2, in double (x^2 of a bf16 is exact).
template <int V>
__global__ void __launch_bounds__(kThreads)
    NhwcStatsKernel(double* part, const bf16* x, int64_t m, int64_t c, int bc, int rpp, int64_t chunk) {
  const Slot s = SlotOf<V>(c, bc, rpp);
  double a[V] = {}, b[V] = {};
  if (s.active) {
    ForRows(s, m, rpp, chunk, [&](int64_t r) {
      float f[V];
      LoadV<V>(x + r * c + s.ch0, f);
#pragma unroll
      for (int i = 0; i < V; ++i) {
        a[i] += f[i];
        b[i] += static_cast<double>(f[i]) * f[i];
      }
    });
  }
  BlockColumnSums<V>(part, a, b, s, c, bc, rpp);
}

// Channel blockIdx.x * 32 + lane's totals over `chunks` chunks of part, added in a fixed order (per warp in chunk
// order, then the warps in order); valid in warp 0 only. Every thread of the block must call it.
__device__ double2 ChunkTotals(const double* part, int64_t c, int64_t chunks) {
  __shared__ double red[2][kFinishWarps][32];
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int64_t ch = blockIdx.x * int64_t{32} + lane;
  double a = 0, b = 0;
  if (ch < c) {
    for (int64_t k = warp; k < chunks; k += kFinishWarps) {
      a += part[(2 * k) * c + ch];
      b += part[(2 * k + 1) * c + ch];
    }
  }
  red[0][warp][lane] = a;
  red[1][warp][lane] = b;
  __syncthreads();
  a = 0, b = 0;
  if (warp == 0) {
    for (int i = 0; i < kFinishWarps; ++i) {
      a += red[0][i][lane];
      b += red[1][i][lane];
    }
  }
  return make_double2(a, b);
}

__global__ void __launch_bounds__(kFinishWarps * 32)
    NhwcStatsFinishKernel(float* save_mean, float* save_inv_std, float* running_mean, float* running_var,
                          const double* part, int64_t c, int64_t m, int64_t chunks, float momentum, float eps) {
  const double2 t = ChunkTotals(part, c, chunks);
  const int64_t ch = blockIdx.x * int64_t{32} + threadIdx.x;
  if (threadIdx.x >= 32 || ch >= c) return;
  const double md = static_cast<double>(m);
  const double mean = t.x / md, var = fmax(t.y / md - mean * mean, 0.0);
  save_mean[ch] = static_cast<float>(mean);
  save_inv_std[ch] = static_cast<float>(1.0 / sqrt(var + static_cast<double>(eps)));
  const double unbiased = m > 1 ? var * md / (md - 1) : var;
  const double keep = 1.0 - static_cast<double>(momentum);
  running_mean[ch] = static_cast<float>(keep * running_mean[ch] + momentum * mean);
  running_var[ch] = static_cast<float>(keep * running_var[ch] + momentum * unbiased);
}

// y = act((x - mean) * scale + beta + residual), rounded to bf16 once. Training: mean = save_mean, scale = gamma *
// save_inv_std (fp32, as batchnorm.cu). Eval (kEval): mean = running_mean, scale = gamma / sqrt(running_var + eps)
// (in double, as the CPU reference), with `stat` = running_var.
template <int V, bool kEval>
__global__ void __launch_bounds__(kThreads)
    NhwcApplyKernel(bf16* y, const bf16* x, const bf16* residual, const float* gamma, const float* beta,
                    const float* mean_in, const float* stat, int64_t m, int64_t c, int bc, int rpp, int64_t chunk,
                    float eps, bool relu) {
  const Slot s = SlotOf<V>(c, bc, rpp);
  if (!s.active) return;
  float mean[V], scale[V], shift[V];
#pragma unroll
  for (int i = 0; i < V; ++i) {
    const int64_t ch = s.ch0 + i;
    mean[i] = mean_in[ch];
    scale[i] = kEval ? static_cast<float>(gamma[ch] / sqrt(static_cast<double>(stat[ch]) + eps)) : gamma[ch] * stat[ch];
    shift[i] = beta[ch];
  }
  ForRows(s, m, rpp, chunk, [&](int64_t r) {
    const int64_t k = r * c + s.ch0;
    float f[V];
    LoadV<V>(x + k, f);
#pragma unroll
    for (int i = 0; i < V; ++i) f[i] = (f[i] - mean[i]) * scale[i] + shift[i];
    if (residual != nullptr) {
      float res[V];
      LoadV<V>(residual + k, res);
#pragma unroll
      for (int i = 0; i < V; ++i) f[i] += res[i];
    }
    if (relu) {
#pragma unroll
      for (int i = 0; i < V; ++i) f[i] = f[i] < 0.f ? 0.f : f[i];  // NaN stays NaN, like the CPU reference
    }
    StoreV<V>(y + k, f);
  });
}

// g = dout masked by out > 0 (when out is given).
template <int V>
__device__ __forceinline__ void LoadGrad(const bf16* dout, const bf16* out, int64_t k, float (&g)[V]) {
  LoadV<V>(dout + k, g);
  if (out != nullptr) {
    float o[V];
    LoadV<V>(out + k, o);
#pragma unroll
    for (int i = 0; i < V; ++i) g[i] = o[i] > 0.f ? g[i] : 0.f;
  }
}

// Backward statistics: per (chunk, channel) sum of g and of g * x in double (exact products of bf16 values), and
// dg = g when dg is given (exact: a masked copy). sum(g * xhat) = (sum(g * x) - mean * sum(g)) * inv_std follows in
// the finish kernel, in double.
template <int V>
__global__ void __launch_bounds__(kThreads)
    NhwcGradStatsKernel(double* part, bf16* dg, const bf16* x, const bf16* dout, const bf16* out, int64_t m, int64_t c,
                        int bc, int rpp, int64_t chunk) {
  const Slot s = SlotOf<V>(c, bc, rpp);
  double a[V] = {}, b[V] = {};
  if (s.active) {
    ForRows(s, m, rpp, chunk, [&](int64_t r) {
      const int64_t k = r * c + s.ch0;
      float g[V], xv[V];
      LoadGrad<V>(dout, out, k, g);
      LoadV<V>(x + k, xv);
      if (dg != nullptr) StoreV<V>(dg + k, g);
#pragma unroll
      for (int i = 0; i < V; ++i) {
        a[i] += g[i];
        b[i] += static_cast<double>(g[i]) * xv[i];
      }
    });
  }
  BlockColumnSums<V>(part, a, b, s, c, bc, rpp);
}

// dbeta, dgamma (set or added), and per channel the dx coefficients coef[{0, 1, 2} * c + ch] = (A, B, D) of
// dx = A * (g - B) - D * (x - mean):  A = gamma * inv_std, B = sum(g) / M, D = A * inv_std * sum(g * xhat) / M.
__global__ void __launch_bounds__(kFinishWarps * 32)
    NhwcGradFinishKernel(float* dgamma, float* dbeta, float* coef, const double* part, const float* gamma,
                         const float* save_mean, const float* save_inv_std, int64_t c, int64_t m, int64_t chunks,
                         bool accumulate_param_grads) {
  const double2 t = ChunkTotals(part, c, chunks);
  const int64_t ch = blockIdx.x * int64_t{32} + threadIdx.x;
  if (threadIdx.x >= 32 || ch >= c) return;
  const double mean = save_mean[ch], inv_std = save_inv_std[ch];
  const double sum_g = t.x, sum_g_xhat = (t.y - mean * t.x) * inv_std;
  dbeta[ch] = static_cast<float>(accumulate_param_grads ? dbeta[ch] + sum_g : sum_g);
  dgamma[ch] = static_cast<float>(accumulate_param_grads ? dgamma[ch] + sum_g_xhat : sum_g_xhat);
  const double md = static_cast<double>(m), a = static_cast<double>(gamma[ch]) * inv_std;
  coef[ch] = static_cast<float>(a);
  coef[c + ch] = static_cast<float>(sum_g / md);
  coef[2 * c + ch] = static_cast<float>(a * inv_std * sum_g_xhat / md);
}

// dx = A * (g - B) - D * (x - mean), rounded to bf16 once; g from `grad` masked by `out` (when given).
template <int V>
__global__ void __launch_bounds__(kThreads)
    NhwcGradApplyKernel(bf16* dx, const bf16* grad, const bf16* out, const bf16* x, const float* save_mean,
                        const float* coef, int64_t m, int64_t c, int bc, int rpp, int64_t chunk) {
  const Slot s = SlotOf<V>(c, bc, rpp);
  if (!s.active) return;
  float mean[V], ca[V], cb[V], cd[V];
#pragma unroll
  for (int i = 0; i < V; ++i) {
    const int64_t ch = s.ch0 + i;
    mean[i] = save_mean[ch];
    ca[i] = coef[ch];
    cb[i] = coef[c + ch];
    cd[i] = coef[2 * c + ch];
  }
  ForRows(s, m, rpp, chunk, [&](int64_t r) {
    const int64_t k = r * c + s.ch0;
    float g[V], xv[V];
    LoadGrad<V>(grad, out, k, g);
    LoadV<V>(x + k, xv);
#pragma unroll
    for (int i = 0; i < V; ++i) g[i] = ca[i] * (g[i] - cb[i]) - cd[i] * (xv[i] - mean[i]);
    StoreV<V>(dx + k, g);
  });
}

unsigned FinishBlocks(int64_t c) { return static_cast<unsigned>((c + 31) / 32); }

Status CheckGrid(const char* op, const Tiling& t, int64_t c) {
  DT_CHECK_ARG(t.slabs <= 65535, op << ": " << c << " channels exceed the CUDA grid");
  return Status::OK();
}

}  // namespace

int64_t BatchNormNhwcScratchDoubles(int64_t m, int64_t c) {
  if (m <= 0 || c <= 0) return 1;
  // The chunk count depends on the vector width, which depends on pointer alignment: size for both. Partial sums
  // [chunks][2][c], then the backward's dx coefficients (3 * c floats).
  int64_t chunks = TilingOf(m, c, 1).chunks;
  if (c % kMaxV == 0) chunks = std::max(chunks, TilingOf(m, c, kMaxV).chunks);
  return chunks * 2 * c + 2 * c;
}

Status BatchNormNhwcForwardTrainingCudaBf16(uint16_t* y, float* save_mean, float* save_inv_std, float* running_mean,
                                            float* running_var, const uint16_t* x, const uint16_t* residual,
                                            const float* gamma, const float* beta, int64_t m, int64_t c, float momentum,
                                            float eps, bool relu, double* scratch, cudaStream_t stream) {
  DT_NVTX_FN();
  if (m <= 0 || c <= 0) return Status::OK();
  const int v = VecOf(c, {y, x, residual});
  const Tiling t = TilingOf(m, c, v);
  DT_RETURN_IF_ERROR(CheckGrid("BatchNormNhwcForwardTraining", t, c));
  bf16* yb = detail::AsBf16(y);
  const bf16 *xb = detail::AsBf16(x), *rb = detail::AsBf16(residual);
  if (v == kMaxV) {
    NhwcStatsKernel<kMaxV><<<t.grid(), kThreads, 0, stream>>>(scratch, xb, m, c, t.bc, t.rpp, t.chunk);
  } else {
    NhwcStatsKernel<1><<<t.grid(), kThreads, 0, stream>>>(scratch, xb, m, c, t.bc, t.rpp, t.chunk);
  }
  DT_CUDA_CHECK_LAUNCH();
  NhwcStatsFinishKernel<<<FinishBlocks(c), kFinishWarps * 32, 0, stream>>>(
      save_mean, save_inv_std, running_mean, running_var, scratch, c, m, t.chunks, momentum, eps);
  DT_CUDA_CHECK_LAUNCH();
  if (v == kMaxV) {
    NhwcApplyKernel<kMaxV, false><<<t.grid(), kThreads, 0, stream>>>(yb, xb, rb, gamma, beta, save_mean, save_inv_std,
                                                                     m, c, t.bc, t.rpp, t.chunk, eps, relu);
  } else {
    NhwcApplyKernel<1, false><<<t.grid(), kThreads, 0, stream>>>(yb, xb, rb, gamma, beta, save_mean, save_inv_std, m, c,
                                                                 t.bc, t.rpp, t.chunk, eps, relu);
  }
  DT_CUDA_CHECK_LAUNCH();
  return Status::OK();
}

Status BatchNormNhwcForwardEvalCudaBf16(uint16_t* y, const uint16_t* x, const uint16_t* residual, const float* gamma,
                                        const float* beta, const float* running_mean, const float* running_var,
                                        int64_t m, int64_t c, float eps, bool relu, cudaStream_t stream) {
  DT_NVTX_FN();
  if (m <= 0 || c <= 0) return Status::OK();
  const int v = VecOf(c, {y, x, residual});
  const Tiling t = TilingOf(m, c, v);
  DT_RETURN_IF_ERROR(CheckGrid("BatchNormNhwcForwardEval", t, c));
  bf16* yb = detail::AsBf16(y);
  const bf16 *xb = detail::AsBf16(x), *rb = detail::AsBf16(residual);
  if (v == kMaxV) {
    NhwcApplyKernel<kMaxV, true><<<t.grid(), kThreads, 0, stream>>>(yb, xb, rb, gamma, beta, running_mean, running_var,
                                                                    m, c, t.bc, t.rpp, t.chunk, eps, relu);
  } else {
    NhwcApplyKernel<1, true><<<t.grid(), kThreads, 0, stream>>>(yb, xb, rb, gamma, beta, running_mean, running_var, m,
                                                                c, t.bc, t.rpp, t.chunk, eps, relu);
  }
  DT_CUDA_CHECK_LAUNCH();
  return Status::OK();
}

Status BatchNormNhwcBackwardCudaBf16(uint16_t* dx, uint16_t* dg, float* dgamma, float* dbeta, const uint16_t* x,
                                     const uint16_t* dout, const uint16_t* out, const float* gamma,
                                     const float* save_mean, const float* save_inv_std, int64_t m, int64_t c, bool relu,
                                     bool accumulate_param_grads, double* scratch, cudaStream_t stream) {
  DT_NVTX_FN();
  if (m <= 0 || c <= 0) return Status::OK();
  DT_CHECK_ARG(!relu || out != nullptr, "BatchNormNhwcBackward: relu needs the forward's output");
  const bf16* mask = relu ? detail::AsBf16(out) : nullptr;
  const int v = VecOf(c, {dx, dg, x, dout, mask});
  const Tiling t = TilingOf(m, c, v);
  DT_RETURN_IF_ERROR(CheckGrid("BatchNormNhwcBackward", t, c));
  float* coef = reinterpret_cast<float*>(scratch + t.chunks * 2 * c);
  bf16 *dxb = detail::AsBf16(dx), *dgb = detail::AsBf16(dg);
  const bf16 *xb = detail::AsBf16(x), *doutb = detail::AsBf16(dout);
  if (v == kMaxV) {
    NhwcGradStatsKernel<kMaxV>
        <<<t.grid(), kThreads, 0, stream>>>(scratch, dgb, xb, doutb, mask, m, c, t.bc, t.rpp, t.chunk);
  } else {
    NhwcGradStatsKernel<1>
        <<<t.grid(), kThreads, 0, stream>>>(scratch, dgb, xb, doutb, mask, m, c, t.bc, t.rpp, t.chunk);
  }
  DT_CUDA_CHECK_LAUNCH();
  NhwcGradFinishKernel<<<FinishBlocks(c), kFinishWarps * 32, 0, stream>>>(
      dgamma, dbeta, coef, scratch, gamma, save_mean, save_inv_std, c, m, t.chunks, accumulate_param_grads);
  DT_CUDA_CHECK_LAUNCH();
  // With dg written, the dx pass reads the masked gradient back (one stream instead of dout and out).
  const bf16* grad = dg != nullptr ? dgb : doutb;
  const bf16* grad_mask = dg != nullptr ? nullptr : mask;
  if (v == kMaxV) {
    NhwcGradApplyKernel<kMaxV>
        <<<t.grid(), kThreads, 0, stream>>>(dxb, grad, grad_mask, xb, save_mean, coef, m, c, t.bc, t.rpp, t.chunk);
  } else {
    NhwcGradApplyKernel<1>
        <<<t.grid(), kThreads, 0, stream>>>(dxb, grad, grad_mask, xb, save_mean, coef, m, c, t.bc, t.rpp, t.chunk);
  }
  DT_CUDA_CHECK_LAUNCH();
  return Status::OK();
}

}  // namespace dtrain::ops
