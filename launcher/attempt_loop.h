#pragma once
// RunWithRestarts: the one restart loop of `dtrain launch`, for every launch backend (launcher/launch_backend.h:
// mpirun, srun, per-node) and every restart policy (launcher/restart_policy.h: fixed, elastic over a hostfile,
// elastic under Slurm). Installs the SupervisorScope (signals, subreaper) for the whole run, then runs attempt 0,
// 1, ... as restart_policy.h describes, until one is done or the decision is an exit code:
//   done                     exit 0;
//   stopped                  SIGINT/SIGTERM to the launcher -> 128+signal (75 when the ranks saved and exited 75);
//                            exit 75 -> 75 (requeue me); exit 2 (a usage, config or credentials error) -> 2, never
//                            retried;
//   failure                  counted; restarted while fewer than --max-restarts failures were counted, else the
//                            root cause's code;
//   lost host, notice, grow  restarted, not counted.
// Messages and the decision itself are AfterFailure's (launcher/attempt_outcome.h).

#include "launcher/launch_backend.h"
#include "launcher/restart_policy.h"

namespace dtrain::launcher {

// Returns the launcher's exit code (launcher/exit_codes.h). `backend` and `policy` are used by this thread only.
int RunWithRestarts(LaunchBackend* backend, RestartPolicy* policy, int max_restarts);

}  // namespace dtrain::launcher
