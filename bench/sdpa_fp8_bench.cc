// sdpa_fp8_bench: cuDNN's fused causal attention in bf16 (kernels/attention.h CudnnAttention*, what dtrain's GPT-2 and
// Llama run) next to cuDNN's FP8 attention (the graph API's sdpa_fp8 and sdpa_fp8_backward nodes), forward and
// backward, at GPT-2's and Llama's attention shapes: is FP8 attention worth building into train.precision fp8?
//
//   sdpa_fp8_bench [--batch 16] [--seq 1024] [--iters 20] [--filter SUBSTRING]
//
// Layouts are the models': q | k | v in one row of (NH + 2 NKV) x hs elements per token, O [B, T, NH, hs]. The FP8
// graphs take e4m3 Q, K, V, O and write e4m3 O; the backward runs twice, with dO, dQ, dK, dV in e4m3 and in e5m2 (the
// format dtrain's FP8 linears take gradients in). Every per-tensor scale is a device float (1 here: the kernels' time
// does not depend on its value) and the FP8 graphs write the amax of S and O (forward) and of dQ, dK, dV, dP
// (backward), as a training step's would. Each figure is the mean of --iters runs between two CUDA events after 3
// warm-up runs, on random data. A graph cuDNN does not support prints its message instead of a time. Exits 2 with a
// message when no GPU (or one older than sm_90) is visible; other errors print and exit 1.
#include <cuda_runtime.h>
#include <cudnn_frontend.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "bench/bench_util.h"
#include "core/cuda_handles.h"
#include "core/device_context.h"
#include "kernels/attention.h"

