#include <algorithm>
#include <cstdint>

#include "core/cuda_check.h"
#include "core/nvtx.h"
#include "kernels/batchnorm.h"

namespace dtrain::ops {

namespace {

// The training forward and the backward each run in three kernels: per-chunk partial sums over a (chunk, channel)
// grid, so every SM has work even for the 32 channels of a small CNN (one block per channel left most of an H200 idle:
// 98 us per 128x32x28x28 forward); a per-channel finish that adds the chunks in order (bitwise reproducible, no
// atomics); and an element-wise pass over the same grid. Sums run in double.
constexpr int kThreads = 256;
constexpr int kWarps = kThreads / 32;
constexpr int64_t kChunkElems = 4096;  // per block and channel: 16 elements a thread
constexpr int64_t kMaxChunks = 256;

// Sum of `v` over the block, returned to every thread. Fixed reduction tree: bitwise reproducible.
// `scratch` holds kWarps doubles; the trailing barrier lets the caller reuse it for the next sum.
__device__ double BlockSum(double v, double* scratch) {
  for (int off = 16; off > 0; off >>= 1) v += __shfl_down_sync(0xffffffffu, v, off);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  double total = 0;
  for (int w = 0; w < kWarps; ++w) total += scratch[w];  // every thread, same order
  __syncthreads();
  return total;
}

// Calls fn(k) for the flat NCHW index k of every element of channel blockIdx.y in chunk blockIdx.x (chunks of
// `chunk` elements of the channel's n * hw, in (image, pixel) order, so a warp reads contiguous pixels).
template <typename Fn>
__device__ __forceinline__ void ForChunk(int64_t c, int64_t hw, int64_t m, int64_t chunk, Fn fn) {
  const int64_t ch = blockIdx.y, j0 = blockIdx.x * chunk, j1 = min(m, j0 + chunk);
  int64_t j = j0 + threadIdx.x;
  if (j >= j1) return;
  int64_t i = j / hw, p = j - i * hw;  // one division; then walked forward
  for (; j < j1; j += kThreads) {
    fn((i * c + ch) * hw + p);
    p += kThreads;
    while (p >= hw) {
      p -= hw;
      ++i;
    }
  }
}

// part[(ch * chunks + chunk) * 2 + {0, 1}] = the chunk's (sum of a, sum of b) for (a, b) = terms(k).
template <typename Terms>
__device__ void ChunkSums(double* part, int64_t c, int64_t hw, int64_t m, int64_t chunk, Terms terms) {
  __shared__ double scratch[kWarps];
  double sa = 0, sb = 0;
  ForChunk(c, hw, m, chunk, [&](int64_t k) {
    const double2 t = terms(k);
    sa += t.x;
    sb += t.y;
  });
  sa = BlockSum(sa, scratch);
  sb = BlockSum(sb, scratch);
  if (threadIdx.x == 0) {
    double* out = part + (blockIdx.y * int64_t{gridDim.x} + blockIdx.x) * 2;
    out[0] = sa;
    out[1] = sb;
  }
}

// Channel ch's totals over its chunks, added in chunk order.
__device__ double2 ChannelTotals(const double* part, int64_t ch, int64_t chunks) {
  double a = 0, b = 0;
  for (int64_t s = 0; s < chunks; ++s) {
    a += part[(ch * chunks + s) * 2];
    b += part[(ch * chunks + s) * 2 + 1];
  }
  return make_double2(a, b);
}

__global__ void BnStatsKernel(double* part, const float* x, int64_t c, int64_t hw, int64_t m, int64_t chunk) {
  ChunkSums(part, c, hw, m, chunk, [&](int64_t k) {
    const double v = x[k];
    return make_double2(v, v * v);
  });
}

__global__ void BnStatsFinishKernel(float* save_mean, float* save_inv_std, float* running_mean, float* running_var,
                                    const double* part, int64_t c, int64_t m, int64_t chunks, float momentum,
                                    float eps) {
  const int64_t ch = blockIdx.x * int64_t{blockDim.x} + threadIdx.x;
  if (ch >= c) return;
  const double2 t = ChannelTotals(part, ch, chunks);
  const double mean = t.x / m, var = fmax(t.y / m - mean * mean, 0.0);
  save_mean[ch] = static_cast<float>(mean);
  save_inv_std[ch] = static_cast<float>(1.0 / sqrt(var + static_cast<double>(eps)));
  const double unbiased = m > 1 ? var * m / (m - 1) : var;
  const double keep = 1.0 - static_cast<double>(momentum);
  running_mean[ch] = static_cast<float>(keep * running_mean[ch] + momentum * mean);
  running_var[ch] = static_cast<float>(keep * running_var[ch] + momentum * unbiased);
}

__global__ void BnApplyKernel(float* y, const float* x, const float* gamma, const float* beta, const float* save_mean,
                              const float* save_inv_std, int64_t c, int64_t hw, int64_t m, int64_t chunk,
                              bool accumulate) {
  const int64_t ch = blockIdx.y;
  const float mean = save_mean[ch], scale = gamma[ch] * save_inv_std[ch], shift = beta[ch];
  ForChunk(c, hw, m, chunk, [&](int64_t k) {
    const float out = (x[k] - mean) * scale + shift;
    y[k] = accumulate ? y[k] + out : out;
  });
}

__global__ void BnForwardEvalKernel(float* y, const float* x, const float* gamma, const float* beta,
                                    const float* running_mean, const float* running_var, int64_t total, int64_t c,
                                    int64_t hw, float eps, bool accumulate) {
  for (int64_t k = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; k < total; k += int64_t{gridDim.x} * blockDim.x) {
    const int64_t ch = k / hw % c;
    const float scale = static_cast<float>(gamma[ch] / sqrt(static_cast<double>(running_var[ch]) + eps));
    const float out = (x[k] - running_mean[ch]) * scale + beta[ch];
    y[k] = accumulate ? y[k] + out : out;
  }
}

__global__ void BnGradStatsKernel(double* part, const float* dy, const float* x, const float* save_mean,
                                  const float* save_inv_std, int64_t c, int64_t hw, int64_t m, int64_t chunk) {
  const double mean = save_mean[blockIdx.y], inv_std = save_inv_std[blockIdx.y];
  ChunkSums(part, c, hw, m, chunk, [&](int64_t k) {
    const double g = dy[k];
    return make_double2(g, g * ((x[k] - mean) * inv_std));
  });
}

// dbeta/dgamma (set or added), and per channel (sum(dy) / M, sum(dy * xhat) / M) into means[2 * ch + {0, 1}].
__global__ void BnGradFinishKernel(float* dgamma, float* dbeta, double* means, const double* part, int64_t c, int64_t m,
                                   int64_t chunks, bool accumulate_param_grads) {
  const int64_t ch = blockIdx.x * int64_t{blockDim.x} + threadIdx.x;
  if (ch >= c) return;
  const double2 t = ChannelTotals(part, ch, chunks);
  dbeta[ch] = static_cast<float>(accumulate_param_grads ? dbeta[ch] + t.x : t.x);
  dgamma[ch] = static_cast<float>(accumulate_param_grads ? dgamma[ch] + t.y : t.y);
  means[2 * ch] = t.x / m;
  means[2 * ch + 1] = t.y / m;
}

__global__ void BnGradApplyKernel(float* dx, const float* dy, const float* x, const float* gamma,
                                  const float* save_mean, const float* save_inv_std, const double* means, int64_t c,
                                  int64_t hw, int64_t m, int64_t chunk) {
  const int64_t ch = blockIdx.y;
  const double mean = save_mean[ch], inv_std = save_inv_std[ch], k_scale = gamma[ch] * inv_std;
  const double mean_dy = means[2 * ch], mean_dy_xhat = means[2 * ch + 1];
  ForChunk(c, hw, m, chunk, [&](int64_t k) {
    const double xhat = (x[k] - mean) * inv_std;
    dx[k] = static_cast<float>(k_scale * (dy[k] - mean_dy - xhat * mean_dy_xhat));
  });
}

// The (chunk, channel) grid of the three-kernel passes and its chunk length.
struct ChunkGrid {
  int64_t m, chunks, chunk;
  dim3 grid;
};
ChunkGrid GridOf(const BatchNormDims& d) {
  ChunkGrid g;
  g.m = d.n * d.hw;
  g.chunks = std::clamp<int64_t>((g.m + kChunkElems - 1) / kChunkElems, 1, kMaxChunks);
  g.chunk = (g.m + g.chunks - 1) / g.chunks;
  g.grid = dim3(static_cast<unsigned>(g.chunks), static_cast<unsigned>(d.c));
  return g;
}

unsigned FinishBlocks(int64_t c) { return static_cast<unsigned>((c + 63) / 64); }

}  // namespace

int64_t BatchNormScratchDoubles(const BatchNormDims& d) { return (GridOf(d).chunks + 1) * 2 * d.c; }

Status BatchNormForwardTrainingCuda(float* y, float* save_mean, float* save_inv_std, float* running_mean,
                                    float* running_var, const float* x, const float* gamma, const float* beta,
                                    const BatchNormDims& d, float momentum, float eps, bool accumulate, double* scratch,
                                    cudaStream_t stream) {
  DT_NVTX_FN();
  if (d.c == 0 || d.n * d.hw == 0) return Status::OK();
  DT_CHECK_ARG(d.c <= 65535, "BatchNorm: " << d.c << " channels exceed the CUDA grid's 65535");
  const ChunkGrid g = GridOf(d);
  BnStatsKernel<<<g.grid, kThreads, 0, stream>>>(scratch, x, d.c, d.hw, g.m, g.chunk);
  DT_CUDA_CHECK_LAUNCH();
  BnStatsFinishKernel<<<FinishBlocks(d.c), 64, 0, stream>>>(save_mean, save_inv_std, running_mean, running_var, scratch,
                                                            d.c, g.m, g.chunks, momentum, eps);
  DT_CUDA_CHECK_LAUNCH();
  BnApplyKernel<<<g.grid, kThreads, 0, stream>>>(y, x, gamma, beta, save_mean, save_inv_std, d.c, d.hw, g.m, g.chunk,
                                                 accumulate);
  DT_CUDA_CHECK_LAUNCH();
  return Status::OK();
}

Status BatchNormForwardEvalCuda(float* y, const float* x, const float* gamma, const float* beta,
                                const float* running_mean, const float* running_var, const BatchNormDims& d, float eps,
                                bool accumulate, cudaStream_t stream) {
  DT_NVTX_FN();
  const int64_t total = d.n * d.c * d.hw;
  if (total == 0) return Status::OK();
  const int grid = static_cast<int>(std::min<int64_t>((total + 255) / 256, 65536));
  BnForwardEvalKernel<<<grid, 256, 0, stream>>>(y, x, gamma, beta, running_mean, running_var, total, d.c, d.hw, eps,
                                                accumulate);
  DT_CUDA_CHECK_LAUNCH();
  return Status::OK();
}

Status BatchNormBackwardCuda(float* dx, float* dgamma, float* dbeta, const float* dy, const float* x,
                             const float* gamma, const float* save_mean, const float* save_inv_std,
                             const BatchNormDims& d, bool accumulate_param_grads, double* scratch,
                             cudaStream_t stream) {
  DT_NVTX_FN();
  if (d.c == 0) return Status::OK();
  DT_CHECK_ARG(d.c <= 65535, "BatchNorm: " << d.c << " channels exceed the CUDA grid's 65535");
  const ChunkGrid g = GridOf(d);
  double* means = scratch + g.chunks * 2 * d.c;
  if (g.m > 0) {
    BnGradStatsKernel<<<g.grid, kThreads, 0, stream>>>(scratch, dy, x, save_mean, save_inv_std, d.c, d.hw, g.m,
                                                       g.chunk);
    DT_CUDA_CHECK_LAUNCH();
  }
  BnGradFinishKernel<<<FinishBlocks(d.c), 64, 0, stream>>>(dgamma, dbeta, means, scratch, d.c, g.m,
                                                           g.m > 0 ? g.chunks : 0, accumulate_param_grads);
  DT_CUDA_CHECK_LAUNCH();
  if (g.m > 0) {
    BnGradApplyKernel<<<g.grid, kThreads, 0, stream>>>(dx, dy, x, gamma, save_mean, save_inv_std, means, d.c, d.hw, g.m,
                                                       g.chunk);
    DT_CUDA_CHECK_LAUNCH();
  }
  return Status::OK();
}

}  // namespace dtrain::ops
