#include "launcher/restart_policy.h"

#include "launcher/exit_codes.h"

namespace dtrain::launcher {

const char* AttemptKindName(AttemptKind kind) {
  switch (kind) {
    case AttemptKind::kDone:
      return "done";
    case AttemptKind::kLostHost:
      return "lost_host";
    case AttemptKind::kNotice:
      return "notice";
    case AttemptKind::kGrow:
      return "grow";
    case AttemptKind::kFailure:
      return "failure";
    case AttemptKind::kStopped:
      return "stopped";
  }
  return "failure";
}

AttemptKind BasicKind(const AttemptEnd& end) {
  if (end.done) return AttemptKind::kDone;
  if (end.stop_signal != 0 || end.exit_code == kExitPreempted || end.exit_code == kExitUsage) {
    return AttemptKind::kStopped;
  }
  return AttemptKind::kFailure;
}

}  // namespace dtrain::launcher
