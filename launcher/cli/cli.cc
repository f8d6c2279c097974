#include "launcher/cli/cli.h"

#include <CLI/CLI.hpp>
#include <cstdio>
#include <string>
#include <vector>

#include "core/status.h"
#include "launcher/cli/bench_cmd.h"
#include "launcher/cli/ckpt_cmd.h"
#include "launcher/cli/completion.h"
#include "launcher/cli/config_cmd.h"
#include "launcher/cli/data_cmd.h"
#include "launcher/cli/doctor_cmd.h"
#include "launcher/cli/launch_check.h"
#include "launcher/cli/report_cmd.h"
#include "launcher/cli/train_cmd.h"
#include "launcher/cli_parse.h"
#include "launcher/exit_codes.h"
#include "launcher/launch.h"
#include "launcher/rank_exec.h"
#include "runtime/config/config.h"

namespace dtrain::launcher {
namespace {

constexpr const char* kFooter =
    "`dtrain <command> --help` shows a command's flags; `dtrain completion bash` prints a bash completion\n"
    "script. Exit codes: 0 done, 1 failure, 2 usage/config/data error, 75 preempted (requeue), 128+N signal N.\n"
    "Docs: README.md, docs/architecture.md\n"
    "\n"
    "example: dtrain launch --nproc-per-node 2 configs/fashion_mnist_mlp.yaml\n";

int Report(const Status& st) {
  // A handled preemption is the expected end of a spot/Slurm attempt (exit 75: requeue), not an error.
  if (st.code() == Status::Code::kPreempted) {
    std::fprintf(stderr, "dtrain: warning: %s\n", st.message().c_str());
  } else if (!st.ok()) {
    std::fprintf(stderr, "dtrain: error: %s\n", st.ToString().c_str());
  }
  return ExitCodeFor(st);
}

int PrintText(const std::string& text) {
  std::fputs(text.c_str(), stdout);
  return kExitOk;
}

// Every command's parsed arguments; the CLI11 tree below writes into them.
struct CommandArgs {
  LaunchOptions launch;
  TrainArgs train;
  AllReduceBenchArgs bench;
  CkptArgs ckpt;
  DataArgs data;
  ReportArgs report;
  ConfigShowArgs config;
  bool version = false;
};

}  // namespace

int Main(int argc, char** argv) {
  CommandArgs a;
  CLI::App root("data-parallel training across GPUs and nodes", "dtrain");
  root.allow_extras();  // inherited by every subcommand: ParseWithCli names unknown words itself
  root.footer(kFooter);
  root.add_flag("--version", a.version, "print the version");
  CLI::App* launch = AddLaunchCommand(&root, &a.launch);
  CLI::App* train = AddTrainCommand(&root, &a.train);
  CLI::App* doctor = AddDoctorCommand(&root);
  CLI::App* bench = AddBenchCommand(&root, &a.bench);
  CLI::App* ckpt = AddCkptCommand(&root, &a.ckpt);
  CLI::App* data = AddDataCommand(&root, &a.data);
  CLI::App* report = AddReportCommand(&root, &a.report);
  CLI::App* config = AddConfigCommand(&root, &a.config);
  CLI::App* rank_exec =
      root.add_subcommand("rank-exec", "(what `launch` runs under mpirun) run one rank, report how it ended");
  rank_exec->prefix_command();  // PROGRAM and everything after it pass through untouched
  rank_exec->footer("usage: dtrain rank-exec PROGRAM [ARGS...]\n\nexample: dtrain rank-exec dtrain train c.yaml\n");
  CLI::App* completion = root.add_subcommand("completion", "print a shell completion script");
  completion->footer("example: source <(dtrain completion bash)\n");
  CLI::App* completion_bash = completion->add_subcommand("bash", "the bash completion script");
  completion_bash->footer("example: source <(dtrain completion bash)\n");
  CLI::App* version = root.add_subcommand("version", "print the version");
  version->footer("example: dtrain version\n");
  CLI::App* help = root.add_subcommand("help", "print this text");
  help->footer("example: dtrain help\n");
  const std::string usage = root.help();

  if (argc < 2) {
    std::fputs(usage.c_str(), stderr);
    return kExitUsage;
  }
  ParseResult parsed;
  const Status st = ParseWithCli(&root, std::vector<std::string>(argv + 1, argv + argc), &parsed);
  if (!st.ok()) {
    std::fprintf(stderr, "dtrain%s%s: error: %s\n", parsed.command.empty() ? "" : " ", parsed.command.c_str(),
                 st.message().c_str());
    return kExitUsage;
  }
  if (parsed.help) return PrintText(parsed.help_text);
  if (a.version || version->parsed()) return PrintText(std::string("dtrain ") + DTRAIN_VERSION + "\n");
  if (help->parsed()) return PrintText(usage);
  if (launch->parsed()) return LaunchWith(a.launch, CheckRunBeforeStart);
  if (train->parsed()) return Report(RunTrain(&argc, &argv, a.train));
  if (doctor->parsed()) return Report(RunDoctor());
  if (bench->parsed()) return Report(RunAllreduceBench(&argc, &argv, a.bench));
  if (ckpt->parsed()) return Report(RunCkpt(a.ckpt));
  if (data->parsed()) return Report(RunDataCommand(a.data));
  if (report->parsed()) return Report(RunReport(a.report));
  if (rank_exec->parsed()) return RunRankExec(rank_exec->remaining());
  if (config->parsed()) {
    std::string yaml;
    const Status show = ShowConfig(a.config, &yaml);
    return show.ok() ? PrintText(yaml) : Report(show);
  }
  if (completion_bash->parsed()) return PrintText(BashCompletionScript(&root, runtime::ConfigKeys()));
  std::fputs(usage.c_str(), stderr);  // not reached: ParseWithCli requires a command
  return kExitUsage;
}

}  // namespace dtrain::launcher
