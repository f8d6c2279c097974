#include "runtime/observe/device_trace.h"

#include <utility>

#include "core/check.h"

#if DT_HAVE_CUDA
#include <cuda_runtime.h>

#include "core/cuda_check.h"
#include "core/cuda_handles.h"
#endif

namespace dtrain::runtime {
namespace {

const JsonLine* ArgsOrNull(const JsonLine& args) { return args.str() == "{}" ? nullptr : &args; }

}  // namespace

#if DT_HAVE_CUDA
struct DeviceTrace::Events {
  CudaEvent anchor;
  std::vector<CudaEvent> pool;
  size_t used = 0;
};
#else
struct DeviceTrace::Events {};
#endif

DeviceTrace::DeviceTrace(TraceWriter* writer, DeviceContext& ctx)
    : writer_(writer), ctx_(ctx), events_(std::make_unique<Events>()) {}
DeviceTrace::~DeviceTrace() = default;

Status DeviceTrace::Begin() {
#if DT_HAVE_CUDA
  if (ctx_.is_cuda()) {
    if (events_->anchor.get() == nullptr) DT_RETURN_IF_ERROR(CudaEvent::Create(&events_->anchor, /*timing=*/true));
    DT_RETURN_IF_ERROR(ctx_.Synchronize());
    DT_RETURN_IF_ERROR(events_->anchor.Record(ctx_.stream()));
    DT_RETURN_IF_ERROR(events_->anchor.Synchronize());
  }
#endif
  anchor_us_ = writer_->NowUs();
  return Status::OK();
}

Status DeviceTrace::Record(cudaStream_t stream, Mark* out) {
  *out = {};
#if DT_HAVE_CUDA
  if (ctx_.is_cuda() && stream != nullptr) {
    Events& e = *events_;
    if (e.used == e.pool.size()) {
      e.pool.emplace_back();
      DT_RETURN_IF_ERROR(CudaEvent::Create(&e.pool.back(), /*timing=*/true));
    }
    DT_RETURN_IF_ERROR(e.pool[e.used].Record(stream));
    out->event = static_cast<int>(e.used++);
    return Status::OK();
  }
#endif
  out->host_us = writer_->NowUs();
  return Status::OK();
}

void DeviceTrace::Span(TraceTrack track, const std::string& name, const std::string& cat,
                       const DeviceTrace::Mark& begin, const DeviceTrace::Mark& end, const JsonLine& args) {
  if (begin.event < 0 && end.event < 0) {  // host marks: nothing to wait for
    writer_->Record(track, name, cat, begin.host_us, end.host_us - begin.host_us, ArgsOrNull(args));
    return;
  }
  pending_.push_back({track, name, cat, begin, end, args});
}

Status DeviceTrace::Time(const DeviceTrace::Mark& m, double* us) const {
  *us = m.host_us;
#if DT_HAVE_CUDA
  if (m.event >= 0) {
    const CudaEvent& e = events_->pool[m.event];
    DT_RETURN_IF_ERROR(e.Synchronize());
    float ms = 0;
    DT_CUDA_CHECK(cudaEventElapsedTime(&ms, events_->anchor.get(), e.get()));
    *us = anchor_us_ + 1e3 * ms;
  }
#endif
  return Status::OK();
}

Status DeviceTrace::Flush() {
  for (const Pending& p : pending_) {
    double b = 0, e = 0;
    DT_RETURN_IF_ERROR(Time(p.begin, &b));
    DT_RETURN_IF_ERROR(Time(p.end, &e));
    writer_->Record(p.track, p.name, p.cat, b, e - b, ArgsOrNull(p.args));
  }
  pending_.clear();
#if DT_HAVE_CUDA
  events_->used = 0;
#endif
  return Status::OK();
}

}  // namespace dtrain::runtime
