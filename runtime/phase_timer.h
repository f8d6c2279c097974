#pragma once
// PhaseTimer: how long each phase of the training steps took, without synchronizing every step.
//
// A step is cut into phases by boundaries 0..P: Mark(k) is called when phase k-1 ends and phase k
// begins in the order of the work (Mark(0) at the step's start, Mark(P) at its end). On CUDA a mark
// records a timing event on the context's compute stream, so a phase's time is the device time
// between its two marks (work queued between them, including waits on other streams); on the CPU
// it is the host clock. Take() (called at log points, where the trainer synchronizes anyway) sums
// every phase over the steps since the previous Take() and starts a new interval.
// Events are created lazily, P+1 per step of the longest interval, and reused. Not thread-safe.

#include <memory>
#include <vector>

#include "runtime/core/device_context.h"
#include "runtime/core/status.h"

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

  // Boundary k in [0, phases] of the current step; Mark(phases) ends the step.
  Status Mark(int k);
  // Milliseconds per phase summed over the interval's complete steps (synchronizes on CUDA), and the
  // number of those steps; then starts a new interval.
  Status Take(std::vector<double>* ms, int64_t* steps);

 private:
  DeviceContext& ctx_;
  int phases_;
  int64_t steps_ = 0;              // complete steps in the interval
  std::vector<double> host_ms_;    // CPU: sums per phase
  double last_host_ = 0;           // CPU: time of the previous mark
#if DT_HAVE_CUDA
  std::vector<std::unique_ptr<CudaEvent>> events_;  // CUDA: (phases + 1) per step
#endif
};

}  // namespace dtrain::runtime
