#pragma once
// PhaseTimer: how long each phase of the training steps took, without synchronizing every step.
//
// A step is a sequence of spans, each attributed to a phase: Switch(p) ends the current span and
// starts one of phase p (phases may recur within a step, e.g. a data wait per micro-batch), and
// EndStep() ends the last span. On CUDA a switch records a timing event on the context's compute
// stream, so a span's time is the DEVICE time between its two events: what the stream spent on the
// work queued in the span, including waits on other streams (a data span covers the compute stream's
// wait for the input copy: the time the GPU stalled for input; a gap where the host had queued
// nothing shows up in the span that follows it). On the CPU it is the host clock. Take() (called at
// log points, where the trainer synchronizes anyway) sums every phase over the steps since the
// previous Take() and starts a new interval. Events are created lazily and reused. Not thread-safe.

#include <memory>
#include <vector>

#include "core/device_context.h"
#include "core/status.h"

namespace dtrain {
class CudaEvent;
}  // namespace dtrain

namespace dtrain::runtime {

class PhaseTimer {
 public:
  PhaseTimer(DeviceContext& ctx, int phases);
  ~PhaseTimer();
  PhaseTimer(const PhaseTimer&) = delete;
  PhaseTimer& operator=(const PhaseTimer&) = delete;

  // Starts a span of `phase` in [0, phases), ending the current span (if any).
  Status Switch(int phase);
  // Ends the current span and the step.
  Status EndStep();
  // Milliseconds per phase summed over the interval's complete steps (synchronizes on CUDA), and the
  // number of those steps; then starts a new interval.
  Status Take(std::vector<double>* ms, int64_t* steps);

 private:
  Status Mark();  // the boundary between two spans: an event (CUDA) or a clock reading (CPU)

  DeviceContext& ctx_;
  int phases_;
  int current_ = -1;             // phase of the open span; -1 between steps
  int64_t steps_ = 0;            // complete steps in the interval
  std::vector<double> host_ms_;  // CPU: sums per phase
  double last_host_ = 0;         // CPU: time of the previous mark
  // CUDA: spans of the interval as (index of the event starting it, phase); the event after the
  // last span of a step ends it.
  std::vector<std::pair<size_t, int>> spans_;
  size_t next_event_ = 0;
#if DT_HAVE_CUDA
  std::vector<std::unique_ptr<CudaEvent>> events_;
#endif
};

}  // namespace dtrain::runtime
