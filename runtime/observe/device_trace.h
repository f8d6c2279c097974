#pragma once
// DeviceTrace: spans of work on CUDA streams (or, on the CPU, of blocking calls) for a TraceWriter.
//
// Stream work runs later than the host queues it, so a span is two marks — CUDA timing events
// recorded on the stream that runs the work — resolved to times only after the device has passed
// them. The clock: Begin() waits for the device once and records an anchor event at that instant of
// the writer's clock (the stream is idle, so the event completes at once); a mark's time is then the
// anchor's plus cudaEventElapsedTime(anchor, mark). Flush() waits for the pending marks and writes
// their spans (call it at the end of the traced steps: it synchronizes). Without CUDA (or for a
// null stream) a mark is the writer's current time, and spans are written at once.
//
// Usage (per traced window): Begin(); per span: Record(s, &a) ... Record(s, &b); Span(track, name, cat, a, b);
// Flush(). Marks come from a pool reused after each Flush (no allocation in steady state).
//
// Ownership: borrows the writer and ctx (must outlive it). Not thread-safe: one thread drives it.

#include <memory>
#include <string>
#include <vector>

#include "core/cuda_fwd.h"
#include "core/device_context.h"
#include "core/status.h"
#include "runtime/observe/metrics.h"
#include "runtime/observe/trace.h"

namespace dtrain::runtime {

class DeviceTrace {
 public:
  // A point in a stream's work (GPU: an index into the event pool) or the host time of a CPU mark.
  struct Mark {
    int event = -1;
    double host_us = 0;
  };

  DeviceTrace(TraceWriter* writer, DeviceContext& ctx);
  ~DeviceTrace();
  DeviceTrace(const DeviceTrace&) = delete;
  DeviceTrace& operator=(const DeviceTrace&) = delete;

  // Synchronizes the device and anchors the device clock to the writer's (see above).
  Status Begin();
  // Records a mark at the current tail of `stream` (nullptr or a CPU context: the host time now).
  Status Record(cudaStream_t stream, Mark* out);
  // Queues the span [begin, end) on `track`; args (may be empty) are shown in the viewer.
  void Span(TraceTrack track, const std::string& name, const std::string& cat, const Mark& begin, const Mark& end,
            const JsonLine& args = JsonLine());
  // Waits for every pending mark and writes the queued spans. No-op when none are pending.
  Status Flush();

 private:
  struct Events;  // the CUDA event pool and the anchor (CUDA builds only)
  struct Pending {
    TraceTrack track;
    std::string name, cat;
    Mark begin, end;
    JsonLine args;
  };
  Status Time(const Mark& m, double* us) const;

  TraceWriter* writer_;
  DeviceContext& ctx_;
  std::unique_ptr<Events> events_;
  std::vector<Pending> pending_;
  double anchor_us_ = 0;
};

}  // namespace dtrain::runtime
