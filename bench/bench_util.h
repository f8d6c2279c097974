#pragma once
// What the CUDA benchmark tools of bench/ share (fp8_gemm_bench, layernorm_bench, sdpa_fp8_bench): check macros that
// print the failing call with its file and line and exit 1, and the mean time of a queued function. Benchmarks only:
// library code returns a Status instead of exiting.

#include <cuda_runtime.h>

#include <cstdio>
#include <cstdlib>
#include <functional>

#include "core/status.h"

#define BENCH_CHECK(cmd)                                                                         \
  do {                                                                                           \
    cudaError_t e_ = (cmd);                                                                      \
    if (e_ != cudaSuccess) {                                                                     \
      std::fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #cmd, cudaGetErrorString(e_)); \
      std::exit(1);                                                                              \
    }                                                                                            \
  } while (0)
#define BENCH_OK(expr)                                                                           \
  do {                                                                                           \
    const dtrain::Status s_ = (expr);                                                            \
    if (!s_.ok()) {                                                                              \
      std::fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #expr, s_.ToString().c_str()); \
      std::exit(1);                                                                              \
    }                                                                                            \
  } while (0)

namespace dtrain::bench {

// Mean ms of `iters` runs of fn, queued on `stream`, between two CUDA events, after 3 warm-up runs.
inline double TimeMs(cudaStream_t stream, int iters, const std::function<void()>& fn) {
  for (int i = 0; i < 3; ++i) fn();
  cudaEvent_t start, stop;
  BENCH_CHECK(cudaEventCreate(&start));
  BENCH_CHECK(cudaEventCreate(&stop));
  BENCH_CHECK(cudaEventRecord(start, stream));
  for (int i = 0; i < iters; ++i) fn();
  BENCH_CHECK(cudaEventRecord(stop, stream));
  BENCH_CHECK(cudaEventSynchronize(stop));
  float ms = 0;
  BENCH_CHECK(cudaEventElapsedTime(&ms, start, stop));
  BENCH_CHECK(cudaEventDestroy(start));
  BENCH_CHECK(cudaEventDestroy(stop));
  return ms / iters;
}

}  // namespace dtrain::bench
