#pragma once
// What the supervising loops of `dtrain launch` (launcher/attempt_loop.cc, launcher/elastic_launch.cc,
// launcher/slurm_elastic.cc) make of an attempt's end: the exit code for the launcher's own error, the root cause,
// the restart decision and the failure report. Shared so that the plain, per-node and elastic loops report and
// decide alike.

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

// The decision after a failed attempt: -1 restart (logged, as restart `attempt + 1` of `max_restarts`), else the
// launcher's exit code. `who` names the root cause in the log ("rank 3").
int AfterFailure(int code, int stop_signal, int attempt, int max_restarts, const std::string& who);

// Logs the failure: the root-cause rank, its host and code, `when` in parentheses ("attempt 2 of 4"), and the
// rank's last lines.
void ReportFailure(const RankExit& cause, const OutputRouter& router, const LaunchCommand& cmd,
                   const std::string& when);

}  // namespace dtrain::launcher
