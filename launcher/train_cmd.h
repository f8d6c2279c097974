#pragma once
// `dtrain train CONFIG [--set k=v ...]`: one training worker.
//
// Started by `dtrain launch` (through mpirun/srun), directly by `mpirun`/`srun --mpi=pmix`, or by
// hand as a single process. It finds its rank from the environment (comm/dist_env.h), joins the
// MPI world when a process manager started it, picks its GPU by local rank (or the CPU), loads the
// config, and runs the Trainer. argc/argv are handed to MPI_Init.

#include <string>
#include <vector>

#include "core/status.h"

namespace dtrain::launcher {

Status RunTrain(int* argc, char*** argv, const std::vector<std::string>& args);

}  // namespace dtrain::launcher
