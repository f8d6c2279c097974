#include "launcher/cli/train_cmd.h"

#include <CLI/CLI.hpp>
#include <cstdio>
#include <cstdlib>

#include "launcher/cli/cli_parse.h"
#include "launcher/exit_codes.h"
#include "launcher/output_router.h"
#include "runtime/train/worker.h"

namespace dtrain::launcher {
namespace {

// The watchdog's verdict: the job is lost (a collective hung or a peer died). The main thread may be
// blocked inside MPI, where nothing can interrupt it, so this ends the process from the watchdog
// thread: print the error as main() would, flush what the user must see, exit 1 without running
// destructors (they would wait on the hung collective). mpirun/srun then end the other ranks.
[[noreturn]] void ExitOnCollectiveFailure(const Status& st) {
  std::fprintf(stderr, "dtrain: error: %s\n", st.ToString().c_str());
  std::fflush(stdout);
  std::fflush(stderr);
  std::_Exit(kExitFailure);
}

}  // namespace

CLI::App* AddTrainCommand(CLI::App* parent, TrainArgs* out) {
  *out = TrainArgs();
  CLI::App* app =
      parent->add_subcommand("train", "run one worker (what `launch` starts; also under mpirun/srun --mpi=pmix)");
  app->footer(
      "example: mpirun -np 2 dtrain train configs/fashion_mnist_mlp.yaml --set optim.lr=0.01 "
      "--set model.mlp.hidden=[512,256]\n");
  app->add_option_function<std::string>(
         "--set", [out](const std::string& v) { out->overrides.push_back(v); },
         "override a config key, e.g. --set optim.lr=0.01; repeatable")
      ->type_name("key=value")
      ->trigger_on_parse();
  app->add_option_function<std::string>(
         "--resume", [out](const std::string& v) { out->overrides.push_back("checkpoint.resume=" + v); },
         "where to resume from (= --set checkpoint.resume=...; default auto)")
      ->type_name("auto|never|STEP")
      ->trigger_on_parse();
  app->add_flag_callback(
         "--overwrite", [out] { out->overrides.push_back("checkpoint.overwrite=true"); },
         "start over in a run directory that holds checkpoints: move them aside first; with --resume N, move the "
         "checkpoints newer than N aside and train on from N (= --set checkpoint.overwrite=true; without it such a "
         "start is refused)")
      ->trigger_on_parse();
  app->add_flag_callback(
         "--idle-exit", [out] { out->overrides.push_back("run.gpu_idle_exit=true"); },
         "a GPU idle for run.gpu_idle_s stops the run: checkpoint, then exit 75 (= --set run.gpu_idle_exit=true)")
      ->trigger_on_parse();
  app->add_option("CONFIG", out->config, "a YAML config (configs/*.yaml)");
  app->callback([out] {
    if (out->config.empty()) FailParse("missing CONFIG (usage: dtrain train CONFIG [--set key=value ...])");
  });
  return app;
}

Status RunTrain(int* argc, char*** argv, const TrainArgs& args) {
  runtime::WorkerRequest req;
  req.config_path = args.config;
  req.overrides = args.overrides;
  req.argc = argc;
  req.argv = argv;
  req.on_collective_failure = ExitOnCollectiveFailure;
  runtime::WorkerOutcome outcome;
  const Status st = runtime::RunWorker(req, &outcome);
  // Tells the launcher which host is going away (launcher/output_router.h): it continues without it.
  if (outcome.spot_noticed) std::fprintf(stderr, "%s\n", kSpotNoticeLine);
  return st;
}

}  // namespace dtrain::launcher
