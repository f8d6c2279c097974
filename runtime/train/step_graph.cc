#include "runtime/train/step_graph.h"

#include "core/check.h"
#if DT_HAVE_CUDA
#include "core/cuda_graph.h"
#endif

namespace dtrain::runtime {

// One graph and the input addresses it reads (inputs, targets of each micro-batch, in order).
struct StepGraph::Captured {
  std::vector<const void*> addresses;
#if DT_HAVE_CUDA
  std::unique_ptr<CudaGraph> graph;
#endif
};

#if DT_HAVE_CUDA
namespace {

// The batches' buffers: a captured graph replays the addresses it was captured with.
std::vector<const void*> Addresses(const std::vector<StepGraph::MicroBatch>& batches) {
  std::vector<const void*> a;
  for (const auto& b : batches) {
    a.push_back(b.inputs.data());
    a.push_back(b.targets.data());
  }
  return a;
}

}  // namespace
#endif  // DT_HAVE_CUDA

std::string StepGraph::Blocker(const proto::Config& cfg, const DeviceContext& ctx, const ParameterUpdater& updater) {
  if (!ctx.is_cuda()) return "CPU run";
  if (!cfg.train().cuda_graphs()) return "train.cuda_graphs is false";
  if (cfg.train().grad_accum_steps() > kMaxAccum) {
    return "train.grad_accum_steps " + std::to_string(cfg.train().grad_accum_steps()) + " is above " +
           std::to_string(kMaxAccum) + " (a graphed step keeps every micro-batch in its own device buffer)";
  }
#if !DT_HAVE_CUDA
  return "built without CUDA";
#else
  return updater.GraphBlocker();
#endif
}

StepGraph::StepGraph(DeviceContext& ctx) : ctx_(ctx) {}

StepGraph::~StepGraph() = default;

bool StepGraph::WantStep() {
  if (off_) return false;
  if (!graphs_.empty() || eager_steps_ >= kEagerSteps) return true;
  ++eager_steps_;
  return false;
}

Status StepGraph::CheckShapes(const std::vector<MicroBatch>& batches) {
  if (shapes_.empty()) {
    shapes_ = batches;
    return Status::OK();
  }
  DT_CHECK_ARG(batches.size() == shapes_.size(),
               "CUDA graph step: " << batches.size() << " micro-batches, the captured step has " << shapes_.size());
  auto same = [](const Tensor& a, const Tensor& b) { return a.shape() == b.shape() && a.dtype() == b.dtype(); };
  for (size_t m = 0; m < batches.size(); ++m) {
    const MicroBatch& b = batches[m];
    const MicroBatch& c = shapes_[m];
    if (!same(b.inputs, c.inputs) || !same(b.targets, c.targets)) {
      return Status::InvalidArgument("CUDA graph step: micro-batch " + std::to_string(m) + " is " +
                                     b.inputs.ToString() + " / " + b.targets.ToString() + ", the captured step's " +
                                     c.inputs.ToString() + " / " + c.targets.ToString() +
                                     " (training batches must keep one shape; set train.cuda_graphs: false)");
    }
  }
  return Status::OK();
}

Status StepGraph::Run(const std::vector<MicroBatch>& batches, const Body& body, bool* captured,
                      std::string* off_reason) {
  *captured = false;
  off_reason->clear();
  DT_RETURN_IF_ERROR(CheckShapes(batches));
#if DT_HAVE_CUDA
  const std::vector<const void*> key = Addresses(batches);
  for (const Captured& g : graphs_) {
    if (g.addresses == key) return g.graph->Launch(ctx_.stream());
  }
  // Graphs off for the rest of the run (their memory back to the cache); this step runs eagerly.
  auto turn_off = [&](const std::string& why) {
    Reset();
    off_ = true;
    *off_reason = why;
    return body(batches);
  };
  if (graphs_.size() == kMaxGraphs) {
    return turn_off("the step's inputs came from more than " + std::to_string(kMaxGraphs) +
                    " different device buffers (one graph each)");
  }
  if (pool_ == nullptr) pool_ = std::make_shared<CudaGraphPool>(ctx_.device_allocator());
  Captured g;
  g.addresses = key;
  const Status st = CudaGraph::Capture(
      ctx_.stream(), pool_, [&] { return body(batches); }, &g.graph);
  if (!st.ok()) return turn_off(st.message());  // nothing of the failed capture was queued
  graphs_.push_back(std::move(g));
  *captured = true;
  return graphs_.back().graph->Launch(ctx_.stream());
#else
  (void)body;
  return Status::Unavailable("StepGraph: built without CUDA");
#endif
}

void StepGraph::Reset() {
  graphs_.clear();
  pool_.reset();  // the graphs synchronized with their last replays: the blocks go back to the cache
  shapes_.clear();
  eager_steps_ = 0;
}

size_t StepGraph::num_graphs() const { return graphs_.size(); }

size_t StepGraph::num_nodes() const {
#if DT_HAVE_CUDA
  return graphs_.empty() ? 0 : graphs_.back().graph->num_nodes();
#else
  return 0;
#endif
}

size_t StepGraph::held_bytes() const {
#if DT_HAVE_CUDA
  return pool_ == nullptr ? 0 : pool_->bytes();
#else
  return 0;
#endif
}

}  // namespace dtrain::runtime
