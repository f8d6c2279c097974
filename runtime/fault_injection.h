#pragma once
// Fault injection for tests of failure handling, driven by one environment variable read once:
//
//   DTRAIN_FAULT="rank=1,step=5,action=error"
//     rank    which rank misbehaves (default: every rank)
//     step    at the start of which optimizer step (0-based; default 0)
//     action  error  the worker returns Status::Internal("injected fault ...") and exits 1
//             kill   the worker SIGKILLs itself (a crash: no cleanup, no message)
//             hang   the worker sleeps forever (peers block in the next collective)
//
// Unset: no effect and no cost beyond one integer compare per step. A malformed value is an
// InvalidArgument naming the variable, so a typo never silently disables a test's fault.

#include <cstdint>
#include <string>

#include "runtime/core/status.h"

namespace dtrain::runtime {

class FaultInjector {
 public:
  // Parses `spec` (the variable's value; empty = disabled).
  static Status Parse(const std::string& spec, FaultInjector* out);
  // Parses $DTRAIN_FAULT.
  static Status FromEnv(FaultInjector* out);

  // Called by the trainer at the start of every step.
  Status AtStep(int rank, int64_t step) const;
  bool enabled() const { return !action_.empty(); }

 private:
  int rank_ = -1;
  int64_t step_ = 0;
  std::string action_;
  std::string spec_;
};

}  // namespace dtrain::runtime
