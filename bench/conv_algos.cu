// conv_algos: what cuDNN offers for the Fashion-MNIST CNN's convolutions (configs/fashion_mnist_cnn.yaml) in three
// modes, and what each direction costs with the algorithm dtrain would pick (the heuristics' first deterministic one
// that runs, as kernels/conv2d.cu chooses):
//
//   f32 NCHW FMA    (dtrain's fp32 path: exact fp32, no tensor cores)
//   f32 NCHW TF32   (CUDNN_DEFAULT_MATH: what PyTorch runs for fp32 convolutions by default)
//   bf16 NHWC       (CUDNN_TENSOR_OP_MATH, fp32 accumulation: dtrain's bf16 channels-last path)
//
//   conv_algos [batch=128] [reps=50]
//
// Random inputs (never zeros), CUDA events around `reps` launches of each direction after one warm-up launch;
// prints one row per (geometry, mode, direction): the algorithm, its math type, and microseconds per launch. A tool:
// errors print and exit.
#include <cuda_runtime.h>
#include <cudnn.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <vector>

namespace {

#define CK(cmd)                                                                                  \
  do {                                                                                           \
    cudaError_t e_ = (cmd);                                                                      \
    if (e_ != cudaSuccess) {                                                                     \
      std::fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #cmd, cudaGetErrorString(e_)); \
      std::exit(1);                                                                              \
    }                                                                                            \
  } while (0)
#define DK(cmd)                                                                                   \
  do {                                                                                            \
    cudnnStatus_t s_ = (cmd);                                                                     \
    if (s_ != CUDNN_STATUS_SUCCESS) {                                                             \
      std::fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #cmd, cudnnGetErrorString(s_)); \
      std::exit(1);                                                                               \
    }                                                                                             \
  } while (0)

struct Geo {
  int c, k, h, r, stride;
};
// The CNN's convolutions (stem, stage 0, stage 1 with its projection, stage 2 with its projection).
const Geo kGeos[] = {{1, 32, 28, 3, 1},  {32, 32, 28, 3, 1},  {32, 64, 28, 3, 2},  {32, 64, 28, 1, 2},
                     {64, 64, 14, 3, 1}, {64, 128, 14, 3, 2}, {64, 128, 14, 1, 2}, {128, 128, 7, 3, 1}};

struct Mode {
  const char* name;
  cudnnDataType_t dt;
  cudnnTensorFormat_t fmt;
  cudnnMathType_t math;
  size_t elem;
};
const Mode kModes[] = {{"f32 NCHW FMA", CUDNN_DATA_FLOAT, CUDNN_TENSOR_NCHW, CUDNN_FMA_MATH, 4},
                       {"f32 NCHW TF32", CUDNN_DATA_FLOAT, CUDNN_TENSOR_NCHW, CUDNN_DEFAULT_MATH, 4},
                       {"bf16 NHWC", CUDNN_DATA_BFLOAT16, CUDNN_TENSOR_NHWC, CUDNN_TENSOR_OP_MATH, 2}};

void* RandomBuffer(size_t bytes, std::mt19937& rng) {
  std::vector<uint16_t> host(bytes / 2);
  // Small values that are valid both as bf16 (upper half of f32) and as f32 halves: exponent bits 0x3c..0x3f.
  for (auto& v : host) v = static_cast<uint16_t>(0x3c00 | (rng() & 0x3ff)) ^ ((rng() & 1) << 15);
  void* d = nullptr;
  CK(cudaMalloc(&d, bytes));
  CK(cudaMemcpy(d, host.data(), bytes, cudaMemcpyHostToDevice));
  return d;
}

template <typename Perf>
const Perf* First(const Perf* p, int n) {
  for (int i = 0; i < n; ++i) {
    if (p[i].status == CUDNN_STATUS_SUCCESS && p[i].determinism == CUDNN_DETERMINISTIC) return &p[i];
  }
  return nullptr;
}

const char* MathName(cudnnMathType_t m) {
  return m == CUDNN_FMA_MATH         ? "fma"
         : m == CUDNN_TENSOR_OP_MATH ? "tensor"
         : m == CUDNN_DEFAULT_MATH   ? "default"
                                     : "conv";
}

template <typename F>
float TimeUs(F launch, int reps) {
  launch();
  CK(cudaDeviceSynchronize());
  cudaEvent_t a, b;
  CK(cudaEventCreate(&a));
  CK(cudaEventCreate(&b));
  CK(cudaEventRecord(a));
  for (int i = 0; i < reps; ++i) launch();
  CK(cudaEventRecord(b));
  CK(cudaEventSynchronize(b));
  float ms = 0;
  CK(cudaEventElapsedTime(&ms, a, b));
  CK(cudaEventDestroy(a));
  CK(cudaEventDestroy(b));
  return 1000.f * ms / reps;
}

}  // namespace

