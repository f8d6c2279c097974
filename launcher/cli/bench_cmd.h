#pragma once
// `dtrain bench allreduce [options]`: the all-reduce bandwidth benchmark (comm/allreduce_bench.h)
// as one worker per GPU (or CPU rank). Not started through `dtrain launch` (which starts
// `dtrain train`): run it directly under the process manager,
//   mpirun -np 8 dtrain bench allreduce                 (NCCL on each rank's GPU, by local rank)
//   mpirun -np 4 dtrain bench allreduce --backend mpi   (Open MPI on the CPU)
//   srun --mpi=pmix -n 16 dtrain bench allreduce
// or alone as one process. Rank 0 prints an nccl-tests-like table to stdout; logs go to stderr.
// Errors: bad flags are InvalidArgument (exit 2); wrong all-reduce results are Internal (exit 1).

#include <cstdint>
#include <string>
#include <vector>

#include "comm/allreduce_bench.h"
#include "core/status.h"

namespace CLI {
class App;
}  // namespace CLI

namespace dtrain::launcher {

struct AllReduceBenchArgs {
  comm::AllReduceBenchOptions bench;
  std::string backend;  // "nccl" | "mpi" | "" (nccl when a GPU is visible, else mpi)
  bool help = false;
};

// Registers `bench` and below it `bench allreduce` with its flags on `parent` (launcher/cli_parse.h);
// *out must outlive `parent`. Returns the `allreduce` subcommand.
CLI::App* AddBenchCommand(CLI::App* parent, AllReduceBenchArgs* out);

// `dtrain bench allreduce [options]` with parsed options. argc/argv go to MPI_Init.
Status RunAllreduceBench(int* argc, char*** argv, AllReduceBenchArgs args);

// Pure parsing of the options after `allreduce` (`--flag value` or `--flag=value`); every error names the flag.
Status ParseAllreduceBenchArgs(const std::vector<std::string>& args, AllReduceBenchArgs* out);

// "8", "512K", "256M", "1G" (K/M/G are powers of 1024; also KB/MB/GB/KiB/MiB/GiB) -> bytes.
Status ParseByteSize(const std::string& text, int64_t* bytes);

}  // namespace dtrain::launcher
