// The real binary's command line (launcher/cli/cli.cc): every subcommand answers --help with its flags and
// an example, and each class of parse error is one `dtrain <command>: error: ...` line with exit 2.

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "launcher/exit_codes.h"
#include "tests/testing/subprocess.h"

namespace dtrain::launcher {
namespace {

using testing::DtrainBin;
using testing::ProcessResult;
using testing::RunCommand;

struct HelpCase {
  std::string command;
  std::vector<std::string> must_name;  // flags (and positionals) the help must list
};

TEST(CliE2E, EverySubcommandAnswersHelpWithItsFlagsAndAnExample) {
  const std::vector<HelpCase> cases = {
      {"launch",
       {"--nproc-per-node",
        "--nproc_per_node",
        "--nnodes",
        "--hosts",
        "--hostfile",
        "--max-restarts",
        "--max_restarts",
        "--log-dir",
        "--grace-seconds",
        "--backend",
        "--mpirun-arg",
        "--resume",
        "--set",
        "--dry-run",
        "--node-rank",
        "--master-addr",
        "--master-port",
        "--elastic-batch",
        "--rejoin-after",
        "--wait-for-hosts",
        "CONFIG"}},
      {"train", {"--set", "--resume", "CONFIG"}},
      {"doctor", {"--help"}},
      {"bench allreduce", {"--min-bytes", "--max-bytes", "--factor", "--iters", "--warmup", "--dtype", "--backend"}},
      {"ckpt list", {"URL"}},
      {"ckpt verify", {"URL", "--step"}},
      {"ckpt inspect", {"URL", "--step"}},
      {"ckpt export", {"URL", "--out", "--step", "--format", "--overwrite"}},
      {"data convert-fashion-mnist", {"--src", "--out", "--samples-per-shard", "--split"}},
      {"data convert-text", {"--out", "--dtype", "--seq-len", "--samples-per-shard", "FILES"}},
      {"data inspect", {"DIR"}},
      {"data verify", {"DIR"}},
      {"data bench", {"DIR", "--threads", "--batch", "--batches", "--prefetch", "--device"}},
      {"report", {"RUN_DIR", "--price", "--price-spot", "--price-on-demand"}},
      {"rank-exec", {"PROGRAM"}},
      {"config show", {"CONFIG", "--set", "--defaults", "--diff"}},
      {"completion bash", {"--help"}},
      // The groups list their commands.
      {"bench", {"allreduce"}},
      {"ckpt", {"list", "verify", "inspect", "export"}},
      {"data", {"convert-fashion-mnist", "convert-text", "inspect", "verify", "bench"}},
      {"config", {"show"}},
      {"completion", {"bash"}},
      {"version", {"--help"}},
      {"help", {"--help"}},
  };
  for (const auto& c : cases) {
    for (const std::string flag : {"--help", "-h"}) {
      SCOPED_TRACE(c.command + " " + flag);
      const ProcessResult r = RunCommand(DtrainBin() + " " + c.command + " " + flag);
      EXPECT_EQ(r.exit_code, kExitOk) << r.output;
      EXPECT_NE(r.output.find("Usage: dtrain " + c.command + " "), std::string::npos) << r.output;
      EXPECT_NE(r.output.find("example: "), std::string::npos) << r.output;
      for (const auto& name : c.must_name) EXPECT_NE(r.output.find(name), std::string::npos) << name;
    }
  }
  const ProcessResult top = RunCommand(DtrainBin() + " --help");
  EXPECT_EQ(top.exit_code, kExitOk);
  EXPECT_NE(top.output.find("example: dtrain launch"), std::string::npos) << top.output;
  for (const char* cmd : {"launch", "train", "doctor", "bench", "ckpt", "data", "report", "rank-exec", "config",
                          "completion", "version"}) {
    EXPECT_NE(top.output.find("  " + std::string(cmd) + " "), std::string::npos) << cmd << "\n" << top.output;
  }
}

TEST(CliE2E, EachParseErrorIsOneLineExitTwo) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      // unknown flag
      {"launch --frobnicate c.yaml", "dtrain launch: error: unknown flag '--frobnicate' (see `dtrain launch --help`)"},
      {"train c.yaml --epochs 3", "dtrain train: error: unknown flag '--epochs' (see `dtrain train --help`)"},
      {"ckpt list /tmp/x --step 3", "dtrain ckpt list: error: unknown flag '--step' (see `dtrain ckpt list --help`)"},
      // missing value
      {"report runs/x --price", "dtrain report: error: --price: missing value"},
      {"launch c.yaml --nnodes", "dtrain launch: error: --nnodes: missing value"},
      {"data convert-text --out", "dtrain data convert-text: error: --out: missing value"},
      // bad number
      {"data bench d --threads two", "dtrain data bench: error: --threads: expected a positive integer, got 'two'"},
      {"launch --max_restarts -1 c.yaml",
       "dtrain launch: error: --max-restarts: expected a non-negative integer, got '-1'"},
      {"ckpt verify /tmp/x --step 1e3", "dtrain ckpt verify: error: --step: expects a step number, got '1e3'"},
      {"bench allreduce --iters many", "dtrain bench allreduce: error: --iters: expects an integer, got 'many'"},
      // bad choice, missing operand, unknown command, a flag given a value
      {"data convert-text --out o --dtype int8 a.txt",
       "dtrain data convert-text: error: --dtype: expected auto|uint16|uint32, got 'int8'"},
      {"ckpt export /tmp/x", "dtrain ckpt export: error: --out FILE is required"},
      {"ckpt verify", "dtrain ckpt verify: error: missing URL (usage: dtrain ckpt verify URL)"},
      {"train", "dtrain train: error: missing CONFIG (usage: dtrain train CONFIG [--set key=value ...])"},
      {"trian c.yaml",
       "dtrain: error: unknown command 'trian' (expected one of: launch, train, doctor, bench, ckpt, "
       "data, report, config, rank-exec, completion, version, help)"},
      {"data",
       "dtrain data: error: expected a command (one of: convert-fashion-mnist, convert-text, train-tokenizer, "
       "import-tokens, inspect, verify, bench)"},
      {"launch --dry-run=yes c.yaml", "dtrain launch: error: --dry-run: takes no value"},
      {"config show c.yaml --defaults --diff", "dtrain config show: error: --defaults excludes --diff"},
  };
  for (const auto& [args, line] : cases) {
    SCOPED_TRACE(args);
    const ProcessResult r = RunCommand(DtrainBin() + " " + args);
    EXPECT_EQ(r.exit_code, kExitUsage) << r.output;
    EXPECT_EQ(r.output, line + "\n");
  }
}

