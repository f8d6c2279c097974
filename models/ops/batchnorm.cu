#include <algorithm>
#include <cstdint>

#include "core/cuda_check.h"
#include "core/nvtx.h"
#include "models/ops/batchnorm.h"

namespace dtrain::ops {

namespace {

// One block per channel. Thread t visits the channel's elements t, t + kThreads, ... of the flattened
// (image, pixel) index, so every warp reads contiguous pixels (coalesced) even for 7x7 maps.
constexpr int kThreads = 512;
constexpr int kWarps = kThreads / 32;

__device__ __forceinline__ int64_t ChannelIndex(int64_t j, int64_t ch, int64_t c, int64_t hw) {
  return (j / hw * c + ch) * hw + j % hw;
}

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

__global__ void BnForwardTrainingKernel(float* y, float* save_mean, float* save_inv_std, float* running_mean,
                                        float* running_var, const float* x, const float* gamma, const float* beta,
                                        int64_t n, int64_t c, int64_t hw, float momentum, float eps, bool accumulate) {
  __shared__ double scratch[kWarps];
  const int64_t ch = blockIdx.x, m = n * hw;
  double s = 0;
  for (int64_t j = threadIdx.x; j < m; j += kThreads) s += x[ChannelIndex(j, ch, c, hw)];
  const double mean = BlockSum(s, scratch) / static_cast<double>(m);
  double sq = 0;
  for (int64_t j = threadIdx.x; j < m; j += kThreads) {
    const double dv = x[ChannelIndex(j, ch, c, hw)] - mean;
    sq += dv * dv;
  }
  const double var = BlockSum(sq, scratch) / static_cast<double>(m);
  const double inv_std = 1.0 / sqrt(var + static_cast<double>(eps));
  if (threadIdx.x == 0) {
    save_mean[ch] = static_cast<float>(mean);
    save_inv_std[ch] = static_cast<float>(inv_std);
    const double unbiased = m > 1 ? var * m / (m - 1) : var;
    const double keep = 1.0 - static_cast<double>(momentum);
    running_mean[ch] = static_cast<float>(keep * running_mean[ch] + momentum * mean);
    running_var[ch] = static_cast<float>(keep * running_var[ch] + momentum * unbiased);
  }
  const float mean_f = static_cast<float>(mean), scale = gamma[ch] * static_cast<float>(inv_std), shift = beta[ch];
  for (int64_t j = threadIdx.x; j < m; j += kThreads) {
    const int64_t k = ChannelIndex(j, ch, c, hw);
    const float out = (x[k] - mean_f) * scale + shift;
    y[k] = accumulate ? y[k] + out : out;
  }
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

__global__ void BnBackwardKernel(float* dx, float* dgamma, float* dbeta, const float* dy, const float* x,
                                 const float* gamma, const float* save_mean, const float* save_inv_std, int64_t n,
                                 int64_t c, int64_t hw, bool accumulate_param_grads) {
  __shared__ double scratch[kWarps];
  const int64_t ch = blockIdx.x, m = n * hw;
  const double mean = save_mean[ch], inv_std = save_inv_std[ch];
  double s_dy = 0, s_dy_xhat = 0;
  for (int64_t j = threadIdx.x; j < m; j += kThreads) {
    const int64_t k = ChannelIndex(j, ch, c, hw);
    s_dy += dy[k];
    s_dy_xhat += dy[k] * ((x[k] - mean) * inv_std);
  }
  const double sum_dy = BlockSum(s_dy, scratch);
  const double sum_dy_xhat = BlockSum(s_dy_xhat, scratch);
  if (threadIdx.x == 0) {
    dbeta[ch] = static_cast<float>(accumulate_param_grads ? dbeta[ch] + sum_dy : sum_dy);
    dgamma[ch] = static_cast<float>(accumulate_param_grads ? dgamma[ch] + sum_dy_xhat : sum_dy_xhat);
  }
  const double k_scale = gamma[ch] * inv_std, mean_dy = sum_dy / m, mean_dy_xhat = sum_dy_xhat / m;
  for (int64_t j = threadIdx.x; j < m; j += kThreads) {
    const int64_t k = ChannelIndex(j, ch, c, hw);
    const double xhat = (x[k] - mean) * inv_std;
    dx[k] = static_cast<float>(k_scale * (dy[k] - mean_dy - xhat * mean_dy_xhat));
  }
}

}  // namespace

Status BatchNormForwardTrainingCuda(float* y, float* save_mean, float* save_inv_std, float* running_mean,
                                    float* running_var, const float* x, const float* gamma, const float* beta,
                                    const BatchNormDims& d, float momentum, float eps, bool accumulate,
                                    cudaStream_t stream) {
  DT_NVTX_FN();
  if (d.c == 0) return Status::OK();
  BnForwardTrainingKernel<<<static_cast<unsigned>(d.c), kThreads, 0, stream>>>(
      y, save_mean, save_inv_std, running_mean, running_var, x, gamma, beta, d.n, d.c, d.hw, momentum, eps, accumulate);
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
                             const BatchNormDims& d, bool accumulate_param_grads, cudaStream_t stream) {
  DT_NVTX_FN();
  if (d.c == 0) return Status::OK();
  BnBackwardKernel<<<static_cast<unsigned>(d.c), kThreads, 0, stream>>>(
      dx, dgamma, dbeta, dy, x, gamma, save_mean, save_inv_std, d.n, d.c, d.hw, accumulate_param_grads);
  DT_CUDA_CHECK_LAUNCH();
  return Status::OK();
}

}  // namespace dtrain::ops
