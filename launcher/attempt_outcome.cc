#include "launcher/attempt_outcome.h"

#include <cstdio>
#include <cstring>

#include "core/logging.h"
#include "launcher/exit_codes.h"

namespace dtrain::launcher {

int UsageError(const Status& st) {
  std::fprintf(stderr, "dtrain launch: error: %s\n", st.message().c_str());
  return kExitUsage;
}

int LaunchError(const Status& st) {
  const int code = ExitCodeFor(st);
  if (code == kExitUsage) return UsageError(st);
  if (code != kExitOk) std::fprintf(stderr, "dtrain launch: error: %s\n", st.ToString().c_str());
  return code;
}

RankExit RootCause(const OutputRouter& router, const LaunchCommand& cmd, const AttemptResult& result) {
  RankExit cause = router.root_cause();
  if (cause.rank >= 0 && cause.host.empty()) cause.host = cmd.placement.HostOfRank(cause.rank);
  if (cause.ProcessExitCode() < 0) {  // no report, or one without a code: take the manager's
    cause.exit_code = result.exit_code;
    cause.signal = 0;
  }
  return cause;
}

int AfterFailure(int code, int stop_signal, int failures, int max_restarts, int next_attempt, const std::string& who) {
  if (stop_signal != 0) {
    DT_LOG_WARN(kLauncher, "stopped by signal {} ({}); not restarting", stop_signal, strsignal(stop_signal));
    return code == kExitPreempted ? kExitPreempted : ExitCodeForSignal(stop_signal);
  }
  if (code == kExitPreempted) {
    DT_LOG_WARN(kLauncher, "{} exited {} (preempted, checkpoint saved): requeue the job to resume", who,
                kExitPreempted);
    return kExitPreempted;
  }
  if (code == kExitUsage) {
    DT_LOG_ERROR(kLauncher, "usage/config error (exit {}): not restarting", kExitUsage);
    return kExitUsage;
  }
  if (failures < max_restarts) {
    DT_LOG_WARN(kLauncher, "restarting the job ({} of {} restarts, DTRAIN_RESTART_COUNT={})", failures + 1,
                max_restarts, next_attempt);
    return -1;
  }
  return code > 0 ? code : kExitFailure;
}

std::string FailureReport(const RankExit& cause, const OutputRouter& router, const LaunchCommand& cmd,
                          const std::string& when) {
  std::string msg;
  if (cause.rank >= 0) {
    msg = "rank " + std::to_string(cause.rank) + " on host " + (cause.host.empty() ? "?" : cause.host) +
          " failed first: " + cause.Describe();
  } else {
    msg = cmd.argv[0] + " failed with exit code " + std::to_string(cause.exit_code) + " and named no rank";
  }
  if (router.daemons_failed()) {
    msg +=
        ": it could not start workers on every host (see its lines above): check that each host of "
        "--hosts/--hostfile resolves, is reachable by ssh without a password prompt, and has dtrain at the same path";
  }
  msg += " (" + when + ")";
  if (cause.rank >= 0) {
    const auto tail = router.Tail(cause.rank);
    msg += tail.empty() ? "; it printed nothing" : "; its last lines:";
    for (const auto& line : tail) msg += "\n  | " + line;
  }
  return msg;
}

}  // namespace dtrain::launcher
