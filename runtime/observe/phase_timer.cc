#include "runtime/observe/phase_timer.h"

#include "core/check.h"
#include "core/clock.h"
#if DT_HAVE_CUDA
#include <cuda_runtime_api.h>

#include "core/cuda_check.h"
#include "core/cuda_handles.h"
#endif

namespace dtrain::runtime {
PhaseTimer::PhaseTimer(DeviceContext& ctx, int phases) : ctx_(ctx), phases_(phases), host_ms_(phases, 0.0) {}
PhaseTimer::~PhaseTimer() = default;

Status PhaseTimer::Mark() {
#if DT_HAVE_CUDA
  if (ctx_.is_cuda()) {
    while (events_.size() <= next_event_) {
      events_.push_back(std::make_unique<CudaEvent>());
      DT_RETURN_IF_ERROR(CudaEvent::Create(events_.back().get(), /*timing=*/true));
    }
    return events_[next_event_++]->Record(ctx_.stream());
  }
#endif
  const double now = 1e3 * MonotonicSeconds();
  if (current_ >= 0) host_ms_[current_] += now - last_host_;
  last_host_ = now;
  return Status::OK();
}

Status PhaseTimer::Switch(int phase) {
  if (phase < 0 || phase >= phases_) {
    return Status::InvalidArgument("PhaseTimer: phase " + std::to_string(phase) + " out of range");
  }
  DT_RETURN_IF_ERROR(Mark());
  if (ctx_.is_cuda()) spans_.push_back({next_event_ - 1, phase});
  current_ = phase;
  return Status::OK();
}

Status PhaseTimer::EndStep() {
  if (current_ < 0) return Status::OK();
  DT_RETURN_IF_ERROR(Mark());
  current_ = -1;
  ++steps_;
  return Status::OK();
}

Status PhaseTimer::Take(std::vector<double>* ms, int64_t* steps) {
  ms->assign(phases_, 0.0);
  *steps = steps_;
#if DT_HAVE_CUDA
  if (ctx_.is_cuda()) {
    // Only spans of complete steps are summed (an open step's spans are dropped with it).
    for (const auto& [start, phase] : spans_) {
      if (start + 1 >= next_event_) break;
      const CudaEvent& b = *events_[start + 1];
      DT_RETURN_IF_ERROR(b.Synchronize());
      float t = 0;
      DT_CUDA_CHECK(cudaEventElapsedTime(&t, events_[start]->get(), b.get()));
      (*ms)[phase] += t;
    }
    spans_.clear();
    next_event_ = 0;
    current_ = -1;
    steps_ = 0;
    return Status::OK();
  }
#endif
  *ms = host_ms_;
  host_ms_.assign(phases_, 0.0);
  steps_ = 0;
  return Status::OK();
}

}  // namespace dtrain::runtime
