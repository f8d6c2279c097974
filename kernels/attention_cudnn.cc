// cuDNN fused SDPA for kernels/attention.h (CudnnAttention*), through NVIDIA's header-only cudnn-frontend
// (third_party/cudnn_frontend, vendored unmodified): the graph API's attention node, forward and backward.
#if DT_HAVE_CUDA
#include <cudnn_frontend.h>

#include <cmath>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <tuple>
#include <unordered_map>

#include "core/check.h"
#include "core/cuda_handles.h"
#include "core/nvtx.h"
#include "kernels/attention.h"

namespace dtrain::ops {
namespace {

namespace fe = cudnn_frontend;

constexpr int64_t kCudnnAttentionMinSeq = 128;

// One built cuDNN graph and the tensors its variant pack is keyed by.
struct Plan {
  std::shared_ptr<fe::graph::Graph> graph;
  std::shared_ptr<fe::graph::Tensor_attributes> q, k, v, o, stats, dout, dq, dk, dv, scale;
  int64_t workspace = 0;
  Status status;  // the build's outcome, cached too: an unsupported shape is not rebuilt every call
};

// (handle, backward, dtype, b, t, nh, nkv, hs)
using Key = std::tuple<cudnnHandle_t, bool, int, int64_t, int64_t, int64_t, int64_t, int64_t>;

std::mutex& CacheMutex() {
  static std::mutex mu;
  return mu;
}
std::map<Key, std::unique_ptr<Plan>>& Cache() {
  static std::map<Key, std::unique_ptr<Plan>> cache;
  return cache;
}

Status FromFe(fe::error_t e, const char* what) {
  if (e.is_good()) return Status::OK();
  return Status::Unavailable(std::string("cuDNN attention: ") + what + ": " + e.get_message());
}

// qkv's rows of w = (NH + 2 NKV) hs elements seen as Q [B, NH, T, hs] and K, V [B, NKV, T, hs] (from their column
// offsets: cuDNN reads a kv head for each group of NH / NKV query heads); out's [B, T, NH, hs] as O [B, NH, T, hs].
std::vector<int64_t> QkvStride(int64_t t, int64_t w, int64_t hs) { return {w * t, hs, w, 1}; }
std::vector<int64_t> OutStride(int64_t t, int64_t nh, int64_t hs) { return {nh * hs * t, hs, nh * hs, 1}; }

Status Build(cudnnHandle_t handle, bool backward, DType dt, int64_t b, int64_t t, int64_t nh, int64_t nkv, int64_t hs,
             Plan* p) {
  auto g = std::make_shared<fe::graph::Graph>();
  g->set_io_data_type(dt == DType::kBF16 ? fe::DataType_t::BFLOAT16 : fe::DataType_t::HALF)
      .set_intermediate_data_type(fe::DataType_t::FLOAT)
      .set_compute_data_type(fe::DataType_t::FLOAT);
  const std::vector<int64_t> dims = {b, nh, t, hs}, kv_dims = {b, nkv, t, hs};
  const std::vector<int64_t> qkv_stride = QkvStride(t, (nh + 2 * nkv) * hs, hs);
  auto input = [&](const char* name, const std::vector<int64_t>& dim, const std::vector<int64_t>& stride) {
    return g->tensor(fe::graph::Tensor_attributes().set_name(name).set_dim(dim).set_stride(stride));
  };
  p->q = input("Q", dims, qkv_stride);
  p->k = input("K", kv_dims, qkv_stride);
  p->v = input("V", kv_dims, qkv_stride);
  p->scale = g->tensor(fe::graph::Tensor_attributes()
                           .set_name("attn_scale")
                           .set_dim({1, 1, 1, 1})
                           .set_stride({1, 1, 1, 1})
                           .set_is_pass_by_value(true)
                           .set_data_type(fe::DataType_t::FLOAT));
  if (!backward) {
    auto opts = fe::graph::SDPA_attributes().set_name("sdpa").set_generate_stats(true).set_causal_mask(true);
    opts.set_attn_scale(p->scale);
    auto [o, stats] = g->sdpa(p->q, p->k, p->v, opts);
    o->set_output(true).set_dim(dims).set_stride(OutStride(t, nh, hs));
    stats->set_output(true).set_data_type(fe::DataType_t::FLOAT).set_dim({b, nh, t, 1}).set_stride({nh * t, t, 1, 1});
    p->o = o;
    p->stats = stats;
  } else {
    p->o = input("O", dims, OutStride(t, nh, hs));
    p->dout = input("dO", dims, OutStride(t, nh, hs));
    p->stats = g->tensor(fe::graph::Tensor_attributes()
                             .set_name("stats")
                             .set_dim({b, nh, t, 1})
                             .set_stride({nh * t, t, 1, 1})
                             .set_data_type(fe::DataType_t::FLOAT));
    auto opts = fe::graph::SDPA_backward_attributes().set_name("sdpa_backward").set_causal_mask(true);
    opts.set_attn_scale(p->scale);
    auto [dq, dk, dv] = g->sdpa_backward(p->q, p->k, p->v, p->o, p->dout, p->stats, opts);
    dq->set_output(true).set_dim(dims).set_stride(qkv_stride);
    for (const auto& d : {dk, dv}) d->set_output(true).set_dim(kv_dims).set_stride(qkv_stride);
    p->dq = dq;
    p->dk = dk;
    p->dv = dv;
  }
  DT_RETURN_IF_ERROR(FromFe(g->validate(), "validate"));
  DT_RETURN_IF_ERROR(FromFe(g->build_operation_graph(handle), "build_operation_graph"));
  DT_RETURN_IF_ERROR(FromFe(g->create_execution_plans({fe::HeurMode_t::A}), "create_execution_plans"));
  DT_RETURN_IF_ERROR(FromFe(g->check_support(handle), "check_support"));
  DT_RETURN_IF_ERROR(FromFe(g->build_plans(handle), "build_plans"));
  DT_RETURN_IF_ERROR(FromFe(g->get_workspace_size(p->workspace), "get_workspace_size"));
  p->graph = std::move(g);
  return Status::OK();
}

// The cached plan for this call (built on first use; a failed build is cached as its status).
Status GetPlan(const DeviceContext& ctx, bool backward, DType dt, int64_t b, int64_t t, int64_t nh, int64_t nkv,
               int64_t hs, const Plan** out) {
  DT_CHECK_ARG(ctx.is_cuda() && ctx.cudnn() != nullptr, "cuDNN attention needs a CUDA context with a cuDNN handle");
  DT_CHECK_ARG(dt == DType::kBF16 || dt == DType::kF16, "cuDNN attention runs bf16 or f16, got " << DTypeName(dt));
  DT_CHECK_ARG(FlashAttentionSupportsHeadSize(hs), "cuDNN attention: head size " << hs << " (64 or 128)");
  DT_CHECK_ARG(nh > 0 && nkv > 0 && nh % nkv == 0,
               "cuDNN attention: NH = " << nh << " is not a multiple of NKV = " << nkv);
  // Short sequences stay on dtrain's kernels: replayed in a CUDA graph on the H200 (cuDNN 9.14), cuDNN's plans
  // for T = 32 hit an illegal address and its backward for T = 64 left dqkv unwritten, while T = 128 and 1024
  // replay correctly (AttentionCuda.CudnnReplaysInACudaGraph).
  if (t < kCudnnAttentionMinSeq) {
    return Status::Unavailable("cuDNN attention: sequence length " + std::to_string(t) + " < " +
                               std::to_string(kCudnnAttentionMinSeq));
  }
  const Key key{ctx.cudnn()->get(), backward, static_cast<int>(dt), b, t, nh, nkv, hs};
  std::lock_guard<std::mutex> lock(CacheMutex());
  auto& slot = Cache()[key];
  if (!slot) {
    slot = std::make_unique<Plan>();
    slot->status = Build(ctx.cudnn()->get(), backward, dt, b, t, nh, nkv, hs, slot.get());
  }
  DT_RETURN_IF_ERROR(slot->status);
  *out = slot.get();
  return Status::OK();
}

Status Execute(DeviceContext& ctx, const Plan& p,
               std::unordered_map<std::shared_ptr<fe::graph::Tensor_attributes>, void*>& pack) {
  Tensor ws;
  if (p.workspace > 0) DT_RETURN_IF_ERROR(Tensor::Empty({p.workspace}, DType::kU8, ctx.allocator(), &ws));
  // The workspace goes back to the stream-ordered cache on return; the graph's kernels run before any reuse.
  return FromFe(p.graph->execute(ctx.cudnn()->get(), pack, p.workspace > 0 ? ws.data() : nullptr), "execute");
}

}  // namespace

bool CudnnAttentionSupported(const DeviceContext& ctx, DType dt, int64_t b, int64_t t, int64_t nh, int64_t nkv,
                             int64_t hs) {
  const Plan* fwd = nullptr;
  const Plan* bwd = nullptr;
  return GetPlan(ctx, false, dt, b, t, nh, nkv, hs, &fwd).ok() && GetPlan(ctx, true, dt, b, t, nh, nkv, hs, &bwd).ok();
}

Status CudnnAttentionForward(DeviceContext& ctx, DType dt, void* out, float* lse, const void* qkv, int64_t b, int64_t t,
                             int64_t nh, int64_t nkv, int64_t hs) {
  DT_NVTX_FN();
  const Plan* p = nullptr;
  DT_RETURN_IF_ERROR(GetPlan(ctx, false, dt, b, t, nh, nkv, hs, &p));
  // Byte offsets of K and V in a qkv row (16-bit elements).
  const size_t k_off = static_cast<size_t>(nh * hs) * 2, v_off = static_cast<size_t>((nh + nkv) * hs) * 2;
  char* base = static_cast<char*>(const_cast<void*>(qkv));
  float scale = 1.0f / std::sqrt(static_cast<float>(hs));
  std::unordered_map<std::shared_ptr<fe::graph::Tensor_attributes>, void*> pack = {
      {p->q, base}, {p->k, base + k_off}, {p->v, base + v_off}, {p->scale, &scale}, {p->o, out}, {p->stats, lse}};
  return Execute(ctx, *p, pack);
}

Status CudnnAttentionBackward(DeviceContext& ctx, DType dt, void* dqkv, const void* dout, const void* qkv,
                              const void* out, const float* lse, int64_t b, int64_t t, int64_t nh, int64_t nkv,
                              int64_t hs) {
  DT_NVTX_FN();
  const Plan* p = nullptr;
  DT_RETURN_IF_ERROR(GetPlan(ctx, true, dt, b, t, nh, nkv, hs, &p));
  const size_t k_off = static_cast<size_t>(nh * hs) * 2, v_off = static_cast<size_t>((nh + nkv) * hs) * 2;
  char* base = static_cast<char*>(const_cast<void*>(qkv));
  char* dbase = static_cast<char*>(dqkv);
  float scale = 1.0f / std::sqrt(static_cast<float>(hs));
  std::unordered_map<std::shared_ptr<fe::graph::Tensor_attributes>, void*> pack = {{p->q, base},
                                                                                   {p->k, base + k_off},
                                                                                   {p->v, base + v_off},
                                                                                   {p->o, const_cast<void*>(out)},
                                                                                   {p->dout, const_cast<void*>(dout)},
                                                                                   {p->stats, const_cast<float*>(lse)},
                                                                                   {p->scale, &scale},
                                                                                   {p->dq, dbase},
                                                                                   {p->dk, dbase + k_off},
                                                                                   {p->dv, dbase + v_off}};
  return Execute(ctx, *p, pack);
}

}  // namespace dtrain::ops
#endif  // DT_HAVE_CUDA
