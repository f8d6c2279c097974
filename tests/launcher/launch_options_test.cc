#include "launcher/launch_options.h"

#include <gtest/gtest.h>
#include <stdlib.h>

#include <string>
#include <vector>

#include "launcher/cli/launch_check.h"
#include "launcher/exit_codes.h"
#include "launcher/launch.h"

namespace dtrain::launcher {
namespace {

TEST(LaunchOptionsTest, ParsesEveryFlag) {
  LaunchOptions o;
  const std::vector<std::string> args = {"--nproc-per-node",
                                         "4",
                                         "--nnodes=2",
                                         "--hosts",
                                         "a:8,b:8",
                                         "--max-restarts",
                                         "3",
                                         "--log-dir",
                                         "/tmp/logs",
                                         "--grace-seconds=5",
                                         "--backend",
                                         "mpirun",
                                         "--mpirun-arg",
                                         "--oversubscribe",
                                         "--mpirun-arg=-v",
                                         "configs/x.yaml",
                                         "--set",
                                         "optim.lr=0.1",
                                         "--set=train.steps=10",
                                         "--dry-run"};
  ASSERT_TRUE(ParseLaunchArgs(args, &o).ok());
  EXPECT_EQ(o.nproc_per_node, "4");
  EXPECT_TRUE(o.nproc_given);
  EXPECT_EQ(o.nnodes, 2);
  EXPECT_EQ(o.hosts, "a:8,b:8");
  EXPECT_EQ(o.max_restarts, 3);
  EXPECT_EQ(o.log_dir, "/tmp/logs");
  EXPECT_EQ(o.grace_seconds, 5);
  EXPECT_EQ(o.backend, Backend::kMpirun);
  EXPECT_EQ(o.backend_args, (std::vector<std::string>{"--oversubscribe", "-v"}));
  EXPECT_EQ(o.config, "configs/x.yaml");
  EXPECT_EQ(o.sets, (std::vector<std::string>{"optim.lr=0.1", "train.steps=10"}));
  EXPECT_TRUE(o.dry_run);
}

TEST(LaunchOptionsTest, PerNodeFlagsAndTheirTorchrunSpellings) {
  LaunchOptions o;
  ASSERT_TRUE(
      ParseLaunchArgs(
          {"--nnodes", "3", "--node_rank", "2", "--master_addr", "10.0.0.1", "--master_port", "29600", "c.yaml"}, &o)
          .ok());
  EXPECT_EQ(o.nnodes, 3);
  EXPECT_EQ(o.node_rank, 2);
  EXPECT_EQ(o.master_addr, "10.0.0.1");
  EXPECT_EQ(o.master_port, 29600);
  LaunchOptions d;
  ASSERT_TRUE(ParseLaunchArgs({"c.yaml"}, &d).ok());
  EXPECT_EQ(d.node_rank, -1);
  EXPECT_EQ(d.master_port, 0);
}

TEST(LaunchOptionsTest, ResumeIsShorthandForTheCheckpointResumeKey) {
  LaunchOptions o;
  ASSERT_TRUE(ParseLaunchArgs({"cfg.yaml", "--resume", "never", "--set", "a.b=1", "--resume=120"}, &o).ok());
  EXPECT_EQ(o.sets, (std::vector<std::string>{"checkpoint.resume=never", "a.b=1", "checkpoint.resume=120"}));
  EXPECT_FALSE(ParseLaunchArgs({"cfg.yaml", "--resume"}, &o).ok());
}

TEST(LaunchOptionsTest, IdleExitIsShorthandForTheGpuIdleExitKey) {
  LaunchOptions o;
  ASSERT_TRUE(ParseLaunchArgs({"cfg.yaml", "--set", "a.b=1", "--idle-exit"}, &o).ok());
  EXPECT_EQ(o.sets, (std::vector<std::string>{"a.b=1", "run.gpu_idle_exit=true"}));
}

TEST(LaunchOptionsTest, TorchrunUnderscoreSpellingsAreAliases) {
  LaunchOptions o;
  ASSERT_TRUE(ParseLaunchArgs({"--nproc_per_node", "3", "--max_restarts=2", "--nnodes", "1", "c.yaml"}, &o).ok());
  EXPECT_EQ(o.nproc_per_node, "3");
  EXPECT_TRUE(o.nproc_given);
  EXPECT_EQ(o.max_restarts, 2);
  EXPECT_EQ(o.nnodes, 1);
  // The alias is checked like the flag and named as the flag; flags dtrain does not have get no alias.
  Status st = ParseLaunchArgs({"--nproc_per_node", "0", "c.yaml"}, &o);
  EXPECT_NE(st.message().find("--nproc-per-node: expected a positive integer or gpu|cpu|auto, got '0'"),
            std::string::npos)
      << st.message();
  st = ParseLaunchArgs({"--monitor_interval", "5", "c.yaml"}, &o);
  EXPECT_NE(st.message().find("unknown flag '--monitor_interval'"), std::string::npos) << st.message();
}

// torchrun habits without a dtrain meaning: one line naming the dtrain way (exit 2 through RunLaunch), never
// "unknown flag" alone, and never offered by --help.
TEST(LaunchOptionsTest, TorchrunFlagsWithoutADtrainMeaningNameTheDtrainWay) {
  struct Case {
    std::vector<std::string> args;
    const char* expected;
  };
  const Case cases[] = {
      {{"--standalone", "--nproc-per-node", "2", "c.yaml"},
       "--standalone: dtrain launch is single-node by default (mpirun on this host, nothing to set up); drop "
       "--standalone"},
      {{"--rdzv-endpoint", "10.0.0.1:29400", "c.yaml"}, "--rdzv-endpoint: dtrain launch needs no rendezvous"},
      {{"--rdzv_endpoint=10.0.0.1:29400", "c.yaml"}, "--rdzv-endpoint: dtrain launch needs no rendezvous"},
      {{"c.yaml", "--rdzv_endpoint"}, "--rdzv-endpoint: dtrain launch needs no rendezvous"},  // no value
      {{"--rdzv_backend", "c10d", "c.yaml"}, "--rdzv-backend: dtrain launch needs no rendezvous"},
      {{"--rdzv_id=7", "c.yaml"}, "--rdzv-id: dtrain launch needs no rendezvous"},
      {{"--rdzv-conf", "timeout=60", "c.yaml"}, "--rdzv-conf: dtrain launch needs no rendezvous"},
      {{"--rdzv-endpoint", "h:1", "c.yaml"}, "--nnodes N --node-rank R --master-addr HOST [--master-port P]"},
      {{"--resume", "latest", "c.yaml"},
       "--resume: expected auto|never|STEP, got 'latest': dtrain resumes from the newest valid checkpoint of the run "
       "by default (--resume auto, checkpoint.resume: auto)"},
      {{"--resume=last", "c.yaml"}, "by default (--resume auto"},
      {{"--resume", "soon", "c.yaml"}, "--resume: expected auto|never|STEP, got 'soon'"},
      {{"--nnodes", "2:2", "--backend", "mpirun", "c.yaml"},
       "--nnodes MIN:MAX: an elastic host set needs --hosts or --hostfile (mpirun over ssh); for a fixed 2 node(s) "
       "write --nnodes 2"},
  };
  for (const auto& c : cases) {
    LaunchOptions o;
    const Status st = ParseLaunchArgs(c.args, &o);
    EXPECT_EQ(st.code(), Status::Code::kInvalidArgument) << c.expected;
    EXPECT_NE(st.message().find(c.expected), std::string::npos) << "got: " << st.message();
    EXPECT_EQ(st.message().find("unknown flag"), std::string::npos) << st.message();
    EXPECT_EQ(st.message().find('\n'), std::string::npos) << st.message();
  }
  // What dtrain does mean still parses: --resume auto|never|STEP, an elastic range with MIN < MAX.
  for (const char* v : {"auto", "never", "0", "120"}) {
    LaunchOptions o;
    EXPECT_TRUE(ParseLaunchArgs({"--resume", v, "c.yaml"}, &o).ok()) << v;
    EXPECT_EQ(o.sets, (std::vector<std::string>{std::string("checkpoint.resume=") + v}));
  }
  // Exit 2 with the one line; --help lists none of the hidden flags.
  testing::internal::CaptureStderr();
  const int rc = RunLaunch({"--standalone", "c.yaml"}, CheckRunBeforeStart);
  const std::string err = testing::internal::GetCapturedStderr();
  EXPECT_EQ(rc, kExitUsage);
  EXPECT_EQ(err,
            "dtrain launch: error: --standalone: dtrain launch is single-node by default (mpirun on this host, nothing "
            "to set up); drop --standalone\n");
  std::string help;
  LaunchOptions o;
  ASSERT_TRUE(ParseLaunchArgs({"--help"}, &o, &help).ok());
  EXPECT_EQ(help.find("standalone"), std::string::npos) << help;
  EXPECT_EQ(help.find("rdzv"), std::string::npos) << help;
}

TEST(LaunchOptionsTest, ARepeatedSingleValuedFlagTakesTheLastValue) {
  LaunchOptions o;
  ASSERT_TRUE(ParseLaunchArgs({"--nnodes", "2", "c.yaml", "--nnodes=3", "-h"}, &o).ok());
  EXPECT_TRUE(o.help);
  ASSERT_TRUE(ParseLaunchArgs({"--nnodes", "2", "c.yaml", "--nnodes=3"}, &o).ok());
  EXPECT_EQ(o.nnodes, 3);
  EXPECT_FALSE(o.help);
}

TEST(LaunchOptionsTest, DefaultsMatchTheDocumentation) {
  LaunchOptions o;
  ASSERT_TRUE(ParseLaunchArgs({"c.yaml"}, &o).ok());
  EXPECT_EQ(o.nproc_per_node, "auto");
  EXPECT_FALSE(o.nproc_given);
  EXPECT_EQ(o.max_restarts, 0);
  EXPECT_EQ(o.grace_seconds, 10);
  EXPECT_EQ(o.backend, Backend::kAuto);
  EXPECT_FALSE(o.dry_run);
}

TEST(LaunchOptionsTest, ErrorsAreOneLineNamingTheFlag) {
  struct Case {
    std::vector<std::string> args;
    const char* expected;
  };
  const Case cases[] = {
      {{"--frobnicate", "c.yaml"}, "unknown flag '--frobnicate'"},
      {{"c.yaml", "--nnodes"}, "--nnodes: missing value"},
      {{"--nnodes", "two", "c.yaml"}, "--nnodes: expected a positive integer, got 'two'"},
      {{"--nproc-per-node", "0", "c.yaml"}, "--nproc-per-node: expected"},
      {{"--nproc-per-node", "tpu", "c.yaml"}, "--nproc-per-node: expected"},
      {{"--max-restarts", "-1", "c.yaml"}, "--max-restarts: expected a non-negative integer"},
      {{"--grace-seconds", "1.5", "c.yaml"}, "--grace-seconds: expected"},
      {{"--backend", "ssh", "c.yaml"}, "--backend: expected auto|mpirun|srun, got 'ssh'"},
      {{"--hosts", "a:0", "c.yaml"}, "--hosts:"},
      {{"--set", "novalue", "c.yaml"}, "--set: expected key=value, got 'novalue'"},
      {{"--dry-run=yes", "c.yaml"}, "--dry-run: takes no value"},
      {{"a.yaml", "b.yaml"}, "unexpected argument 'b.yaml'"},
      {{"--nnodes", "1"}, "missing CONFIG"},
      {{"--hosts", "a:1", "--hostfile", "f", "c.yaml"}, "--hosts and --hostfile"},
      {{"--node-rank", "0", "--master-addr", "h", "c.yaml"}, "per-node start needs --nnodes N"},
      {{"--nnodes", "2", "--node-rank", "2", "--master-addr", "h", "c.yaml"}, "--node-rank 2: expected 0..1"},
      {{"--nnodes", "2", "--node-rank", "1", "c.yaml"}, "more than one node needs --master-addr HOST"},
      {{"--nnodes", "2", "--master-addr", "h", "c.yaml"}, "also needs --node-rank R"},
      {{"--nnodes", "2", "--node-rank", "0", "--master-addr", "h", "--hosts", "a:1", "c.yaml"},
       "--hosts/--hostfile are for mpirun"},
      {{"--nnodes", "2", "--node-rank", "0", "--master-addr", "h", "--backend", "srun", "c.yaml"}, "drop --backend"},
      {{"--node-rank", "-1", "c.yaml"}, "--node-rank: expected a non-negative integer"},
      {{"--master-port", "65535", "c.yaml"}, "--master-port:"},
  };
  for (const auto& c : cases) {
    LaunchOptions o;
    const Status st = ParseLaunchArgs(c.args, &o);
    EXPECT_EQ(st.code(), Status::Code::kInvalidArgument) << c.expected;
    EXPECT_NE(st.message().find(c.expected), std::string::npos) << "got: " << st.message();
    EXPECT_EQ(st.message().find('\n'), std::string::npos) << st.message();
  }
}

TEST(RunLaunchTest, UsageErrorsExitTwoWithOneLine) {
  testing::internal::CaptureStderr();
  const int rc = RunLaunch({"--nnodes", "x", "c.yaml"}, CheckRunBeforeStart);
  const std::string err = testing::internal::GetCapturedStderr();
  EXPECT_EQ(rc, kExitUsage);
  EXPECT_EQ(err, "dtrain launch: error: --nnodes: expected a positive integer, got 'x'\n");
}

TEST(RunLaunchTest, HelpExitsZero) {
  testing::internal::CaptureStdout();
  const int rc = RunLaunch({"--help"}, CheckRunBeforeStart);
  const std::string out = testing::internal::GetCapturedStdout();
  EXPECT_EQ(rc, kExitOk);
  EXPECT_NE(out.find("Usage: dtrain launch [OPTIONS] [CONFIG]"), std::string::npos) << out;
  EXPECT_NE(out.find("--max-restarts"), std::string::npos) << out;
  EXPECT_NE(out.find("example: dtrain launch"), std::string::npos) << out;
}

TEST(RunLaunchTest, MissingHostfileIsAUsageError) {
  testing::internal::CaptureStderr();
  const int rc = RunLaunch({"--hostfile", "/nonexistent/hosts", "--dry-run", "c.yaml"}, CheckRunBeforeStart);
  const std::string err = testing::internal::GetCapturedStderr();
  EXPECT_EQ(rc, kExitUsage);
  EXPECT_NE(err.find("--hostfile: cannot read '/nonexistent/hosts'"), std::string::npos) << err;
}

TEST(RunLaunchTest, MissingMpirunFailsBeforeStarting) {
  const std::string old_path = getenv("PATH");
  setenv("PATH", "/nonexistent-dir", 1);
  testing::internal::CaptureStderr();
  // (A config that passes the pre-start check without data files: gpt2_tiny trains on synthetic tokens.)
  const int rc = RunLaunch({"--backend", "mpirun", DT_SOURCE_DIR "/configs/gpt2_tiny.yaml"}, CheckRunBeforeStart);
  const std::string err = testing::internal::GetCapturedStderr();
  setenv("PATH", old_path.c_str(), 1);
  EXPECT_EQ(rc, kExitFailure);
  EXPECT_NE(err.find("mpirun not found in PATH"), std::string::npos) << err;
}

}  // namespace
}  // namespace dtrain::launcher
