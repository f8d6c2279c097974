#include "launcher/cli.h"

#include <cstdio>
#include <string>
#include <vector>

#include "core/status.h"
#include "launcher/bench_cmd.h"
#include "launcher/ckpt_cmd.h"
#include "launcher/data_cmd.h"
#include "launcher/doctor_cmd.h"
#include "launcher/exit_codes.h"
#include "launcher/launch.h"
#include "launcher/rank_exec.h"
#include "launcher/report_cmd.h"
#include "launcher/train_cmd.h"

namespace {

constexpr const char* kUsage =
    "usage: dtrain <command> [args]\n"
    "\n"
    "commands:\n"
    "  launch [options] CONFIG [--set k=v ...]  start one worker per GPU (or CPU rank) across nodes and supervise "
    "them\n"
    "  train CONFIG [--set k=v ...]            run one worker (what `launch` starts; also under mpirun/srun)\n"
    "  doctor                                  check driver, CUDA, cuBLAS, cuDNN, NCCL, MPI and the GPUs\n"
    "  bench allreduce [options]               all-reduce bandwidth, nccl-tests style (under mpirun -np N)\n"
    "  ckpt list|verify|inspect|export URL     look into checkpoints; export the weights as safetensors\n"
    "  data convert-*|inspect|verify           make and check sharded datasets (docs/data_format.md)\n"
    "  report RUN_DIR [--price P]              run summary: wall time, GPU-hours, cost, restarts, recompute\n"
    "  rank-exec PROGRAM [ARGS...]             (what `launch` runs under mpirun) run one rank, report its end\n"
    "  version                                 print the version\n"
    "\n"
    "`dtrain <command> --help` shows a command's options. Docs: README.md, docs/architecture.md\n";

int ExitCodeFor(const dtrain::Status& st) {
  using Code = dtrain::Status::Code;
  switch (st.code()) {
    case Code::kOk:
      return 0;
    case Code::kInvalidArgument:
    case Code::kNotFound:
    case Code::kDataLoss:
      return dtrain::launcher::kExitUsage;  // bad input: a restart would not fix it
    case Code::kPreempted:
      return dtrain::launcher::kExitPreempted;
    default:
      return dtrain::launcher::kExitFailure;
  }
}

int Report(const dtrain::Status& st) {
  if (!st.ok()) std::fprintf(stderr, "dtrain: error: %s\n", st.ToString().c_str());
  return ExitCodeFor(st);
}

}  // namespace

namespace dtrain::launcher {

int Main(int argc, char** argv) {
  if (argc < 2) {
    std::fputs(kUsage, stderr);
    return dtrain::launcher::kExitUsage;
  }
  const std::string cmd = argv[1];
  std::vector<std::string> args(argv + 2, argv + argc);
  if (cmd == "launch") return dtrain::launcher::RunLaunch(args);
  if (cmd == "train") return Report(dtrain::launcher::RunTrain(&argc, &argv, args));
  if (cmd == "doctor") return Report(dtrain::launcher::RunDoctor(args));
  if (cmd == "bench") return Report(dtrain::launcher::RunBench(&argc, &argv, args));
  if (cmd == "ckpt") return Report(dtrain::launcher::RunCkpt(args));
  if (cmd == "data") return Report(dtrain::launcher::RunData(args));
  if (cmd == "report") return Report(dtrain::launcher::RunReport(args));
  if (cmd == "rank-exec") return dtrain::launcher::RunRankExec(args);
  if (cmd == "version" || cmd == "--version") {
    std::printf("dtrain %s\n", DTRAIN_VERSION);
    return 0;
  }
  if (cmd == "help" || cmd == "--help" || cmd == "-h") {
    std::fputs(kUsage, stdout);
    return 0;
  }
  std::fprintf(stderr,
               "dtrain: error: unknown command '%s' (expected launch, train, doctor, bench, ckpt, data, report, "
               "rank-exec, version)\n%s",
               cmd.c_str(), kUsage);
  return dtrain::launcher::kExitUsage;
}

}  // namespace dtrain::launcher
