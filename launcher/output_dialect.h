#pragma once
// OutputDialect: what a process manager's output means, one per launch backend that has one
// (launcher/launch_backend.h): how a rank's line is tagged, and how the manager reports the first process that
// failed. The OutputRouter (launcher/output_router.h) asks it about every line; adding a process manager means
// one more dialect here, nothing in the router.
//   mpirun  --tag-output: "[J,R]<stdout>:text"; report (Open MPI 4.x help-orterun.txt, stable since 1.x):
//           "Process name: [[J,1],R]" then "Exit code: C"; "mpirun noticed that process rank R with PID P on node H
//           exited on signal S (Name)."; "... process rank R with PID P on node H exiting improperly" (no code:
//           mpirun's own exit code stands). Its messages are framed by lines of dashes; two only restate exit codes
//           ("Primary job  terminated normally, but N process returned a non-zero exit code...", "mpirun detected
//           that one or more processes exited with non-zero status..."): exit banners.
//   srun    --label: "  3: text" (padded to the width of the largest rank); report: "srun: error: H: task R: Exited
//           with exit code C" / "srun: error: H: tasks R-S: Killed" (a signal's strsignal() text).
// The per-node backend has no process manager: each worker's pipes are its rank's own lines
// (OutputRouter::FeedRank), so no dialect is asked.

#include <memory>
#include <string>
#include <vector>

#include "launcher/launch_options.h"

namespace dtrain::launcher {

// How a rank ended, as the process manager (or the rank's rank-exec) reported it.
struct RankExit {
  int rank = -1;        // -1: no report seen
  std::string host;     // "" when the report does not name it
  int exit_code = -1;   // -1: unknown (died by signal, or not reported)
  int signal = 0;       // > 0: died by this signal
  double ended_at = 0;  // when it ended, Unix seconds, from its rank-exec line (launcher/rank_exec.h); 0: unknown
  // 128+signal, else exit_code (-1 when neither is known).
  int ProcessExitCode() const;
  std::string Describe() const;  // "exit code 3" / "signal 9 (Killed)"
};

// What the process manager's own lines said so far.
struct ManagerReport {
  RankExit root_cause;        // the first failing process it named (rank -1: none yet); the first report wins
  bool failure_seen = false;  // it reported a failure: the job is being torn down
  int pending_rank = -1;      // a report in progress (mpirun: "Process name" seen, its "Exit code" not yet)
};

class OutputDialect {
 public:
  virtual ~OutputDialect() = default;
  // A line that carries a rank's output: its rank, stream (is_stderr keeps the pipe's when the tag does not say)
  // and text. False for the process manager's own line.
  virtual bool SplitRankLine(const std::string& line, int* rank, bool* is_stderr, std::string* text) const = 0;
  // One of the process manager's own lines: updates `report` with what it says about a failure.
  virtual void ParseReportLine(const std::string& line, ManagerReport* report) const = 0;
  // The line that opens and closes the manager's framed messages (mpirun: a line of dashes); false when it has none.
  virtual bool IsFrameLine(const std::string& /*line*/) const { return false; }
  // A framed message (its lines, frames included) that only restates how ranks exited, e.g. mpirun's "Primary job
  // terminated normally, but 1 process returned a non-zero exit code": the launcher's own report says the same, so
  // the router holds it back, and shows it only for a failure (OutputRouter::ReleaseHeldBanners).
  virtual bool IsExitBanner(const std::vector<std::string>& /*message*/) const { return false; }
};

// The dialect of `backend`: srun's for kSrun, else mpirun's.
std::unique_ptr<const OutputDialect> MakeOutputDialect(Backend backend);

}  // namespace dtrain::launcher
