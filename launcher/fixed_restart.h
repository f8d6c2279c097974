#pragma once
// The fixed restart policy (launcher/restart_policy.h) of `dtrain launch` without --nnodes MIN:MAX: every attempt
// runs the same job on the same hosts (mpirun, srun or the per-node start), only DTRAIN_RESTART_COUNT changes.
// An attempt ends done, stopped or failed (BasicKind); at most --max-restarts failures are restarted. Logs name
// attempt n "attempt n of max_restarts+1". Writes no elastic.jsonl.

#include <memory>

#include "launcher/launch_command.h"
#include "launcher/launch_options.h"
#include "launcher/restart_policy.h"

namespace dtrain::launcher {

// `opts` and `env` must outlive the policy.
std::unique_ptr<RestartPolicy> MakeFixedRestartPolicy(const LaunchOptions& opts, const LaunchEnv& env);

}  // namespace dtrain::launcher
