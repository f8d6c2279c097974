#include "runtime/train/step_graph.h"

#include "core/check.h"
#if DT_HAVE_CUDA
#include "core/cuda_graph.h"
#endif

namespace dtrain::runtime {

std::string StepGraph::Blocker(const proto::Config& cfg, const DeviceContext& ctx, const ParameterUpdater& updater) {
  if (!ctx.is_cuda()) return "CPU run";
  if (!cfg.train().cuda_graphs()) return "train.cuda_graphs is false";
#if !DT_HAVE_CUDA
  return "built without CUDA";
#else
  return updater.GraphBlocker();
#endif
}

StepGraph::StepGraph(DeviceContext& ctx, int64_t accum) : ctx_(ctx), inputs_(accum), targets_(accum) {}

StepGraph::~StepGraph() = default;

bool StepGraph::WantStep() {
  if (off_) return false;
  if (captured() || eager_steps_ >= kEagerSteps) return true;
  ++eager_steps_;
  return false;
}

Status StepGraph::Stage(int64_t m, const Tensor& inputs, const Tensor& targets) {
  DT_CHECK_ARG(m >= 0 && m < static_cast<int64_t>(inputs_.size()),
               "StepGraph: micro-batch " << m << " of " << inputs_.size());
  auto stage = [&](const Tensor& src, Tensor* dst, const char* what) -> Status {
    if (!dst->defined()) DT_RETURN_IF_ERROR(Tensor::Empty(src.shape(), src.dtype(), ctx_.allocator(), dst));
    if (src.shape() != dst->shape() || src.dtype() != dst->dtype()) {
      return Status::InvalidArgument(std::string("CUDA graph step: the batch's ") + what + " " + src.ToString() +
                                     " differ from the captured " + dst->ToString() +
                                     " (training batches must keep one shape; set train.cuda_graphs: false)");
    }
    return dst->CopyFrom(src, ctx_.stream());
  };
  DT_RETURN_IF_ERROR(stage(inputs, &inputs_[m], "inputs"));
  return stage(targets, &targets_[m], "targets");
}

Status StepGraph::Run(const std::function<Status()>& body, std::string* off_reason) {
  off_reason->clear();
#if DT_HAVE_CUDA
  if (graph_ == nullptr) {
    const Status st = CudaGraph::Capture(ctx_.stream(), ctx_.device_allocator(), body, &graph_);
    if (!st.ok()) {
      off_ = true;
      *off_reason = st.message();
      return body();  // nothing of the failed capture was queued: this step runs eagerly
    }
  }
  return graph_->Launch(ctx_.stream());
#else
  (void)body;
  return Status::Unavailable("StepGraph: built without CUDA");
#endif
}

void StepGraph::Reset() {
#if DT_HAVE_CUDA
  graph_.reset();
#endif
  eager_steps_ = 0;
}

bool StepGraph::captured() const {
#if DT_HAVE_CUDA
  return graph_ != nullptr;
#else
  return false;
#endif
}

size_t StepGraph::num_nodes() const {
#if DT_HAVE_CUDA
  return graph_ != nullptr ? graph_->num_nodes() : 0;
#else
  return 0;
#endif
}

}  // namespace dtrain::runtime
