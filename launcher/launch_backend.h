#pragma once
// LaunchBackend: how `dtrain launch` runs one attempt of a job — the seam between the restart loop
// (launcher/attempt_loop.h) and a way to start and watch processes. The backends:
//   mpirun  one `mpirun ... DTRAIN rank-exec WORKER train ...` per attempt, watched by RunAttempt
//           (launcher/supervisor.h); every line tagged by --tag-output.
//   srun    one `srun --mpi=pmix --label ... WORKER train ...` job step per attempt inside a Slurm allocation;
//           the same RunAttempt, lines tagged by --label.
//   node    this node's workers, started by the launcher itself after joining the other nodes' launchers
//           (launcher/node_link.h, launcher/node_workers.h); each worker's pipes are its own rank's lines.
// What a backend provides, and where:
//   - the command of attempt n: BuildLaunchCommand (launcher/launch_command.h) for LaunchCommand::backend;
//   - output tagging and the process manager's failure report: its OutputDialect (launcher/output_dialect.h);
//   - the attempt's run, its root cause and the failure report in the log: RunAttempt below.
// The restart decision is the loop's (launcher/attempt_outcome.h AfterFailure), the same for every backend.

#include <memory>
#include <string>

#include "core/status.h"
#include "launcher/launch_command.h"
#include "launcher/launch_options.h"
#include "launcher/supervisor.h"

namespace dtrain::launcher {

// How an attempt ended.
struct AttemptEnd {
  bool done = false;    // every rank exited 0
  int exit_code = 0;    // else: the root cause's code (the process manager's own when no rank was named)
  int stop_signal = 0;  // SIGINT/SIGTERM the launcher received during the attempt, else 0
  std::string who;      // the root cause, for the log: "rank 3", "mpirun"
};

class LaunchBackend {
 public:
  virtual ~LaunchBackend() = default;
  // Runs attempt `attempt` (0-based: DTRAIN_RESTART_COUNT) of at most `attempts` to its end: logs its command,
  // then how it ended (a failure: the root-cause rank, its host, code and last lines) and fills `end`. Non-OK
  // only when the attempt could not run at all (bad command, no peer nodes, fork failure): not restartable.
  virtual Status RunAttempt(int attempt, int attempts, SupervisorScope* scope, AttemptEnd* end) = 0;
};

// The backend that runs `opts` on this machine: mpirun or srun (the process manager BuildLaunchCommand resolves), or
// the per-node start for --node-rank. `opts` and `env` must outlive it.
std::unique_ptr<LaunchBackend> MakeLaunchBackend(const LaunchOptions& opts, const LaunchEnv& env, Backend backend);

}  // namespace dtrain::launcher
