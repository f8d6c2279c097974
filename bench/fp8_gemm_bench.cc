// fp8_gemm_bench: bf16 cuBLASLt GEMMs (kernels/matmul.h MatmulCudaLt) next to the FP8 ones (kernels/matmul_fp8.h)
// at the linear layers of GPT-2 124M/350M/774M/1.5B and Llama-3.2-1B, forward and both backward GEMMs, plus what
// the FP8 path pays to quantize its operands (kernels/fp8.h: amax, scale, cast with the transposed copy), so the table
// shows the net gain per layer.
//
//   fp8_gemm_bench [--tokens 16384] [--iters 20] [--filter SUBSTRING]
//
// A linear layer in -> out over M tokens, Y[M,out] = X[M,in] W[out,in]^T, runs three GEMMs:
//   fwd    Y  = X W^T      bf16: A = X, B = W (trans_b)        fp8: e4m3 X    x e4m3 W    (m=M,   n=out, k=in)
//   dgrad  dX = dY W       bf16: A = dY, B = W                 fp8: e5m2 dY   x e4m3 W^T  (m=M,   n=in,  k=out)
//   wgrad  dW = dY^T X     bf16: A = dY (trans_a), B = X       fp8: e5m2 dY^T x e4m3 X^T  (m=out, n=in,  k=M)
// All outputs bf16. FP8 forward with fast accumulation, backward without (as torchao and Transformer Engine do).
// Quantization per layer: X, W (e4m3) and dY (e5m2), each one amax + scale + one cast writing both the plain and the
// transposed copy. Each figure is the mean of --iters runs between two CUDA events after 3 warm-up runs; data are
// random normals (bf16). Exits 2 with a message when no GPU (or one older than sm_89) is visible; other errors print
// and exit 1.
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "bench/bench_util.h"
#include "core/bf16.h"
#include "core/cuda_handles.h"
#include "core/device_context.h"
#include "kernels/fp8.h"
#include "kernels/matmul.h"
#include "kernels/matmul_fp8.h"

