// layernorm_bench: dtrain's bf16 layer-norm launchers (kernels/layernorm.h) timed at GPT-2's shapes, next to a
// device-to-device copy of the same bytes measured in the same process (the memory ceiling).
//
//   layernorm_bench [rows=16384] [reps=200]      (C = 768 and 1024)
//
// Per shape: two buffer sets (x, y, dy, dx: 4 x rows x C bf16 each; more than the H200's 50 MB L2 together),
// random data, one warm-up launch each; then CUDA events around `reps` launches alternating between the sets,
// captured in a CUDA graph as the training step is. Forward moves x in, y out (and 8 bytes of mean/rstd a row);
// the backward is the training step's (accumulate_dx): x, dy and dx in, dx out, plus the parameter-gradient
// partials. GB/s = those bytes / time. A tool: errors print and exit.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <vector>

#include "bench/bench_util.h"
#include "kernels/layernorm.h"

namespace {

template <typename T>
T* DeviceRandom(size_t count, std::mt19937& rng, float lo, float hi) {
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<T> host(count);
  for (T& v : host) v = static_cast<T>(dist(rng));
  T* dev = nullptr;
  BENCH_CHECK(cudaMalloc(&dev, count * sizeof(T)));
  BENCH_CHECK(cudaMemcpy(dev, host.data(), count * sizeof(T), cudaMemcpyHostToDevice));
  return dev;
}

struct Set {
  __nv_bfloat16 *x, *y, *dy, *dx;
  float *mean, *rstd;
};

// Milliseconds per launch of `launch(set)`, `reps` launches alternating between the sets, replayed as one graph.
template <typename Fn>
double TimePerLaunch(cudaStream_t stream, const std::vector<Set>& sets, int reps, Fn launch) {
  for (const Set& s : sets) launch(s);  // warm-up (module load, first touch)
  BENCH_CHECK(cudaStreamSynchronize(stream));
  cudaGraph_t graph;
  cudaGraphExec_t exec;
  BENCH_CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
  for (int i = 0; i < reps; ++i) launch(sets[i % sets.size()]);
  BENCH_CHECK(cudaStreamEndCapture(stream, &graph));
  BENCH_CHECK(cudaGraphInstantiate(&exec, graph, 0));
  BENCH_CHECK(cudaGraphLaunch(exec, stream));  // one untimed replay
  cudaEvent_t start, stop;
  BENCH_CHECK(cudaEventCreate(&start));
  BENCH_CHECK(cudaEventCreate(&stop));
  BENCH_CHECK(cudaEventRecord(start, stream));
  BENCH_CHECK(cudaGraphLaunch(exec, stream));
  BENCH_CHECK(cudaEventRecord(stop, stream));
  BENCH_CHECK(cudaEventSynchronize(stop));
  float ms = 0.f;
  BENCH_CHECK(cudaEventElapsedTime(&ms, start, stop));
  BENCH_CHECK(cudaEventDestroy(start));
  BENCH_CHECK(cudaEventDestroy(stop));
  BENCH_CHECK(cudaGraphExecDestroy(exec));
  BENCH_CHECK(cudaGraphDestroy(graph));
  return ms / reps;
}

void RunShape(cudaStream_t stream, int64_t n, int64_t c, int reps) {
  std::mt19937 rng(static_cast<unsigned>(n * 7 + c));
  const size_t elems = static_cast<size_t>(n * c);
  std::vector<Set> sets(2);
  for (Set& s : sets) {
    s.x = DeviceRandom<__nv_bfloat16>(elems, rng, -2.f, 3.f);
    s.y = DeviceRandom<__nv_bfloat16>(elems, rng, -1.f, 1.f);
    s.dy = DeviceRandom<__nv_bfloat16>(elems, rng, -1.f, 1.f);
    s.dx = DeviceRandom<__nv_bfloat16>(elems, rng, -1.f, 1.f);
    s.mean = DeviceRandom<float>(n, rng, 0.f, 1.f);
    s.rstd = DeviceRandom<float>(n, rng, 0.f, 1.f);
  }
  float* gamma = DeviceRandom<float>(c, rng, 0.5f, 1.5f);
  float* beta = DeviceRandom<float>(c, rng, -1.f, 1.f);
  float* dgamma = DeviceRandom<float>(c, rng, -1.f, 1.f);
  float* dbeta = DeviceRandom<float>(c, rng, -1.f, 1.f);
  float* scratch = nullptr;
  BENCH_CHECK(cudaMalloc(&scratch, dtrain::ops::LayerNormBackwardScratchFloats(n, c) * sizeof(float)));
  auto bits = [](__nv_bfloat16* p) { return reinterpret_cast<uint16_t*>(p); };

  const double fwd = TimePerLaunch(stream, sets, reps, [&](const Set& s) {
    BENCH_OK(dtrain::ops::LayerNormForwardCudaBf16(bits(s.y), s.mean, s.rstd, bits(s.x), gamma, beta, n, c, 1e-5f,
                                                   nullptr, stream));
  });
  const double bwd = TimePerLaunch(stream, sets, reps, [&](const Set& s) {
    BENCH_OK(dtrain::ops::LayerNormBackwardCudaBf16(bits(s.dx), dgamma, dbeta, bits(s.x), gamma, s.mean, s.rstd,
                                                    bits(s.dy), n, c, scratch, /*accumulate_dx=*/true, nullptr,
                                                    stream));
  });
  // The ceiling: copying the backward's bytes (3 tensors in, 1 out ~ 2 tensors each way) device to device.
  const double copy = TimePerLaunch(stream, sets, reps, [&](const Set& s) {
    BENCH_CHECK(cudaMemcpyAsync(s.y, s.x, elems * 2, cudaMemcpyDeviceToDevice, stream));
    BENCH_CHECK(cudaMemcpyAsync(s.dx, s.dy, elems * 2, cudaMemcpyDeviceToDevice, stream));
  });
  const double tensor = static_cast<double>(elems) * 2;
  const double fwd_bytes = 2 * tensor + 8.0 * n, bwd_bytes = 4 * tensor + 8.0 * n;
  std::printf(
      "%6lld x %4lld | forward %7.2f us %6.0f GB/s | backward %7.2f us %6.0f GB/s | copy (4 tensors) %7.2f us "
      "%6.0f GB/s\n",
      static_cast<long long>(n), static_cast<long long>(c), fwd * 1e3, fwd_bytes / fwd / 1e6, bwd * 1e3,
      bwd_bytes / bwd / 1e6, copy * 1e3, 4 * tensor / copy / 1e6);
  for (Set& s : sets) {
    for (void* p : {static_cast<void*>(s.x), static_cast<void*>(s.y), static_cast<void*>(s.dy),
                    static_cast<void*>(s.dx), static_cast<void*>(s.mean), static_cast<void*>(s.rstd)}) {
      BENCH_CHECK(cudaFree(p));
    }
  }
  for (void* p : {static_cast<void*>(gamma), static_cast<void*>(beta), static_cast<void*>(dgamma),
                  static_cast<void*>(dbeta), static_cast<void*>(scratch)}) {
    BENCH_CHECK(cudaFree(p));
  }
}

}  // namespace

int main(int argc, char** argv) {
  const int64_t rows = argc > 1 ? std::atoll(argv[1]) : 16384;
  const int reps = argc > 2 ? std::atoi(argv[2]) : 200;
  cudaStream_t stream;
  BENCH_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  for (const int64_t c : {int64_t{768}, int64_t{1024}}) RunShape(stream, rows, c, reps);
  BENCH_CHECK(cudaStreamDestroy(stream));
  return 0;
}
