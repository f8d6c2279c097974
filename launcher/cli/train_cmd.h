#pragma once
// `dtrain train CONFIG [--set k=v ...]`: one training worker.
//
// Started by `dtrain launch` (through mpirun/srun), directly by `mpirun`/`srun --mpi=pmix`, or by
// hand as a single process. This file is the command line only; the worker itself (environment, MPI world,
// config, device, communicators, Trainer) is runtime::RunWorker (runtime/train/worker.h). argc/argv are handed to
// MPI_Init.

#include <string>
#include <vector>

#include "core/status.h"

namespace CLI {
class App;
}  // namespace CLI

namespace dtrain::launcher {

struct TrainArgs {
  std::string config;                  // CONFIG
  std::vector<std::string> overrides;  // --set values ("key=value") and --resume as checkpoint.resume=V, in order
};

// Registers `train CONFIG [--set k=v ...] [--resume auto|never|STEP]` on `parent` (launcher/cli_parse.h);
// *out must outlive `parent`.
CLI::App* AddTrainCommand(CLI::App* parent, TrainArgs* out);

// Runs the worker. argc/argv are the process's own (handed to MPI_Init); `args` were parsed from them. A worker started
// by hand that stopped with a checkpoint (SIGINT, SIGTERM, run.gpu_idle_exit: Status::Preempted, exit 75) has its
// message end with "; to resume: COMMAND", the exact command (argv[0], CONFIG, the --set values without --resume and
// --overwrite) that resumes from that checkpoint.
Status RunTrain(int* argc, char*** argv, const TrainArgs& args);

}  // namespace dtrain::launcher
