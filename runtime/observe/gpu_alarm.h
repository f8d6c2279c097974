#pragma once
// GpuAlarm: the "you are paying for an idle GPU" and "the driver is slowing this GPU down" alarms, decided from
// GpuTelemetry's per-window summaries. A GPU under `idle_util_pct` percent busy in consecutive windows adding up
// to `idle_s` seconds is idle: reported once, and again only after a busy window ended the idle stretch. A
// throttle reason is reported when the set of reasons changes to a non-empty one. With `exit_when_idle`, the idle
// verdict also asks the run to stop (the trainer checkpoints and exits 75, as on a preemption signal).
//
// Pure bookkeeping (no clock, no I/O): the caller passes each window and its length. Not thread-safe: one caller.

#include <string>

#include "runtime/observe/gpu_telemetry.h"

namespace dtrain::runtime {

struct GpuAlarmOptions {
  double idle_util_pct = 30;    // run.gpu_idle_util_pct
  double idle_s = 60;           // run.gpu_idle_s
  bool exit_when_idle = false;  // run.gpu_idle_exit
};

// What one window raised; empty strings mean nothing new to report.
struct GpuAlarmEvents {
  std::string idle;      // "under 30% busy for 64 s (12% now)"
  std::string throttle;  // "power cap, thermal (software)"
  bool stop = false;     // idle with exit_when_idle: the run should checkpoint and stop
};

class GpuAlarm {
 public:
  explicit GpuAlarm(const GpuAlarmOptions& opts) : opts_(opts) {}
  // Feeds one window of `window_s` seconds (windows with no samples are ignored: nothing was read).
  GpuAlarmEvents Observe(const GpuWindow& w, double window_s);
  double idle_s() const { return idle_s_; }  // length of the current idle stretch

 private:
  GpuAlarmOptions opts_;
  double idle_s_ = 0;
  bool idle_reported_ = false;
  std::string throttle_reported_;
};

}  // namespace dtrain::runtime
