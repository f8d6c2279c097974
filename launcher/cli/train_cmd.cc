#include "launcher/cli/train_cmd.h"

#include <CLI/CLI.hpp>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "launcher/cli_parse.h"
#include "launcher/exit_codes.h"
#include "launcher/launch_command.h"
#include "launcher/output_router.h"
#include "proto/config.pb.h"
#include "runtime/config/config.h"
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

// An override that only says how a run starts (--resume, --overwrite and their --set forms): not for its resume.
bool IsStartOverride(const std::string& kv) {
  return kv.rfind("checkpoint.resume=", 0) == 0 || kv.rfind("checkpoint.overwrite=", 0) == 0;
}

// The command that resumes a run of this command stopped with a checkpoint: the same program, CONFIG and overrides,
// without those that applied to the start only (the newest checkpoint is where it goes on from, and --overwrite
// again would move it aside); `--resume auto` / `checkpoint.overwrite=false` where CONFIG itself says otherwise.
std::string ResumeCommand(const std::string& program, const TrainArgs& args) {
  std::vector<std::string> kept;
  for (const std::string& kv : args.overrides) {
    if (!IsStartOverride(kv)) kept.push_back(kv);
  }
  std::string cmd = ShellQuote(program) + " train " + ShellQuote(args.config);
  for (const std::string& kv : kept) cmd += " --set " + ShellQuote(kv);
  proto::Config cfg;
  const bool read = runtime::LoadConfig(args.config, kept, &cfg).ok();  // changed since the start: say both
  if (!read || cfg.checkpoint().resume() != "auto") cmd += " --resume auto";
  if (!read || cfg.checkpoint().overwrite()) cmd += " --set checkpoint.overwrite=false";
  return cmd;
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
      ->check(ResumeValue())
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
  // Read before MPI_Init may rewrite argv: the program as it was typed, for the resume command.
  const std::string program = *argc > 0 && (*argv)[0] != nullptr ? (*argv)[0] : "dtrain";
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
  // Started by hand (Ctrl-C, SIGTERM, an idle GPU): the one line printed (launcher/cli/cli.cc) ends with the exact
  // command that resumes.
  if (st.code() == Status::Code::kPreempted && outcome.by_hand) {
    return Status::Preempted(st.message() + "; to resume: " + ResumeCommand(program, args));
  }
  return st;
}

}  // namespace dtrain::launcher