int main(int argc, char** argv) {
  const int n = argc > 1 ? std::atoi(argv[1]) : 128;
  const int reps = argc > 2 ? std::atoi(argv[2]) : 50;
  cudnnHandle_t h;
  DK(cudnnCreate(&h));
  std::mt19937 rng(7);
  void* ws = nullptr;
  const size_t ws_bytes = size_t{256} << 20;
  CK(cudaMalloc(&ws, ws_bytes));
  std::printf("%-26s %-14s %-12s %5s %-7s %9s\n", "geometry (N=batch)", "mode", "direction", "algo", "math", "us");
  float totals[3] = {0, 0, 0};
  for (const Geo& g : kGeos) {
    const int pad = (g.r - 1) / 2, oh = (g.h + 2 * pad - g.r) / g.stride + 1;
    for (int mi = 0; mi < 3; ++mi) {
      const Mode& m = kModes[mi];
      cudnnTensorDescriptor_t xd, yd;
      cudnnFilterDescriptor_t wd;
      cudnnConvolutionDescriptor_t cd;
      DK(cudnnCreateTensorDescriptor(&xd));
      DK(cudnnCreateTensorDescriptor(&yd));
      DK(cudnnCreateFilterDescriptor(&wd));
      DK(cudnnCreateConvolutionDescriptor(&cd));
      DK(cudnnSetTensor4dDescriptor(xd, m.fmt, m.dt, n, g.c, g.h, g.h));
      DK(cudnnSetTensor4dDescriptor(yd, m.fmt, m.dt, n, g.k, oh, oh));
      DK(cudnnSetFilter4dDescriptor(wd, m.dt, m.fmt, g.k, g.c, g.r, g.r));
      DK(cudnnSetConvolution2dDescriptor(cd, pad, pad, g.stride, g.stride, 1, 1, CUDNN_CROSS_CORRELATION,
                                         CUDNN_DATA_FLOAT));
      DK(cudnnSetConvolutionMathType(cd, m.math));
      void* x = RandomBuffer(size_t{1} * n * g.c * g.h * g.h * m.elem, rng);
      void* y = RandomBuffer(size_t{1} * n * g.k * oh * oh * m.elem, rng);
      void* w = RandomBuffer(size_t{1} * g.k * g.c * g.r * g.r * m.elem, rng);
      const float alpha = 1.f, beta = 0.f;
      char geo[64];
      std::snprintf(geo, sizeof(geo), "%dx%d %d->%d %dx%d s%d", g.h, g.h, g.c, g.k, g.r, g.r, g.stride);
      int cnt = 0;
      cudnnConvolutionFwdAlgoPerf_t fp[CUDNN_CONVOLUTION_FWD_ALGO_COUNT];
      DK(cudnnGetConvolutionForwardAlgorithm_v7(h, xd, wd, cd, yd, CUDNN_CONVOLUTION_FWD_ALGO_COUNT, &cnt, fp));
      if (const auto* f = First(fp, cnt)) {
        const float us = TimeUs(
            [&] { DK(cudnnConvolutionForward(h, &alpha, xd, x, wd, w, cd, f->algo, ws, ws_bytes, &beta, yd, y)); },
            reps);
        totals[mi] += us;
        std::printf("%-26s %-14s %-12s %5d %-7s %9.1f\n", geo, m.name, "forward", f->algo, MathName(f->mathType), us);
      } else {
        std::printf("%-26s %-14s %-12s  none\n", geo, m.name, "forward");
      }
      cudnnConvolutionBwdDataAlgoPerf_t dp[CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT];
      DK(cudnnGetConvolutionBackwardDataAlgorithm_v7(h, wd, yd, cd, xd, CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT, &cnt,
                                                     dp));
      if (const auto* d = First(dp, cnt)) {
        const float us = TimeUs(
            [&] { DK(cudnnConvolutionBackwardData(h, &alpha, wd, w, yd, y, cd, d->algo, ws, ws_bytes, &beta, xd, x)); },
            reps);
        totals[mi] += us;
        std::printf("%-26s %-14s %-12s %5d %-7s %9.1f\n", geo, m.name, "bwd data", d->algo, MathName(d->mathType), us);
      } else {
        std::printf("%-26s %-14s %-12s  none\n", geo, m.name, "bwd data");
      }
      cudnnConvolutionBwdFilterAlgoPerf_t bp[CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT];
      DK(cudnnGetConvolutionBackwardFilterAlgorithm_v7(h, xd, yd, cd, wd, CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT, &cnt,
                                                       bp));
      if (const auto* b = First(bp, cnt)) {
        const float us = TimeUs(
            [&] {
              DK(cudnnConvolutionBackwardFilter(h, &alpha, xd, x, yd, y, cd, b->algo, ws, ws_bytes, &beta, wd, w));
            },
            reps);
        totals[mi] += us;
        std::printf("%-26s %-14s %-12s %5d %-7s %9.1f\n", geo, m.name, "bwd filter", b->algo, MathName(b->mathType),
                    us);
      } else {
        std::printf("%-26s %-14s %-12s  none\n", geo, m.name, "bwd filter");
      }
      CK(cudaFree(x));
      CK(cudaFree(y));
      CK(cudaFree(w));
      cudnnDestroyTensorDescriptor(xd);
      cudnnDestroyTensorDescriptor(yd);
      cudnnDestroyFilterDescriptor(wd);
      cudnnDestroyConvolutionDescriptor(cd);
    }
  }
  std::printf(
      "sum of all directions and geometries, batch %d (one training step's convolutions, the stem's data\n"
      "gradient included, which the CNN skips):\n",
      n);
  for (int mi = 0; mi < 3; ++mi) std::printf("  %-14s %9.1f us\n", kModes[mi].name, totals[mi]);
  return 0;
}
