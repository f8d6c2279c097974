// conv_fe: the Fashion-MNIST CNN's bf16 channels-last convolutions through cuDNN's graph API (the vendored
// cudnn-frontend), next to bench/conv_algos.cu's legacy-API figures: per geometry and direction, the time of the
// heuristics' first deterministic plan (mode A) and of the fastest deterministic plan found by timing every one.
//
//   conv_fe [batch=128]
//
// Random bf16 inputs; times are the frontend's autotune (min over up to 100 launches) and CUDA events around 50
// launches for the heuristics' pick. A tool: errors print and exit.
#include <cuda_runtime.h>
#include <cudnn.h>

#include <cstdio>
#include <cstdlib>
#include <memory>
#include <random>
#include <unordered_map>
#include <vector>

#include "cudnn_frontend.h"

namespace fe = cudnn_frontend;

namespace {

void Check(bool ok, const char* what, const std::string& msg) {
  if (!ok) {
    std::fprintf(stderr, "%s: %s\n", what, msg.c_str());
    std::exit(1);
  }
}
#define FE(call)                                  \
  do {                                            \
    auto e_ = (call);                             \
    Check(e_.is_good(), #call, e_.get_message()); \
  } while (0)

struct Geo {
  int64_t c, k, h, r, stride;
};
const Geo kGeos[] = {{1, 32, 28, 3, 1},  {32, 32, 28, 3, 1},  {32, 64, 28, 3, 2},  {32, 64, 28, 1, 2},
                     {64, 64, 14, 3, 1}, {64, 128, 14, 3, 2}, {64, 128, 14, 1, 2}, {128, 128, 7, 3, 1}};

void* Random(size_t elems, std::mt19937& rng) {
  std::vector<uint16_t> h(elems);
  for (auto& v : h) v = static_cast<uint16_t>(0x3c00 | (rng() & 0x7f)) ^ ((rng() & 1) << 15);  // bf16 in +-[2^-7, 2^-6)
  void* d = nullptr;
  cudaMalloc(&d, elems * 2);
  cudaMemcpy(d, h.data(), elems * 2, cudaMemcpyHostToDevice);
  return d;
}

std::vector<int64_t> NhwcStride(int64_t c, int64_t h, int64_t w) { return {c * h * w, 1, w * c, c}; }

float TimePlan(cudnnHandle_t handle, fe::graph::Graph& g, std::unordered_map<int64_t, void*>& pack, void* ws) {
  auto run = [&] { FE(g.execute(handle, pack, ws)); };
  run();
  cudaDeviceSynchronize();
  cudaEvent_t a, b;
  cudaEventCreate(&a);
  cudaEventCreate(&b);
  cudaEventRecord(a);
  for (int i = 0; i < 50; ++i) run();
  cudaEventRecord(b);
  cudaEventSynchronize(b);
  float ms = 0;
  cudaEventElapsedTime(&ms, a, b);
  return 1000.f * ms / 50;
}

}  // namespace

int main(int argc, char** argv) {
  const int64_t n = argc > 1 ? std::atoll(argv[1]) : 128;
  cudnnHandle_t handle;
  Check(cudnnCreate(&handle) == CUDNN_STATUS_SUCCESS, "cudnnCreate", "");
  std::mt19937 rng(11);
  void* ws = nullptr;
  cudaMalloc(&ws, size_t{512} << 20);
  std::printf("%-22s %-10s %8s %8s %6s  %s\n", "geometry", "direction", "heur us", "best us", "plans", "best plan");
  double tot_heur = 0, tot_best = 0;
  for (const Geo& geo : kGeos) {
    const int64_t pad = (geo.r - 1) / 2, oh = (geo.h + 2 * pad - geo.r) / geo.stride + 1;
    void* x = Random(n * geo.c * geo.h * geo.h, rng);
    void* w = Random(geo.k * geo.c * geo.r * geo.r, rng);
    void* y = Random(n * geo.k * oh * oh, rng);
    for (int dir = 0; dir < 3; ++dir) {
      auto make = [&](std::shared_ptr<fe::graph::Tensor_attributes>* a,
                      std::shared_ptr<fe::graph::Tensor_attributes>* b,
                      std::shared_ptr<fe::graph::Tensor_attributes>* out) {
        auto g = std::make_shared<fe::graph::Graph>();
        g->set_io_data_type(fe::DataType_t::BFLOAT16)
            .set_intermediate_data_type(fe::DataType_t::FLOAT)
            .set_compute_data_type(fe::DataType_t::FLOAT);
        auto X = fe::graph::Tensor_attributes()
                     .set_dim({n, geo.c, geo.h, geo.h})
                     .set_stride(NhwcStride(geo.c, geo.h, geo.h));
        auto W = fe::graph::Tensor_attributes()
                     .set_dim({geo.k, geo.c, geo.r, geo.r})
                     .set_stride(NhwcStride(geo.c, geo.r, geo.r));
        auto Y = fe::graph::Tensor_attributes().set_dim({n, geo.k, oh, oh}).set_stride(NhwcStride(geo.k, oh, oh));
        if (dir == 0) {
          *a = g->tensor(X.set_name("x"));
          *b = g->tensor(W.set_name("w"));
          *out = g->conv_fprop(*a, *b,
                               fe::graph::Conv_fprop_attributes()
                                   .set_padding({pad, pad})
                                   .set_stride({geo.stride, geo.stride})
                                   .set_dilation({1, 1}));
          (*out)->set_dim(Y.get_dim()).set_stride(Y.get_stride());
        } else if (dir == 1) {
          *a = g->tensor(Y.set_name("dy"));
          *b = g->tensor(W.set_name("w"));
          *out = g->conv_dgrad(*a, *b,
                               fe::graph::Conv_dgrad_attributes()
                                   .set_padding({pad, pad})
                                   .set_stride({geo.stride, geo.stride})
                                   .set_dilation({1, 1}));
          (*out)->set_dim(X.get_dim()).set_stride(X.get_stride());
        } else {
          *a = g->tensor(Y.set_name("dy"));
          *b = g->tensor(X.set_name("x"));
          *out = g->conv_wgrad(*a, *b,
                               fe::graph::Conv_wgrad_attributes()
                                   .set_padding({pad, pad})
                                   .set_stride({geo.stride, geo.stride})
                                   .set_dilation({1, 1}));
          (*out)->set_dim(W.get_dim()).set_stride(W.get_stride());
        }
        (*out)->set_output(true);
        FE(g->validate());
        FE(g->build_operation_graph(handle));
        return g;
      };
      std::shared_ptr<fe::graph::Tensor_attributes> a, b, out;
      void* pa = dir == 0 ? x : y;
      void* pb = dir == 2 ? x : w;
      void* po = dir == 0 ? y : dir == 1 ? x : w;
      // Heuristics' first deterministic plan.
      auto g1 = make(&a, &b, &out);
      FE(g1->create_execution_plans({fe::HeurMode_t::A}));
      g1->deselect_numeric_notes({fe::NumericalNote_t::NONDETERMINISTIC});
      FE(g1->check_support(handle));
      FE(g1->build_plans(handle, fe::BuildPlanPolicy_t::HEURISTICS_CHOICE));
      std::unordered_map<int64_t, void*> pack1 = {{a->get_uid(), pa}, {b->get_uid(), pb}, {out->get_uid(), po}};
      const float heur = TimePlan(handle, *g1, pack1, ws);
      // Every deterministic plan (heuristics A and the fallback list), timed.
      auto g2 = make(&a, &b, &out);
      FE(g2->create_execution_plans({fe::HeurMode_t::A, fe::HeurMode_t::FALLBACK}));
      g2->deselect_numeric_notes({fe::NumericalNote_t::NONDETERMINISTIC});
      FE(g2->check_support(handle));
      FE(g2->build_plans(handle, fe::BuildPlanPolicy_t::ALL));
      std::unordered_map<int64_t, void*> pack2 = {{a->get_uid(), pa}, {b->get_uid(), pb}, {out->get_uid(), po}};
      FE(g2->autotune(handle, pack2, ws));
      const float best = TimePlan(handle, *g2, pack2, ws);
      tot_heur += heur;
      tot_best += best;
      std::string plan;
      FE(g2->get_plan_name_at_index(0, plan));
      char name[64];
      std::snprintf(name, sizeof(name), "%ldx%ld %ld->%ld %ldx%ld s%ld", (long)geo.h, (long)geo.h, (long)geo.c,
                    (long)geo.k, (long)geo.r, (long)geo.r, (long)geo.stride);
      std::printf("%-22s %-10s %8.1f %8.1f %6ld  %s\n", name,
                  dir == 0   ? "forward"
                  : dir == 1 ? "bwd data"
                             : "bwd filter",
                  heur, best, (long)g2->get_execution_plan_count(), plan.c_str());
    }
    cudaFree(x);
    cudaFree(w);
    cudaFree(y);
  }
  std::printf("sum, batch %ld: heuristics %.1f us, best deterministic %.1f us\n", (long)n, tot_heur, tot_best);
  return 0;
}
