#pragma once
// `dtrain doctor`: checks the machine before a run — CUDA driver vs runtime, GPUs, cuBLAS, cuDNN,
// NCCL and MPI versions, and a GEMM on each GPU checked against the CPU. Prints a report to stdout.
// A machine without a GPU is a valid state (CPU training): it is reported plainly and is OK.
// Returns non-OK only when something present is broken (a GPU that computes wrong results, a
// driver older than the runtime).

#include "core/status.h"

namespace CLI {
class App;
}  // namespace CLI

namespace dtrain::launcher {

// Registers `doctor` (no flags) on `parent` (launcher/cli_parse.h).
CLI::App* AddDoctorCommand(CLI::App* parent);

Status RunDoctor();

}  // namespace dtrain::launcher
