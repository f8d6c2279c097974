#pragma once
// RunWithRestarts: the restart loop of `dtrain launch` on a fixed host set (--max-restarts K), for every launch
// backend (launcher/launch_backend.h: mpirun, srun, per-node). Installs the SupervisorScope (signals, subreaper)
// for the whole run, then runs attempt 0, 1, ... until one is done or AfterFailure (launcher/attempt_outcome.h)
// returns an exit code: 75 and 2 pass through unrestarted, a SIGINT/SIGTERM to the launcher ends the run, any
// other failure restarts the whole job while restarts are left (DTRAIN_RESTART_COUNT = the attempt), else the root
// cause's code. The elastic launches keep loops of their own (launcher/elastic_launch.h, slurm_elastic.h): their
// host set changes between attempts and some attempts do not count against --max-restarts.

#include "launcher/launch_backend.h"

namespace dtrain::launcher {

// Returns the launcher's exit code (launcher/exit_codes.h).
int RunWithRestarts(LaunchBackend* backend, int max_restarts);

}  // namespace dtrain::launcher