namespace {

using dtrain::DType;
using dtrain::bench::TimeMs;
using dtrain::ops::Fp8Format;

// A cudaMalloc'ed buffer, freed at scope exit (shapes are allocated one layer at a time: Llama's lm_head gradient
// alone is 4 GiB in bf16).
struct DeviceBuffer {
  explicit DeviceBuffer(size_t bytes) { BENCH_CHECK(cudaMalloc(&p, bytes < 16 ? 16 : bytes)); }
  ~DeviceBuffer() { cudaFree(p); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  void* p = nullptr;
  template <typename T>
  T* as() const {
    return static_cast<T*>(p);
  }
};

// n bf16 N(0, sigma^2) values: a 1 Mi-element random block copied over the buffer.
void FillBf16(uint16_t* dst, int64_t n, float sigma, uint64_t seed) {
  constexpr int64_t kBlock = int64_t{1} << 20;
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> nd(0.f, sigma);
  std::vector<uint16_t> host(static_cast<size_t>(kBlock));
  for (auto& v : host) v = dtrain::RoundBf16Rne(nd(rng));
  for (int64_t off = 0; off < n; off += kBlock) {
    const int64_t len = std::min(kBlock, n - off);
    BENCH_CHECK(cudaMemcpy(dst + off, host.data(), static_cast<size_t>(len) * 2, cudaMemcpyHostToDevice));
  }
}

// Floats between two device scalars: every amax / scale / scale_inv gets its own 16-byte slot. (Packed at 4-byte
// offsets, every FP8 GEMM here was refused with CUBLAS_STATUS_NOT_SUPPORTED, on the H200 with cuBLASLt of CUDA 13.0.)
constexpr int64_t kScaleSlot = 4;

struct Layer {
  std::string model, name;
  int64_t in, out;
};

std::vector<Layer> Layers() {
  std::vector<Layer> layers;
  const std::pair<const char*, int64_t> gpt2[] = {
      {"gpt2-124m", 768}, {"gpt2-350m", 1024}, {"gpt2-774m", 1280}, {"gpt2-1.5b", 1600}};
  for (const auto& [model, c] : gpt2) {
    layers.push_back({model, "qkv", c, 3 * c});
    layers.push_back({model, "attn_proj", c, c});
    layers.push_back({model, "fc", c, 4 * c});
    layers.push_back({model, "fc2", 4 * c, c});
    layers.push_back({model, "lm_head", c, 50304});
  }
  layers.push_back({"llama-3.2-1b", "qkv", 2048, 3072});
  layers.push_back({"llama-3.2-1b", "o", 2048, 2048});
  layers.push_back({"llama-3.2-1b", "gate|up", 2048, 16384});
  layers.push_back({"llama-3.2-1b", "down", 8192, 2048});
  layers.push_back({"llama-3.2-1b", "lm_head", 2048, 128256});
  return layers;
}

double Tflops(int64_t m, int64_t n, int64_t k, double ms) { return 2.0 * m * n * k / (ms * 1e-3) / 1e12; }

}  // namespace

int main(int argc, char** argv) {
  int64_t tokens = 16384;
  int iters = 20;
  std::string filter;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--tokens" && i + 1 < argc) {
      tokens = std::atoll(argv[++i]);
    } else if (a == "--iters" && i + 1 < argc) {
      iters = std::atoi(argv[++i]);
    } else if (a == "--filter" && i + 1 < argc) {
      filter = argv[++i];
    } else {
      std::fprintf(stderr, "usage: fp8_gemm_bench [--tokens 16384] [--iters 20] [--filter SUBSTRING]\n");
      return 1;
    }
  }
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
    std::fprintf(stderr, "fp8_gemm_bench: no CUDA device visible: the FP8 GEMMs need an sm_89+ GPU (Hopper, Ada)\n");
    return 2;
  }
  cudaDeviceProp prop;
  BENCH_CHECK(cudaGetDeviceProperties(&prop, 0));
  if (prop.major * 10 + prop.minor < 89) {
    std::fprintf(stderr, "fp8_gemm_bench: %s is sm_%d%d; FP8 tensor cores need sm_89+\n", prop.name, prop.major,
                 prop.minor);
    return 2;
  }
  std::unique_ptr<dtrain::DeviceContext> ctx;
  BENCH_OK(dtrain::DeviceContext::CreateCuda(0, &ctx));
  const dtrain::BlasHandles& blas = *ctx->blas();
  cudaStream_t stream = ctx->stream();
  std::printf("# fp8_gemm_bench on %s: M = %lld tokens, mean of %d runs, bf16 outputs\n\n", prop.name,
              static_cast<long long>(tokens), iters);
  std::printf(
      "| model | layer | gemm | m | n | k | bf16 ms | fp8 ms | fp8/bf16 speedup | bf16 TFLOP/s | fp8 TFLOP/s |\n");
  std::printf("|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|\n");
  std::vector<std::string> net_rows;
  for (const Layer& l : Layers()) {
    if (!filter.empty() && (l.model + " " + l.name).find(filter) == std::string::npos) continue;
    const int64_t m = tokens, in = l.in, out = l.out;
    // bf16 operands (X, W, dY), their fp8 copies and transposes, the outputs, and the scales.
    DeviceBuffer x(m * in * 2), w(out * in * 2), dy(m * out * 2);
    DeviceBuffer qx(m * in), qxt(m * in), qw(out * in), qwt(out * in), qdy(m * out), qdyt(m * out);
    DeviceBuffer y(m * out * 2), dx(m * in * 2), dw(out * in * 2);
    // amax, scale, scale_inv of X, W and dY, each in its own 16-byte slot (see kScaleSlot).
    DeviceBuffer scalars(3 * 3 * kScaleSlot * sizeof(float));
    float* f = scalars.as<float>();
    FillBf16(x.as<uint16_t>(), m * in, 1.f, 1);
    FillBf16(w.as<uint16_t>(), out * in, 0.02f, 2);
    FillBf16(dy.as<uint16_t>(), m * out, 1e-3f, 3);
    // amax + scale + cast with the transposed copy, for one [rows, cols] operand.
    auto quantize = [&](const DeviceBuffer& src, int64_t rows, int64_t cols, Fp8Format fmt, float* s,
                        const DeviceBuffer& q, const DeviceBuffer& qt) {
      BENCH_OK(dtrain::ops::Fp8AmaxCudaBf16(s, src.as<uint16_t>(), rows * cols, stream));
      BENCH_OK(dtrain::ops::Fp8ScaleCuda(s + kScaleSlot, s + 2 * kScaleSlot, s, fmt, stream));
      BENCH_OK(dtrain::ops::CastToFp8CudaBf16(q.as<uint8_t>(), qt.as<uint8_t>(), src.as<uint16_t>(), rows, cols,
                                              s + kScaleSlot, fmt, stream));
    };
    const double q_x = TimeMs(stream, iters, [&] { quantize(x, m, in, Fp8Format::kE4M3, f, qx, qxt); });
    const double q_w =
        TimeMs(stream, iters, [&] { quantize(w, out, in, Fp8Format::kE4M3, f + 3 * kScaleSlot, qw, qwt); });
    const double q_dy =
        TimeMs(stream, iters, [&] { quantize(dy, m, out, Fp8Format::kE5M2, f + 6 * kScaleSlot, qdy, qdyt); });

    struct Gemm {
      const char* name;
      int64_t m, n, k;
      dtrain::ops::MatmulCudaArgs bf16;
      dtrain::ops::MatmulFp8Args fp8;
    };
    auto bf16_args = [&](void* c, const void* a, bool ta, const void* b, bool tb, int64_t gm, int64_t gn, int64_t gk) {
      dtrain::ops::MatmulCudaArgs g;
      g.ab_dtype = g.c_dtype = DType::kBF16;
      g.c = c;
      g.a = a;
      g.b = b;
      g.trans_a = ta;
      g.trans_b = tb;
      g.m = gm;
      g.n = gn;
      g.k = gk;
      return g;
    };
    auto fp8_args = [&](void* c, const DeviceBuffer& a, Fp8Format fa, const float* sa, const DeviceBuffer& b,
                        Fp8Format fb, const float* sb, int64_t gm, int64_t gn, int64_t gk, bool fast) {
      dtrain::ops::MatmulFp8Args g;
      g.a = a.as<uint8_t>();
      g.b = b.as<uint8_t>();
      g.a_format = fa;
      g.b_format = fb;
      g.a_scale_inv = sa;
      g.b_scale_inv = sb;
      g.c = c;
      g.c_dtype = DType::kBF16;
      g.m = gm;
      g.n = gn;
      g.k = gk;
      g.fast_accum = fast;
      return g;
    };
    const Fp8Format e4 = Fp8Format::kE4M3, e5 = Fp8Format::kE5M2;
    const Gemm gemms[] = {
        {"fwd", m, out, in, bf16_args(y.p, x.p, false, w.p, true, m, out, in),
         fp8_args(y.p, qx, e4, f + 2 * kScaleSlot, qw, e4, f + 5 * kScaleSlot, m, out, in, /*fast=*/true)},
        {"dgrad", m, in, out, bf16_args(dx.p, dy.p, false, w.p, false, m, in, out),
         fp8_args(dx.p, qdy, e5, f + 8 * kScaleSlot, qwt, e4, f + 5 * kScaleSlot, m, in, out, false)},
        {"wgrad", out, in, m, bf16_args(dw.p, dy.p, true, x.p, false, out, in, m),
         fp8_args(dw.p, qdyt, e5, f + 8 * kScaleSlot, qxt, e4, f + 2 * kScaleSlot, out, in, m, false)},
    };
    double sum_bf16 = 0, sum_fp8 = 0;
    for (const Gemm& g : gemms) {
      const double t16 = TimeMs(stream, iters, [&] { BENCH_OK(dtrain::ops::MatmulCudaLt(blas, g.bf16, stream)); });
      // A GEMM cuBLASLt refuses in FP8 is reported in its row and counted at its bf16 time (the layer keeps bf16).
      dtrain::ops::MatmulFp8Args fp8 = g.fp8;
      dtrain::Status probe = dtrain::ops::MatmulFp8Cuda(blas, fp8, stream);
      if (!probe.ok() && fp8.fast_accum) {  // is fast accumulation what it refuses?
        std::fprintf(stderr, "%s %s %s with fast accumulation: %s; trying without\n", l.model.c_str(), l.name.c_str(),
                     g.name, probe.ToString().c_str());
        fp8.fast_accum = false;
        probe = dtrain::ops::MatmulFp8Cuda(blas, fp8, stream);
      }
      if (!probe.ok()) {
        std::printf("| %s | %s | %s | %lld | %lld | %lld | %.3f | refused: %s | | %.0f | |\n", l.model.c_str(),
                    l.name.c_str(), g.name, static_cast<long long>(g.m), static_cast<long long>(g.n),
                    static_cast<long long>(g.k), t16, probe.ToString().c_str(), Tflops(g.m, g.n, g.k, t16));
        sum_bf16 += t16;
        sum_fp8 += t16;
        continue;
      }
      const double t8 = TimeMs(stream, iters, [&] { BENCH_OK(dtrain::ops::MatmulFp8Cuda(blas, fp8, stream)); });
      sum_bf16 += t16;
      sum_fp8 += t8;
      std::printf("| %s | %s | %s | %lld | %lld | %lld | %.3f | %.3f | %.2fx | %.0f | %.0f |\n", l.model.c_str(),
                  l.name.c_str(), g.name, static_cast<long long>(g.m), static_cast<long long>(g.n),
                  static_cast<long long>(g.k), t16, t8, t16 / t8, Tflops(g.m, g.n, g.k, t16),
                  Tflops(g.m, g.n, g.k, t8));
    }
    const double quant = q_x + q_w + q_dy;
    char row[512];
    std::snprintf(row, sizeof(row), "| %s | %s | %.3f | %.3f | %.3f (X %.3f, W %.3f, dY %.3f) | %.3f | %.2fx |",
                  l.model.c_str(), l.name.c_str(), sum_bf16, sum_fp8, quant, q_x, q_w, q_dy, sum_fp8 + quant,
                  sum_bf16 / (sum_fp8 + quant));
    net_rows.push_back(row);
    std::fflush(stdout);
  }
  std::printf("\n## Net per layer (fwd + dgrad + wgrad), with the FP8 path's quantization\n\n");
  std::printf("| model | layer | bf16 GEMMs ms | fp8 GEMMs ms | quantize ms | fp8 total ms | net speedup |\n");
  std::printf("|---|---|---:|---:|---:|---:|---:|\n");
  for (const std::string& r : net_rows) std::printf("%s\n", r.c_str());
  return 0;
}