namespace {

using dtrain::bench::TimeMs;

namespace fe = cudnn_frontend;
using TensorPtr = std::shared_ptr<fe::graph::Tensor_attributes>;

// A cudaMalloc'ed buffer of random bytes (a bf16 or FP8 pattern of small finite values), freed at scope exit.
struct DeviceBuffer {
  explicit DeviceBuffer(size_t bytes, uint8_t hi_mask = 0x3B) {
    BENCH_CHECK(cudaMalloc(&p, bytes < 16 ? 16 : bytes));
    std::vector<uint8_t> host(bytes);
    uint64_t x = 0x9E3779B97F4A7C15ull ^ bytes;
    for (auto& b : host) {  // xorshift; every byte's exponent bits kept small so no value is inf or NaN
      x ^= x << 13, x ^= x >> 7, x ^= x << 17;
      b = static_cast<uint8_t>(x) & hi_mask;
    }
    BENCH_CHECK(cudaMemcpy(p, host.data(), bytes, cudaMemcpyHostToDevice));
  }
  ~DeviceBuffer() { cudaFree(p); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  void* p = nullptr;
  char* c() const { return static_cast<char*>(p); }
};

struct Shape {
  const char* name;
  int64_t nh, nkv, hs;
};

// One built FP8 graph and its variant pack (device pointers filled by the caller).
struct Fp8Graph {
  fe::graph::Graph g;
  std::unordered_map<TensorPtr, void*> pack;
  int64_t workspace = 0;
  std::string error;  // cuDNN's message when a step of the build failed
};

bool Ok(fe::error_t e, const char* what, Fp8Graph* f) {
  if (e.is_good()) return true;
  f->error = std::string(what) + ": " + e.get_message();
  return false;
}

bool Finish(cudnnHandle_t handle, Fp8Graph* f) {
  return Ok(f->g.validate(), "validate", f) && Ok(f->g.build_operation_graph(handle), "build_operation_graph", f) &&
         Ok(f->g.create_execution_plans({fe::HeurMode_t::A}), "create_execution_plans", f) &&
         Ok(f->g.check_support(handle), "check_support", f) && Ok(f->g.build_plans(handle), "build_plans", f) &&
         Ok(f->g.get_workspace_size(f->workspace), "get_workspace_size", f);
}

// The buffers both FP8 graphs of a shape read and write.
struct Fp8Buffers {
  char *qkv, *o, *dout, *dqkv;
  float* stats;
  float* scalars;  // 32 floats: the scales (1) and the amax outputs
};

TensorPtr Scalar(fe::graph::Graph& g, const char* name) {
  return g.tensor(fe::graph::Tensor_attributes()
                      .set_name(name)
                      .set_dim({1, 1, 1, 1})
                      .set_stride({1, 1, 1, 1})
                      .set_data_type(fe::DataType_t::FLOAT));
}

void AmaxOut(const TensorPtr& t) {
  t->set_output(true).set_dim({1, 1, 1, 1}).set_stride({1, 1, 1, 1}).set_data_type(fe::DataType_t::FLOAT);
}

// Sets g's types (e4m3 io, f32 math) and makes Q, K, V as the models lay them out (strided views of one qkv row per
// token).
void QkvInputs(fe::graph::Graph& g, int64_t b, int64_t t, const Shape& s, TensorPtr* q, TensorPtr* k, TensorPtr* v) {
  g.set_io_data_type(fe::DataType_t::FP8_E4M3)
      .set_intermediate_data_type(fe::DataType_t::FLOAT)
      .set_compute_data_type(fe::DataType_t::FLOAT);
  const int64_t w = (s.nh + 2 * s.nkv) * s.hs;
  const std::vector<int64_t> stride = {w * t, s.hs, w, 1};
  *q = g.tensor(fe::graph::Tensor_attributes().set_name("Q").set_dim({b, s.nh, t, s.hs}).set_stride(stride));
  *k = g.tensor(fe::graph::Tensor_attributes().set_name("K").set_dim({b, s.nkv, t, s.hs}).set_stride(stride));
  *v = g.tensor(fe::graph::Tensor_attributes().set_name("V").set_dim({b, s.nkv, t, s.hs}).set_stride(stride));
}

void BuildForward(cudnnHandle_t handle, int64_t b, int64_t t, const Shape& s, const Fp8Buffers& buf, Fp8Graph* f) {
  fe::graph::Graph& g = f->g;
  TensorPtr q, k, v;
  QkvInputs(g, b, t, s, &q, &k, &v);
  const char* names[] = {"Descale_Q", "Descale_K", "Descale_V", "Descale_S", "Scale_S", "Scale_O"};
  TensorPtr sc[6];
  for (int i = 0; i < 6; ++i) sc[i] = Scalar(g, names[i]);
  auto opts = fe::graph::SDPA_fp8_attributes()
                  .set_name("sdpa_fp8")
                  .set_generate_stats(true)
                  .set_causal_mask(true)
                  .set_attn_scale(1.f / std::sqrt(static_cast<float>(s.hs)));
  auto [o, stats, amax_s, amax_o] = g.sdpa_fp8(q, k, v, sc[0], sc[1], sc[2], sc[3], sc[4], sc[5], opts);
  o->set_output(true).set_dim({b, s.nh, t, s.hs}).set_stride({s.nh * s.hs * t, s.hs, s.nh * s.hs, 1});
  stats->set_output(true).set_data_type(fe::DataType_t::FLOAT).set_dim({b, s.nh, t, 1}).set_stride({s.nh * t, t, 1, 1});
  AmaxOut(amax_s);
  AmaxOut(amax_o);
  if (!Finish(handle, f)) return;
  const size_t k_off = static_cast<size_t>(s.nh * s.hs), v_off = static_cast<size_t>((s.nh + s.nkv) * s.hs);
  f->pack = {{q, buf.qkv},       {k, buf.qkv + k_off},       {v, buf.qkv + v_off},      {o, buf.o},
             {stats, buf.stats}, {amax_s, buf.scalars + 16}, {amax_o, buf.scalars + 17}};
  for (int i = 0; i < 6; ++i) f->pack[sc[i]] = buf.scalars + i;
}

// grad: the type of dO, dQ, dK, dV (e4m3 or e5m2); Q, K, V, O are e4m3.
void BuildBackward(cudnnHandle_t handle, int64_t b, int64_t t, const Shape& s, fe::DataType_t grad,
                   const Fp8Buffers& buf, Fp8Graph* f) {
  fe::graph::Graph& g = f->g;
  TensorPtr q, k, v;
  QkvInputs(g, b, t, s, &q, &k, &v);
  const std::vector<int64_t> dims = {b, s.nh, t, s.hs}, o_stride = {s.nh * s.hs * t, s.hs, s.nh * s.hs, 1};
  auto o = g.tensor(fe::graph::Tensor_attributes().set_name("O").set_dim(dims).set_stride(o_stride));
  auto dout =
      g.tensor(fe::graph::Tensor_attributes().set_name("dO").set_dim(dims).set_stride(o_stride).set_data_type(grad));
  auto stats = g.tensor(fe::graph::Tensor_attributes()
                            .set_name("Stats")
                            .set_dim({b, s.nh, t, 1})
                            .set_stride({s.nh * t, t, 1, 1})
                            .set_data_type(fe::DataType_t::FLOAT));
  const char* names[] = {"Descale_Q",  "Descale_K", "Descale_V", "Descale_O", "Descale_dO", "Descale_S",
                         "Descale_dP", "Scale_S",   "Scale_dQ",  "Scale_dK",  "Scale_dV",   "Scale_dP"};
  TensorPtr sc[12];
  for (int i = 0; i < 12; ++i) sc[i] = Scalar(g, names[i]);
  auto opts = fe::graph::SDPA_fp8_backward_attributes()
                  .set_name("sdpa_fp8_backward")
                  .set_causal_mask(true)
                  .set_attn_scale(1.f / std::sqrt(static_cast<float>(s.hs)));
  auto [dq, dk, dv, amax_dq, amax_dk, amax_dv, amax_dp] =
      g.sdpa_fp8_backward(q, k, v, o, dout, stats, sc[0], sc[1], sc[2], sc[3], sc[4], sc[5], sc[6], sc[7], sc[8], sc[9],
                          sc[10], sc[11], opts);
  const int64_t w = (s.nh + 2 * s.nkv) * s.hs;
  const std::vector<int64_t> qkv_stride = {w * t, s.hs, w, 1};
  dq->set_output(true).set_dim(dims).set_stride(qkv_stride).set_data_type(grad);
  for (const auto& d : {dk, dv})
    d->set_output(true).set_dim({b, s.nkv, t, s.hs}).set_stride(qkv_stride).set_data_type(grad);
  for (const auto& a : {amax_dq, amax_dk, amax_dv, amax_dp}) AmaxOut(a);
  if (!Finish(handle, f)) return;
  const size_t k_off = static_cast<size_t>(s.nh * s.hs), v_off = static_cast<size_t>((s.nh + s.nkv) * s.hs);
  f->pack = {{q, buf.qkv},
             {k, buf.qkv + k_off},
             {v, buf.qkv + v_off},
             {o, buf.o},
             {dout, buf.dout},
             {stats, buf.stats},
             {dq, buf.dqkv},
             {dk, buf.dqkv + k_off},
             {dv, buf.dqkv + v_off},
             {amax_dq, buf.scalars + 16},
             {amax_dk, buf.scalars + 17},
             {amax_dv, buf.scalars + 18},
             {amax_dp, buf.scalars + 19}};
  for (int i = 0; i < 12; ++i) f->pack[sc[i]] = buf.scalars + i;
}

// The graph's mean time, or its build error.
std::string Run(cudnnHandle_t handle, cudaStream_t stream, int iters, Fp8Graph* f, double* ms) {
  if (!f->error.empty()) return f->error;
  DeviceBuffer ws(static_cast<size_t>(f->workspace));
  std::string err;
  *ms = TimeMs(stream, iters, [&] {
    fe::error_t e = f->g.execute(handle, f->pack, ws.p);
    if (!e.is_good() && err.empty()) err = "execute: " + e.get_message();
  });
  return err;
}

}  // namespace

int main(int argc, char** argv) {
  int64_t batch = 16, seq = 1024;
  int iters = 20;
  std::string filter;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--batch" && i + 1 < argc) {
      batch = std::atoll(argv[++i]);
    } else if (a == "--seq" && i + 1 < argc) {
      seq = std::atoll(argv[++i]);
    } else if (a == "--iters" && i + 1 < argc) {
      iters = std::atoi(argv[++i]);
    } else if (a == "--filter" && i + 1 < argc) {
      filter = argv[++i];
    } else {
      std::fprintf(stderr, "usage: sdpa_fp8_bench [--batch 16] [--seq 1024] [--iters 20] [--filter SUBSTRING]\n");
      return 2;
    }
  }
  if (batch <= 0 || seq < 128 || iters <= 0) {
    std::fprintf(stderr, "sdpa_fp8_bench: --batch > 0, --seq >= 128 (cuDNN attention's minimum here), --iters > 0\n");
    return 2;
  }
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
    std::fprintf(stderr, "sdpa_fp8_bench: no CUDA device visible: cuDNN's FP8 attention needs an sm_90+ GPU\n");
    return 2;
  }
  cudaDeviceProp prop{};
  BENCH_CHECK(cudaGetDeviceProperties(&prop, 0));
  if (prop.major < 9) {
    std::fprintf(stderr, "sdpa_fp8_bench: %s is sm_%d%d; cuDNN's FP8 attention needs sm_90+\n", prop.name, prop.major,
                 prop.minor);
    return 2;
  }
  std::unique_ptr<dtrain::DeviceContext> ctx;
  BENCH_OK(dtrain::DeviceContext::CreateCuda(0, &ctx));
  cudaStream_t stream = ctx->stream();
  cudnnHandle_t handle = ctx->cudnn()->get();
  std::printf("sdpa_fp8_bench: %s, cuDNN %zu, B x T = %lld x %lld, causal, %d iterations\n", prop.name,
              cudnnGetVersion(), static_cast<long long>(batch), static_cast<long long>(seq), iters);
  std::printf(
      "| shape | NH/NKV x hs | bf16 fwd | fp8 fwd | fwd ratio | bf16 bwd | fp8 bwd e4m3 | ratio | fp8 bwd e5m2 "
      "| ratio |\n| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n");
  const Shape shapes[] = {{"gpt2 124M", 12, 12, 64}, {"gpt2 350M", 16, 16, 64},  {"gpt2 774M", 20, 20, 64},
                          {"gpt2 1.5B", 25, 25, 64}, {"llama3.2 1B", 32, 8, 64}, {"llama3 8B", 32, 8, 128}};
  std::vector<std::string> notes;
  for (const Shape& s : shapes) {
    if (!filter.empty() && std::string(s.name).find(filter) == std::string::npos) continue;
    const int64_t w = (s.nh + 2 * s.nkv) * s.hs, rows = batch * seq, ow = s.nh * s.hs;
    // bf16: the product's path.
    DeviceBuffer qkv16(static_cast<size_t>(rows * w) * 2), o16(static_cast<size_t>(rows * ow) * 2),
        do16(static_cast<size_t>(rows * ow) * 2), dqkv16(static_cast<size_t>(rows * w) * 2),
        lse(static_cast<size_t>(batch * s.nh * seq) * 4);
    if (!dtrain::ops::CudnnAttentionSupported(*ctx, dtrain::DType::kBF16, batch, seq, s.nh, s.nkv, s.hs)) {
      std::printf("| %s | %lld/%lld x %lld | bf16 unsupported by cuDNN here | | | | | | | |\n", s.name,
                  static_cast<long long>(s.nh), static_cast<long long>(s.nkv), static_cast<long long>(s.hs));
      continue;
    }
    const double f16 = TimeMs(stream, iters, [&] {
      BENCH_OK(dtrain::ops::CudnnAttentionForward(*ctx, dtrain::DType::kBF16, o16.p, static_cast<float*>(lse.p),
                                                  qkv16.p, batch, seq, s.nh, s.nkv, s.hs));
    });
    const double b16 = TimeMs(stream, iters, [&] {
      BENCH_OK(dtrain::ops::CudnnAttentionBackward(*ctx, dtrain::DType::kBF16, dqkv16.p, do16.p, qkv16.p, o16.p,
                                                   static_cast<const float*>(lse.p), batch, seq, s.nh, s.nkv, s.hs));
    });
    // FP8: scales 1; the forward's stats feed the backward. FP8 bytes masked to exponent fields well below the top.
    DeviceBuffer qkv8(static_cast<size_t>(rows * w), 0xB7), o8(static_cast<size_t>(rows * ow), 0xB7),
        do8(static_cast<size_t>(rows * ow), 0xB7), dqkv8(static_cast<size_t>(rows * w)), scalars(32 * 4);
    std::vector<float> ones(32, 1.f);
    BENCH_CHECK(cudaMemcpy(scalars.p, ones.data(), ones.size() * 4, cudaMemcpyHostToDevice));
    const Fp8Buffers buf{
        qkv8.c(), o8.c(), do8.c(), dqkv8.c(), static_cast<float*>(lse.p), static_cast<float*>(scalars.p)};
    Fp8Graph fwd, bwd4, bwd5;
    BuildForward(handle, batch, seq, s, buf, &fwd);
    BuildBackward(handle, batch, seq, s, fe::DataType_t::FP8_E4M3, buf, &bwd4);
    BuildBackward(handle, batch, seq, s, fe::DataType_t::FP8_E5M2, buf, &bwd5);
    double f8 = 0, b8 = 0, b85 = 0;
    const std::string ef = Run(handle, stream, iters, &fwd, &f8), e4 = Run(handle, stream, iters, &bwd4, &b8),
                      e5 = Run(handle, stream, iters, &bwd5, &b85);
    auto cell = [&](const std::string& err, double ms, const char* what) {
      if (err.empty()) return std::to_string(ms).substr(0, 6) + " ms";
      notes.push_back(std::string(s.name) + " " + what + ": " + err);
      return std::string("unsupported (note ") + std::to_string(notes.size()) + ")";
    };
    auto ratio = [](const std::string& err, double base, double ms) {
      return err.empty() ? std::to_string(base / ms).substr(0, 5) + "x" : std::string("-");
    };
    std::printf("| %s | %lld/%lld x %lld | %.3f ms | %s | %s | %.3f ms | %s | %s | %s | %s |\n", s.name,
                static_cast<long long>(s.nh), static_cast<long long>(s.nkv), static_cast<long long>(s.hs), f16,
                cell(ef, f8, "fp8 fwd").c_str(), ratio(ef, f16, f8).c_str(), b16, cell(e4, b8, "fp8 bwd e4m3").c_str(),
                ratio(e4, b16, b8).c_str(), cell(e5, b85, "fp8 bwd e5m2").c_str(), ratio(e5, b16, b85).c_str());
    std::fflush(stdout);
  }
  for (size_t i = 0; i < notes.size(); ++i) std::printf("note %zu: %s\n", i + 1, notes[i].c_str());
  BENCH_CHECK(cudaDeviceSynchronize());
  return 0;
}