TEST(CliE2E, TorchrunSpellingsReachTheLaunchCommand) {
  const ProcessResult r =
      RunCommand(DtrainBin() + " launch --backend mpirun --nproc_per_node 3 --max_restarts=1 --dry-run " DT_SOURCE_DIR
                               "/configs/gpt2_tiny.yaml");
  EXPECT_EQ(r.exit_code, kExitOk) << r.output;
  EXPECT_NE(r.output.find("-np 3"), std::string::npos) << r.output;
}

TEST(CliE2E, AnOperandThatNamesACommandIsAnOperand) {
  const ProcessResult r = RunCommand(DtrainBin() + " report launch");
  EXPECT_EQ(r.exit_code, kExitUsage) << r.output;
  EXPECT_EQ(r.output, "dtrain: error: NotFound: no metrics file 'launch' (is this a dtrain run directory?)\n");
}

TEST(CliE2E, VersionAndNoCommand) {
  ProcessResult r = RunCommand(DtrainBin() + " version");
  EXPECT_EQ(r.exit_code, kExitOk);
  EXPECT_EQ(r.output.rfind("dtrain ", 0), 0u) << r.output;
  EXPECT_EQ(RunCommand(DtrainBin() + " --version").output, r.output);
  r = RunCommand(DtrainBin());
  EXPECT_EQ(r.exit_code, kExitUsage);
  EXPECT_NE(r.output.find("Usage: dtrain [OPTIONS] [SUBCOMMAND]"), std::string::npos) << r.output;
}

}  // namespace
}  // namespace dtrain::launcher
