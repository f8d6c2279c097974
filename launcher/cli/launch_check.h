#pragma once
// `dtrain launch`'s check of the run before any rank starts (launcher/launch.h PreStartCheck): the launcher's
// supervision (launcher/, the library dtrain_supervise) knows nothing of the training runtime; the command line
// (launcher/cli/cli.cc) hands it this check, which does.

#include <string>

#include "core/status.h"
#include "launcher/launch_command.h"
#include "launcher/launch_options.h"

namespace dtrain::launcher {

// Loads CONFIG with its --set overrides and checks it and its data at the job's world size; prints the
// check's warnings once. A per-node start of more than one rank needs the GPU path: the CPU path reduces
// gradients with MPI, which processes started without a process manager cannot form. The memory plan must fit
// (runtime/train/memory_fit.h: the GPU here, GPU 0's memory standing for every rank's, or train.memory_budget_gib);
// *memory_plan gets its description ("" when the model has none). A PreStartCheck.
Status CheckRunBeforeStart(const LaunchOptions& opts, const LaunchEnv& env, const LaunchCommand& cmd, bool* on_cuda,
                           std::string* memory_plan);

}  // namespace dtrain::launcher
