#pragma once
// CommStream: the comm-stream lifecycle every gradient exchange shares (GradientReducer, Zero1Optimizer):
// the stream, the event hand-overs between it and the compute stream, the exposed-communication
// accounting and the teardown.
//
// GPU: a dedicated non-blocking comm stream of the highest priority. Every hand-over is an event, never a
// host sync: WaitForCompute makes the comm stream wait for everything queued on the compute stream so far
// (the backward kernels that produced a bucket, the update that produced the params); JoinCompute makes the
// compute stream wait for everything queued on the comm stream so far (the comm stream is in order, so one
// event covers every collective launched before). A join may be timed as one of `num_gaps` gaps: timing
// events on the compute stream just before and just after its wait, whose distance is how long the compute
// stream stalled on communication — the exposed communication of that wait.
// CPU: no stream; collectives block the calling thread, so all of their time is exposed: Exposed(fn) adds
// fn's host time to the account.
//
// Exposed communication per synced step (TakeExposedMs): GPU — the sum of the timed gaps of the last step
// that recorded them (synchronizes with that step: call at log points only); CPU — the host time spent in
// Exposed() since the previous call, divided by the synced steps counted (CountSyncedStep) since then.
//
// Ownership: borrows ctx (must outlive this). Owns the stream and events; the destructor waits for the
// comm stream, so its owner declares it after (destroys it before) every buffer the comm stream touches.
// Not thread-safe: call from the thread that drives ctx's compute stream.

#include <chrono>
#include <memory>
#include <string>

#include "core/device_context.h"
#include "core/status.h"

namespace dtrain::runtime {

class CommStream {
 public:
  static constexpr int kUntimed = -1;  // a JoinCompute that is not accounted as exposed communication

  // `owner` names the user in teardown messages; `num_gaps` (>= 1) timed joins per step (GPU).
  static Status Create(DeviceContext& ctx, std::string owner, int num_gaps, std::unique_ptr<CommStream>* out);
  ~CommStream();
  CommStream(const CommStream&) = delete;
  CommStream& operator=(const CommStream&) = delete;

  bool on_device() const { return gpu_ != nullptr; }
  cudaStream_t stream() const;  // nullptr on the CPU

  // GPU: the comm stream waits (on the device) for the compute stream's work so far. CPU: nothing.
  Status WaitForCompute();
  // GPU: the compute stream waits (on the device) for the comm stream's work so far, timed as `gap`
  // (0 .. num_gaps - 1) or kUntimed. CPU: nothing.
  Status JoinCompute(int gap);
  // Runs fn (blocking collectives); on the CPU its host time is exposed communication.
  template <typename Fn>
  Status Exposed(Fn&& fn) {
    if (on_device()) return fn();
    const auto t0 = std::chrono::steady_clock::now();
    const Status st = fn();
    cpu_exposed_s_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    return st;
  }
  void CountSyncedStep() { ++synced_steps_; }
  // Exposed communication per synced step, in ms (see the file comment).
  Status TakeExposedMs(double* ms);

 private:
  struct GpuState;  // stream and events (CUDA builds only)
  CommStream() = default;

  DeviceContext* ctx_ = nullptr;
  std::string owner_;
  int num_gaps_ = 1;
  std::unique_ptr<GpuState> gpu_;
  double cpu_exposed_s_ = 0;
  int64_t synced_steps_ = 0;
};

}  // namespace dtrain::runtime
