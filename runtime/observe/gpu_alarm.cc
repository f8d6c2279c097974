#include "runtime/observe/gpu_alarm.h"

#include <fmt/format.h>

namespace dtrain::runtime {

GpuAlarmEvents GpuAlarm::Observe(const GpuWindow& w, double window_s) {
  GpuAlarmEvents ev;
  if (w.samples == 0) return ev;
  idle_s_ = w.util_pct < opts_.idle_util_pct ? idle_s_ + window_s : 0;
  const bool idle = idle_s_ >= opts_.idle_s;
  if (idle && !idle_reported_) {
    ev.idle = fmt::format("under {:.0f}% busy for {:.0f} s ({:.0f}% now)", opts_.idle_util_pct, idle_s_, w.util_pct);
  }
  idle_reported_ = idle;
  ev.stop = idle && opts_.exit_when_idle;
  const std::string throttle = w.ThrottleText();
  if (!throttle.empty() && throttle != throttle_reported_) ev.throttle = throttle;
  throttle_reported_ = throttle;
  return ev;
}

}  // namespace dtrain::runtime
