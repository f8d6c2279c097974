// bf16 channels-last convolutions through cuDNN's graph API (kernels/conv2d_fe.h).
#if DT_HAVE_CUDA
#include "kernels/conv2d_fe.h"

#include <cudnn_frontend.h>

#include <array>
#include <climits>
#include <map>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/check.h"
#include "core/logging.h"
#include "kernels/conv2d.h"

namespace dtrain::ops::detail {

namespace fe = cudnn_frontend;

// One built graph; its three tensors carry the fixed uids below, so a variant pack is three pointers.
struct FePlan {
  std::shared_ptr<fe::graph::Graph> graph;
  int64_t workspace = 0;
  Status status;  // the build's outcome (a failed build is cached too)
};

constexpr int64_t kUidA = 1, kUidB = 2, kUidOut = 3;

using FeKey = std::array<int64_t, 9>;  // n, c, h, w, k, r, s, stride, pad

struct FeConvPlans {
  std::map<FeKey, std::array<FePlan, 3>> plans;  // by geometry, then ConvDirection
};

FeConvPlans* NewFeConvPlans() { return new FeConvPlans(); }
void DeleteFeConvPlans(FeConvPlans* plans) { delete plans; }
int64_t FeConvGeometryCount(const FeConvPlans* plans) { return static_cast<int64_t>(plans->plans.size()); }

namespace {

const char* DirectionName(ConvDirection d) {
  return d == ConvDirection::kForward        ? "forward"
         : d == ConvDirection::kBackwardData ? "backward data"
                                             : "backward filter";
}

Status FromFe(fe::error_t e, ConvDirection dir, const char* what) {
  if (e.is_good()) return Status::OK();
  return Status::Unavailable(std::string("conv2d bf16 ") + DirectionName(dir) + ": cuDNN graph " + what + ": " +
                             e.get_message());
}

// An NCHW-ordered dims vector with channels-last strides (what cuDNN's graph API calls NHWC).
fe::graph::Tensor_attributes Nhwc(const char* name, int64_t n, int64_t c, int64_t h, int64_t w) {
  return fe::graph::Tensor_attributes()
      .set_name(name)
      .set_dim({n, c, h, w})
      .set_stride({c * h * w, 1, w * c, c})
      .set_data_type(fe::DataType_t::BFLOAT16);
}

Status Build(cudnnHandle_t handle, ConvDirection dir, const Conv2dGeometry& g, FePlan* p) {
  for (int64_t v : {g.n * g.c * g.h * g.w, g.n * g.k * g.out_h() * g.out_w(), g.k * g.c * g.r * g.s}) {
    DT_CHECK_ARG(v <= INT_MAX, "conv2d bf16: tensors of more than 2^31 elements are not supported");
  }
  auto graph = std::make_shared<fe::graph::Graph>();
  graph->set_io_data_type(fe::DataType_t::BFLOAT16)
      .set_intermediate_data_type(fe::DataType_t::FLOAT)
      .set_compute_data_type(fe::DataType_t::FLOAT);
  const auto x = Nhwc("x", g.n, g.c, g.h, g.w);
  const auto w = Nhwc("w", g.k, g.c, g.r, g.s);
  const auto y = Nhwc("y", g.n, g.k, g.out_h(), g.out_w());
  const std::vector<int64_t> pad = {g.pad, g.pad}, stride = {g.stride, g.stride}, dilation = {1, 1};
  std::shared_ptr<fe::graph::Tensor_attributes> out;
  const fe::graph::Tensor_attributes* out_shape = nullptr;
  switch (dir) {
    case ConvDirection::kForward:
      out = graph->conv_fprop(
          graph->tensor(fe::graph::Tensor_attributes(x).set_uid(kUidA)),
          graph->tensor(fe::graph::Tensor_attributes(w).set_uid(kUidB)),
          fe::graph::Conv_fprop_attributes().set_padding(pad).set_stride(stride).set_dilation(dilation));
      out_shape = &y;
      break;
    case ConvDirection::kBackwardData:
      out = graph->conv_dgrad(
          graph->tensor(fe::graph::Tensor_attributes(y).set_uid(kUidA)),
          graph->tensor(fe::graph::Tensor_attributes(w).set_uid(kUidB)),
          fe::graph::Conv_dgrad_attributes().set_padding(pad).set_stride(stride).set_dilation(dilation));
      out_shape = &x;
      break;
    case ConvDirection::kBackwardFilter:
      out = graph->conv_wgrad(
          graph->tensor(fe::graph::Tensor_attributes(y).set_uid(kUidA)),
          graph->tensor(fe::graph::Tensor_attributes(x).set_uid(kUidB)),
          fe::graph::Conv_wgrad_attributes().set_padding(pad).set_stride(stride).set_dilation(dilation));
      out_shape = &w;
      break;
  }
  out->set_output(true)
      .set_uid(kUidOut)
      .set_dim(out_shape->get_dim())
      .set_stride(out_shape->get_stride())
      .set_data_type(fe::DataType_t::BFLOAT16);
  DT_RETURN_IF_ERROR(FromFe(graph->validate(), dir, "validate"));
  DT_RETURN_IF_ERROR(FromFe(graph->build_operation_graph(handle), dir, "build_operation_graph"));
  DT_RETURN_IF_ERROR(FromFe(graph->create_execution_plans({fe::HeurMode_t::A, fe::HeurMode_t::FALLBACK}), dir,
                            "create_execution_plans"));
  graph->deselect_numeric_notes({fe::NumericalNote_t::NONDETERMINISTIC});
  DT_RETURN_IF_ERROR(FromFe(graph->check_support(handle), dir, "check_support"));
  DT_RETURN_IF_ERROR(FromFe(graph->build_plans(handle, fe::BuildPlanPolicy_t::HEURISTICS_CHOICE), dir, "build_plans"));
  DT_RETURN_IF_ERROR(FromFe(graph->get_workspace_size(p->workspace), dir, "get_workspace_size"));
  std::string name;
  if (graph->get_plan_name_at_index(0, name).is_good()) {
    DT_LOG_DEBUG(kModel, "conv2d bf16 {} x[{},{},{},{}] w[{},{},{},{}] stride {} pad {}: plan {} ({} B workspace)",
                 DirectionName(dir), g.n, g.h, g.w, g.c, g.k, g.r, g.s, g.c, g.stride, g.pad, name, p->workspace);
  }
  p->graph = std::move(graph);
  return Status::OK();
}

}  // namespace

Status FeConvRun(cudnnHandle_t handle, FeConvPlans* plans, Allocator* alloc, Tensor* workspace, size_t* workspace_bytes,
                 ConvDirection dir, const Conv2dGeometry& g, const void* a, const void* b, void* out) {
  const FeKey key = {g.n, g.c, g.h, g.w, g.k, g.r, g.s, g.stride, g.pad};
  FePlan& p = plans->plans[key][static_cast<int>(dir)];
  if (p.graph == nullptr && p.status.ok()) {
    p.status = Build(handle, dir, g, &p);
    if (p.status.ok() && static_cast<size_t>(p.workspace) > *workspace_bytes) {
      // Stream-ordered caching allocator: the old block goes only to later work on this stream.
      *workspace = Tensor();
      *workspace_bytes = 0;
      p.status = Tensor::Empty({p.workspace}, DType::kU8, alloc, workspace);
      if (p.status.ok()) *workspace_bytes = static_cast<size_t>(p.workspace);
    }
    if (!p.status.ok()) p.graph = nullptr;
  }
  DT_RETURN_IF_ERROR(p.status);
  std::unordered_map<int64_t, void*> pack = {
      {kUidA, const_cast<void*>(a)}, {kUidB, const_cast<void*>(b)}, {kUidOut, out}};
  return FromFe(p.graph->execute(handle, pack, *workspace_bytes > 0 ? workspace->data() : nullptr), dir, "execute");
}

}  // namespace dtrain::ops::detail
#endif  // DT_HAVE_CUDA
