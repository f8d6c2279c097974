#pragma once
// OutputRouter: splits the process manager's output into per-rank lines, routes them, and reads
// the failure report that names the root-cause rank.
//
// Per-line rank: mpirun runs with --tag-output ("[1,3]<stderr>:text"), srun with --label ("3: text").
// Untagged lines are the process manager's own; they go to the console's stderr (a framed message as a whole,
// when it closes; an exit banner, which only restates exit codes, is held back until the attempt's outcome is known:
// ReleaseHeldBanners) and are scanned for its failure report (the first report wins: it names the first failing
// process):
//   mpirun (Open MPI 4.x help-orterun.txt; stable since 1.x):
//     "The first process to do so was:" / "Process name: [[J,1],R]" / "Exit code: C"
//     "mpirun noticed that process rank R with PID P on node H exited on signal S (Name)."
//     "... process rank R with PID P on node H exiting improperly" (exit code: mpirun's own)
//   srun: "srun: error: H: task R: Exited with exit code C" / "srun: error: H: tasks R-S: Killed"
//         (a signal's strsignal() text)
// These are what the process manager itself observed (waitpid on the rank), so they stay right for
// ranks that die by SIGKILL or a segfault, which could not report anything themselves.
// Under mpirun each rank also runs under `dtrain rank-exec`, which writes "dtrain rank-exec: exit
// code C" / "...: signal S (Name)" as the rank's last line when it ends other than with 0
// (launcher/rank_exec.h), with the time it ended. The earliest such line is the root cause when mpirun's report is
// missing (Open MPI 4.1 sometimes leaves it out), or when the rank mpirun names ended later by its own line (ranks
// failing together, e.g. on a wrong credential: mpirun names the first end it noticed); those lines go to the rank's
// log file only.
//
// Spot notices: a worker whose spot watcher saw a termination notice for its host writes kSpotNoticeLine as a line
// of its own before it exits 75 (launcher/cli/train_cmd.cc); notice_ranks() are the ranks that did (their hosts are
// going away: the elastic launcher continues without them).
//
// Console: every line of rank 0 (stdout to stdout, stderr to stderr) and, of the other ranks, only
// lines that look like warnings or errors (dtrain's "W"/"E"/"C" level letter, or the words
// warn/error/fatal/abort in any case), prefixed "[rank N] ". With a log dir, every rank's complete
// output is appended to DIR/rank-N.log (opened on the rank's first line, headed by an attempt line)
// and the process manager's own lines to DIR/launcher.log.
//
// Not thread-safe: one supervising thread feeds it.

#include <cstdio>
#include <deque>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "launcher/launch_options.h"
#include "launcher/output_dialect.h"

namespace dtrain::launcher {

constexpr char kSpotNoticeLine[] = "dtrain train: spot notice: this host is going away";

class OutputRouter {
 public:
  struct Options {
    Backend backend = Backend::kMpirun;  // picks the OutputDialect (launcher/output_dialect.h)
    std::string log_dir;                 // "" = no files
    int attempt = 0;                     // DTRAIN_RESTART_COUNT of this run, for the log headers
    FILE* out = stdout;
    FILE* err = stderr;
    size_t tail_lines = 10;  // lines kept per rank for the failure report
    int console_rank = 0;    // the rank whose every line reaches the console (per-node start: the node's first)
  };
  explicit OutputRouter(Options options);
  ~OutputRouter();
  OutputRouter(const OutputRouter&) = delete;
  OutputRouter& operator=(const OutputRouter&) = delete;

  // Feeds bytes read from the process manager's stdout or stderr pipe; complete lines are handled
  // at once, a partial line waits for its end (or Finish()).
  void Feed(bool from_stderr, const char* data, size_t size);
  // Feeds bytes read from one rank's own stdout or stderr pipe (per-node start: no process manager tags the
  // lines); the lines are that rank's, handled as tagged lines are.
  void FeedRank(int rank, bool from_stderr, const char* data, size_t size);
  // End of both streams: handles trailing partial lines (and prints a framed message left open) and flushes files.
  void Finish();
  // The exit banners held back (OutputDialect::IsExitBanner) go to the console's stderr when `show`, else nowhere
  // (they are in DIR/launcher.log either way). The launcher shows them for a failure, not for exit 0, 2 (bad input,
  // already explained) or 75 (preempted), nor after a stop signal.
  void ReleaseHeldBanners(bool show);

  // A failure report (or an abort banner) has been seen: the job is being torn down.
  bool failure_seen() const { return report_.failure_seen; }
  // The root cause, rank -1 when nothing named one: the rank that ended first by the times of the rank-exec lines
  // when the process manager's report names a rank whose own line ended later; else the manager's report; else
  // the earliest rank-exec line by time, else the first one seen.
  RankExit root_cause() const;
  // mpirun could not start its daemons on some host (ssh failed, host unreachable, no dtrain there).
  bool daemons_failed() const { return daemons_failed_; }
  // Hosts whose Open MPI daemon mpirun lost ("ORTE has lost communication with a remote daemon ... Remote daemon:
  // [[J,0],N] on node HOST"), or whose node Slurm lost ("srun: error: Node failure on HOST"): the host, or every
  // process on it, is gone.
  const std::vector<std::string>& lost_daemon_hosts() const { return lost_daemon_hosts_; }
  // Ranks that wrote kSpotNoticeLine, in the order seen.
  const std::vector<int>& notice_ranks() const { return notice_ranks_; }
  // The last `tail_lines` lines of `rank` (both streams, in arrival order).
  std::vector<std::string> Tail(int rank) const;
  // First error opening a log file ("" if none); logging continues without that file.
  const std::string& log_error() const { return log_error_; }

 private:
  void HandleLine(bool from_stderr, const std::string& line);
  void HandleRankLine(int rank, bool is_stderr, const std::string& text);
  void HandleManagerLine(const std::string& line);
  bool ParseRankExecLine(int rank, const std::string& text);  // true: a rank-exec end line, recorded
  void PrintLines(const std::vector<std::string>& lines);     // to the console's stderr
  FILE* LogFile(const std::string& name);

  Options opts_;
  std::string partial_[2];
  std::map<int, std::string> rank_partial_[2];  // FeedRank's partial lines
  std::map<int, std::deque<std::string>> tails_;
  std::map<std::string, FILE*> files_;
  std::unique_ptr<const OutputDialect> dialect_;  // of opts_.backend: the lines' tags, the manager's report
  ManagerReport report_;                          // the process manager's report, and whether the job is failing
  RankExit first_rank_exit_;                      // from the first rank-exec end line
  RankExit earliest_rank_exit_;                   // from the rank-exec end line with the earliest time
  std::map<int, RankExit> rank_exits_;            // each rank's first rank-exec end line
  bool daemons_failed_ = false;
  std::vector<int> notice_ranks_;
  std::vector<std::string> lost_daemon_hosts_;
  std::vector<std::string> message_;  // the framed message being read (frame lines included); empty: none open
  std::vector<std::string> held_;     // exit banners held back, in order
  std::string log_error_;
};

// Exposed for tests: does this worker line look like a warning or an error?
bool LooksLikeWarningOrError(const std::string& text);

}  // namespace dtrain::launcher
