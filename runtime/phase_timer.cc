#include "runtime/phase_timer.h"

#include <chrono>

#include "runtime/core/check.h"
#if DT_HAVE_CUDA
#include <cuda_runtime_api.h>

#include "runtime/core/cuda_check.h"
#include "runtime/core/cuda_handles.h"
#endif

namespace dtrain::runtime {
namespace {

double NowMs() {
  using Clock = std::chrono::steady_clock;
  return std::chrono::duration<double, std::milli>(Clock::now().time_since_epoch()).count();
}

}  // namespace

PhaseTimer::PhaseTimer(DeviceContext& ctx, int phases) : ctx_(ctx), phases_(phases), host_ms_(phases, 0.0) {}
PhaseTimer::~PhaseTimer() = default;

Status PhaseTimer::Mark(int k) {
  if (k < 0 || k > phases_) return Status::InvalidArgument("PhaseTimer: boundary " + std::to_string(k) + " out of range");
#if DT_HAVE_CUDA
  if (ctx_.is_cuda()) {
    const size_t i = static_cast<size_t>(steps_ * (phases_ + 1) + k);
    while (events_.size() <= i) {
      events_.push_back(std::make_unique<CudaEvent>());
      DT_RETURN_IF_ERROR(CudaEvent::Create(events_.back().get(), /*timing=*/true));
    }
    DT_RETURN_IF_ERROR(events_[i]->Record(ctx_.stream()));
    if (k == phases_) ++steps_;
    return Status::OK();
  }
#endif
  const double now = NowMs();
  if (k > 0) host_ms_[k - 1] += now - last_host_;
  last_host_ = now;
  if (k == phases_) ++steps_;
  return Status::OK();
}

Status PhaseTimer::Take(std::vector<double>* ms, int64_t* steps) {
  ms->assign(phases_, 0.0);
  *steps = steps_;
#if DT_HAVE_CUDA
  if (ctx_.is_cuda()) {
    for (int64_t s = 0; s < steps_; ++s) {
      for (int k = 0; k < phases_; ++k) {
        const CudaEvent& a = *events_[s * (phases_ + 1) + k];
        const CudaEvent& b = *events_[s * (phases_ + 1) + k + 1];
        DT_RETURN_IF_ERROR(b.Synchronize());
        float t = 0;
        DT_CUDA_CHECK(cudaEventElapsedTime(&t, a.get(), b.get()));
        (*ms)[k] += t;
      }
    }
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
