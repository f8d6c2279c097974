#include "launcher/launch_command.h"

#include <gtest/gtest.h>
#include <stdlib.h>
#include <unistd.h>

#include <fstream>
#include <string>
#include <vector>

#include "launcher/cli/launch_check.h"
#include "launcher/launch.h"

namespace dtrain::launcher {
namespace {

LaunchEnv FakeEnv(int gpus) {
  LaunchEnv env;
  env.gpu_count = gpus;
  env.hostname = "here";
  env.self_bin = "/opt/dtrain/bin/dtrain";
  env.worker_bin = "/opt/dtrain/bin/dtrain";
  env.vars = {{"PATH", "/usr/bin"}, {"NCCL_DEBUG", "INFO"}, {"DTRAIN_LOG_LEVEL", "debug"}, {"NCCL_IB_HCA", "mlx5"}};
  return env;
}

LaunchOptions Opts(std::vector<std::string> args) {
  LaunchOptions o;
  args.push_back("cfg.yaml");
  EXPECT_TRUE(ParseLaunchArgs(args, &o).ok());
  return o;
}

std::string Build(const LaunchOptions& o, const LaunchEnv& env, int restart = 0) {
  LaunchCommand cmd;
  const Status st = BuildLaunchCommand(o, env, restart, &cmd);
  EXPECT_TRUE(st.ok()) << st.ToString();
  return FormatCommandLine(cmd);
}

TEST(LaunchCommandTest, LocalCpuRunIsExactlyThisMpirunLine) {
  const std::string line = Build(Opts({"--set", "optim.lr=0.5"}), FakeEnv(0));
  EXPECT_EQ(line,
            "MASTER_ADDR=localhost MASTER_PORT=29500 DTRAIN_RESTART_COUNT=0 "
            "mpirun -np 2 --host localhost:2 --map-by slot --bind-to none --tag-output "
            "-x MASTER_ADDR -x MASTER_PORT -x DTRAIN_RESTART_COUNT "
            "-x DTRAIN_LOG_LEVEL -x NCCL_DEBUG -x NCCL_IB_HCA "
            "/opt/dtrain/bin/dtrain rank-exec /opt/dtrain/bin/dtrain train cfg.yaml --set optim.lr=0.5");
}

TEST(LaunchCommandTest, PerNodeStartRunsTheWorkerItselfWithTorchrunVariables) {
  LaunchCommand cmd;
  ASSERT_TRUE(BuildLaunchCommand(Opts({"--nnodes", "2", "--node-rank", "1", "--master-addr", "10.0.0.1",
                                       "--master-port", "29600", "--nproc-per-node", "4"}),
                                 FakeEnv(4), 2, &cmd)
                  .ok());
  EXPECT_EQ(cmd.backend, Backend::kNode);
  EXPECT_EQ(cmd.first_rank, 4);
  EXPECT_EQ(cmd.local_nproc, 4);
  EXPECT_EQ(cmd.placement.world_size(), 8);
  EXPECT_EQ(cmd.placement.HostOfRank(5), "here");
  EXPECT_EQ(cmd.placement.HostOfRank(1), "node-0");
  EXPECT_EQ(FormatCommandLine(cmd),
            "RANK=4..7 LOCAL_RANK=0..3 MASTER_ADDR=10.0.0.1 MASTER_PORT=29600 WORLD_SIZE=8 LOCAL_WORLD_SIZE=4 "
            "NODE_RANK=1 DTRAIN_RESTART_COUNT=2 /opt/dtrain/bin/dtrain train cfg.yaml "
            "--set checkpoint.resume=auto --set checkpoint.overwrite=false");
}

TEST(LaunchCommandTest, PerNodeMasterPortComesFromTheEnvironmentElse29500) {
  LaunchEnv env = FakeEnv(1);
  env.vars.emplace_back("MASTER_PORT", "31000");
  LaunchCommand cmd;
  ASSERT_TRUE(BuildLaunchCommand(Opts({"--nnodes", "1", "--node-rank", "0"}), env, 0, &cmd).ok());
  EXPECT_EQ(FormatCommandLine(cmd),
            "RANK=0..0 LOCAL_RANK=0..0 MASTER_ADDR=127.0.0.1 MASTER_PORT=31000 WORLD_SIZE=1 LOCAL_WORLD_SIZE=1 "
            "NODE_RANK=0 DTRAIN_RESTART_COUNT=0 /opt/dtrain/bin/dtrain train cfg.yaml");
  env.vars.back().second = "65535";  // node 0's launcher needs MASTER_PORT+1
  EXPECT_EQ(BuildLaunchCommand(Opts({"--nnodes", "1", "--node-rank", "0"}), env, 0, &cmd).code(),
            Status::Code::kInvalidArgument);
  EXPECT_NE(
      Build(Opts({"--nnodes", "2", "--node-rank", "0", "--master-addr", "m"}), FakeEnv(1)).find("MASTER_PORT=29500"),
      std::string::npos);
}

// A restart resumes the job's own run: the first attempt's "start over" does not apply to it again.
TEST(LaunchCommandTest, RestartsResumeTheirOwnRunInsteadOfStartingOver) {
  const LaunchOptions o = Opts({"--resume", "never", "--overwrite"});
  const std::string first = Build(o, FakeEnv(0), 0);
  EXPECT_NE(first.find("train cfg.yaml --set checkpoint.resume=never --set checkpoint.overwrite=true"),
            std::string::npos)
      << first;
  EXPECT_EQ(first.find("checkpoint.resume=auto"), std::string::npos) << first;
  const std::string again = Build(o, FakeEnv(0), 1);
  EXPECT_NE(again.find("DTRAIN_RESTART_COUNT=1 "), std::string::npos) << again;
  const std::string tail =
      "--set checkpoint.resume=never --set checkpoint.overwrite=true --set checkpoint.resume=auto --set "
      "checkpoint.overwrite=false";
  EXPECT_EQ(again.substr(again.size() - tail.size()), tail) << again;
}

TEST(LaunchCommandTest, NprocPerNodeResolvesGpuCpuAuto) {
  LaunchCommand cmd;
  ASSERT_TRUE(BuildLaunchCommand(Opts({}), FakeEnv(8), 0, &cmd).ok());
  EXPECT_EQ(cmd.placement.world_size(), 8);  // auto with GPUs = GPU count
  ASSERT_TRUE(BuildLaunchCommand(Opts({"--nproc-per-node", "gpu"}), FakeEnv(4), 0, &cmd).ok());
  EXPECT_EQ(cmd.placement.world_size(), 4);
  ASSERT_TRUE(BuildLaunchCommand(Opts({"--nproc-per-node", "cpu"}), FakeEnv(4), 0, &cmd).ok());
  EXPECT_EQ(cmd.placement.world_size(), 2);
  ASSERT_TRUE(BuildLaunchCommand(Opts({"--nproc-per-node", "3"}), FakeEnv(0), 0, &cmd).ok());
  EXPECT_EQ(cmd.argv[2], "3");
  EXPECT_EQ(cmd.argv[4], "localhost:3");
  const Status st = BuildLaunchCommand(Opts({"--nproc-per-node", "gpu"}), FakeEnv(0), 0, &cmd);
  EXPECT_EQ(st.code(), Status::Code::kInvalidArgument);
  EXPECT_NE(st.message().find("--nproc-per-node gpu: no visible GPU"), std::string::npos);
}

TEST(LaunchCommandTest, HostsGiveSlotsAndRankPlacement) {
  LaunchCommand cmd;
  ASSERT_TRUE(BuildLaunchCommand(Opts({"--hosts", "a:8,b:4", "--max-restarts", "2"}), FakeEnv(8), 1, &cmd).ok());
  const std::string line = FormatCommandLine(cmd);
  EXPECT_NE(line.find("MASTER_ADDR=a "), std::string::npos) << line;
  EXPECT_NE(line.find("DTRAIN_RESTART_COUNT=1 "), std::string::npos) << line;
  EXPECT_NE(line.find("mpirun -np 12 --host a:8,b:4 --map-by slot"), std::string::npos) << line;
  EXPECT_EQ(cmd.placement.HostOfRank(0), "a");
  EXPECT_EQ(cmd.placement.HostOfRank(7), "a");
  EXPECT_EQ(cmd.placement.HostOfRank(8), "b");
  EXPECT_EQ(cmd.placement.HostOfRank(11), "b");
  EXPECT_EQ(cmd.placement.HostOfRank(12), "");
  // An explicit count overrides the slots; --nnodes takes the first hosts.
  ASSERT_TRUE(
      BuildLaunchCommand(Opts({"--hosts", "a:8,b:4,c", "--nproc-per-node", "2", "--nnodes", "2"}), FakeEnv(8), 0, &cmd)
          .ok());
  EXPECT_NE(FormatCommandLine(cmd).find("-np 4 --host a:2,b:2 "), std::string::npos);
  const Status st = BuildLaunchCommand(Opts({"--hosts", "a:8", "--nnodes", "2"}), FakeEnv(8), 0, &cmd);
  EXPECT_NE(st.message().find("--nnodes 2: only 1 host(s) given"), std::string::npos) << st.message();
  const Status st2 = BuildLaunchCommand(Opts({"--nnodes", "2"}), FakeEnv(8), 0, &cmd);
  EXPECT_NE(st2.message().find("--nnodes 2: more than one node needs --hosts or --hostfile"), std::string::npos);
}

TEST(LaunchCommandTest, HostfileIsParsedIntoHostList) {
  char dir[] = "/tmp/dtrain_launchcmd_XXXXXX";
  ASSERT_NE(mkdtemp(dir), nullptr);
  const std::string path = std::string(dir) + "/hosts";
  std::ofstream(path) << "# two nodes\nn1 slots=2\nn2 slots=3\n";
  LaunchCommand cmd;
  ASSERT_TRUE(BuildLaunchCommand(Opts({"--hostfile", path}), FakeEnv(0), 0, &cmd).ok());
  EXPECT_NE(FormatCommandLine(cmd).find("-np 5 --host n1:2,n2:3 "), std::string::npos);
  unlink(path.c_str());
  rmdir(dir);
}

TEST(LaunchCommandTest, RootGetsOmpiAllowRunAsRootUnlessSet) {
  LaunchEnv env = FakeEnv(0);
  env.is_root = true;
  std::string line = Build(Opts({}), env);
  EXPECT_EQ(line.rfind("MASTER_ADDR=localhost MASTER_PORT=29500 DTRAIN_RESTART_COUNT=0 "
                       "OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 mpirun ",
                       0),
            0u)
      << line;
  env.vars.push_back({"OMPI_ALLOW_RUN_AS_ROOT", "1"});
  env.vars.push_back({"OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1"});
  env.vars.push_back({"MASTER_PORT", "1234"});
  line = Build(Opts({}), env);
  EXPECT_EQ(line.find("OMPI_ALLOW"), std::string::npos) << line;
  EXPECT_NE(line.find("MASTER_PORT=1234 "), std::string::npos) << line;
}

TEST(LaunchCommandTest, SlurmUsesSrun) {
  LaunchEnv env = FakeEnv(4);
  env.in_slurm = true;
  EXPECT_EQ(Build(Opts({"--mpirun-arg", "--exclusive"}), env),
            "MASTER_ADDR=here MASTER_PORT=29500 DTRAIN_RESTART_COUNT=0 "
            "srun --mpi=pmix --label --unbuffered --kill-on-bad-exit=1 --exclusive "
            "/opt/dtrain/bin/dtrain train cfg.yaml");
  EXPECT_NE(Build(Opts({"--nnodes", "2", "--nproc-per-node", "gpu"}), env)
                .find("srun --mpi=pmix --label --unbuffered --kill-on-bad-exit=1 --nodes=2 --ntasks-per-node=4 "
                      "--ntasks=8 /opt"),
            std::string::npos);
  // Hosts on the command line mean mpirun, even inside an allocation.
  EXPECT_NE(Build(Opts({"--hosts", "a:2"}), env).find(" mpirun -np 2 --host a:2 "), std::string::npos);
  LaunchCommand cmd;
  const Status st = BuildLaunchCommand(Opts({"--backend", "srun", "--hosts", "a:2"}), env, 0, &cmd);
  EXPECT_EQ(st.code(), Status::Code::kInvalidArgument);
  EXPECT_NE(st.message().find("--backend srun"), std::string::npos);
}

// The elastic launcher under Slurm names the surviving nodes; with a per-node count the placement is known.
TEST(LaunchCommandTest, SrunNodelistGivesThePlacement) {
  LaunchEnv env = FakeEnv(0);
  env.in_slurm = true;
  LaunchOptions o = Opts({"--nnodes", "2", "--nproc-per-node", "1"});
  o.srun_nodelist = {"n1", "n3"};
  LaunchCommand cmd;
  ASSERT_TRUE(BuildLaunchCommand(o, env, 1, &cmd).ok());
  const std::string line = FormatCommandLine(cmd);
  EXPECT_NE(line.find("srun --mpi=pmix --label --unbuffered --kill-on-bad-exit=1 --nodes=2 --nodelist=n1,n3 "
                      "--ntasks-per-node=1 --ntasks=2 /opt"),
            std::string::npos)
      << line;
  EXPECT_EQ(cmd.placement.world_size(), 2);
  EXPECT_EQ(cmd.placement.HostOfRank(1), "n3");
}

TEST(LaunchCommandTest, FormatQuotesForTheShell) {
  LaunchCommand cmd;
  cmd.argv = {"mpirun", "a b", "it's", ""};
  cmd.env_set = {{"K", "v w"}};
  EXPECT_EQ(FormatCommandLine(cmd), "K='v w' mpirun 'a b' 'it'\\''s' ''");
}

TEST(RunLaunchTest, DryRunPrintsTheCommandAndExitsZero) {
  setenv("DTRAIN_WORKER_BIN", "/bin/true", 1);
  testing::internal::CaptureStdout();
  const int rc = RunLaunch({"--dry-run", "--nproc-per-node", "3", "--backend", "mpirun", "cfg.yaml", "--set", "a.b=1"},
                           CheckRunBeforeStart);
  const std::string out = testing::internal::GetCapturedStdout();
  unsetenv("DTRAIN_WORKER_BIN");
  EXPECT_EQ(rc, 0);
  EXPECT_NE(out.find("DTRAIN_RESTART_COUNT=0 "), std::string::npos) << out;
  EXPECT_NE(out.find("mpirun -np 3 --host localhost:3 --map-by slot --bind-to none --tag-output -x MASTER_ADDR"),
            std::string::npos)
      << out;
  EXPECT_NE(out.find(" /bin/true train cfg.yaml --set a.b=1\n"), std::string::npos) << out;
  EXPECT_EQ(out.back(), '\n');
  EXPECT_EQ(out.find('\n'), out.size() - 1);  // exactly one line
}

}  // namespace
}  // namespace dtrain::launcher
