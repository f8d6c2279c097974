#pragma once
// What `dtrain launch` makes of an attempt's end: the exit code for the launcher's own error, the root cause, the
// restart decision (the attempt loop's, launcher/attempt_loop.h) and the failure report (the backends',
// launcher/launch_backend.h). Shared so that every backend and restart policy reports and decides alike.

#include <string>

#include "core/status.h"
#include "launcher/launch_command.h"
#include "launcher/output_router.h"
#include "launcher/supervisor.h"

namespace dtrain::launcher {

// Prints "dtrain launch: error: MESSAGE" to stderr; returns kExitUsage.
int UsageError(const Status& st);
// An error of the launcher itself (not of a rank): printed as one "dtrain launch: error: ..." line (the message
// alone for a usage error), then mapped by ExitCodeFor (launcher/exit_codes.h) as every command's Status is.
int LaunchError(const Status& st);

// The root cause of a failed attempt, completed from what the launcher knows itself (the host of the rank; the
// process manager's exit code when no rank reported one).
RankExit RootCause(const OutputRouter& router, const LaunchCommand& cmd, const AttemptResult& result);

// The decision after a failed attempt, the `failures`-th counted one (0-based): -1 restart (logged, as restart
// `failures + 1` of `max_restarts`, the next attempt's DTRAIN_RESTART_COUNT being `next_attempt`), else the
// launcher's exit code. `who` names the root cause in the log ("rank 3").
int AfterFailure(int code, int stop_signal, int failures, int max_restarts, int next_attempt, const std::string& who);

// The failure report: the root-cause rank, its host and code, `when` in parentheses ("attempt 2 of 4"), and the
// rank's last lines (several lines of text, for one log record).
std::string FailureReport(const RankExit& cause, const OutputRouter& router, const LaunchCommand& cmd,
                          const std::string& when);

}  // namespace dtrain::launcher
