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
//   - the command of attempt n: BuildLaunchCommand (launcher/launch_command.h) for LaunchCommand::backend, called
//     by the restart policy (launcher/restart_policy.h), which may change the hosts and the batch between attempts;
//   - output tagging and the process manager's failure report: its OutputDialect (launcher/output_dialect.h);
//   - the attempt's run, its root cause and the text of its failure report: RunAttempt below.
// The restart decision is the loop's (launcher/attempt_loop.h), the same for every backend and policy.

#include <memory>
#include <string>

#include "core/status.h"
#include "launcher/launch_command.h"
#include "launcher/launch_options.h"
#include "launcher/restart_policy.h"
#include "launcher/supervisor.h"

namespace dtrain::launcher {

class LaunchBackend {
 public:
  virtual ~LaunchBackend() = default;
  // Runs `plan.cmd` (attempt `plan.attempt`, 0-based: DTRAIN_RESTART_COUNT) to its end: logs `plan.title` and the
  // command, then fills `end` (its failure report as text: the root-cause rank, its host, code and last lines, for
  // the loop to log). Non-OK only when the attempt could not run at all (no peer nodes, fork failure): not
  // restartable.
  virtual Status RunAttempt(const AttemptPlan& plan, SupervisorScope* scope, AttemptEnd* end) = 0;
};

// The backend that runs the commands of `opts` on this machine: mpirun or srun (the process manager BuildLaunchCommand
// resolves), or the per-node start for --node-rank. It reads --log-dir and --grace from `opts` (and the per-node
// start its node rank and count); `opts` and `env` must outlive it.
std::unique_ptr<LaunchBackend> MakeLaunchBackend(const LaunchOptions& opts, const LaunchEnv& env, Backend backend);

}  // namespace dtrain::launcher
