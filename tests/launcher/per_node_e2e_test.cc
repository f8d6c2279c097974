// Per-node start (`dtrain launch --nnodes 2 --node-rank R --master-addr H --master-port P`): two real launchers on
// this machine's loopback, each starting its node's workers itself (no mpirun), with a POSIX shell worker
// (DTRAIN_WORKER_BIN) that records its torchrun variables. The CPU training path needs MPI, so these launchers
// cannot train on the CPU: the last test checks that asking for it is a clear usage error. Training without
// mpirun runs on GPUs (the H200 script in bench/). Every node's launcher takes the job secret from --secret-file
// (mode 0600); a node with another secret, or none, is refused, and a signal stops a join at once.

#include <gtest/gtest.h>
#include <sys/stat.h>

#include <chrono>
#include <string>

#include "tests/testing/free_port.h"
#include "tests/testing/subprocess.h"

namespace dtrain::testing {
namespace {

class PerNodeTest : public ::testing::Test {
 protected:
  // The worker: writes env-RANK (its torchrun variables) and pid-RANK, then runs `body` (RANK in $r).
  void WriteWorker(const std::string& body) {
    const std::string path = dir_.path() + "/worker.sh";
    WriteFile(path,
              "#!/bin/sh\n"
              "r=$RANK\nd=" +
                  dir_.path() +
                  "\n"
                  "echo \"RANK=$RANK LOCAL_RANK=$LOCAL_RANK WORLD_SIZE=$WORLD_SIZE LOCAL_WORLD_SIZE=$LOCAL_WORLD_SIZE "
                  "NODE_RANK=$NODE_RANK MASTER_ADDR=$MASTER_ADDR MASTER_PORT=$MASTER_PORT "
                  "DTRAIN_RESTART_COUNT=$DTRAIN_RESTART_COUNT DTRAIN_JOB_SECRET=$DTRAIN_JOB_SECRET\" > $d/env-$r\n"
                  "echo $$ > $d/pid-$r\n" +
                  body);
    chmod(path.c_str(), 0755);
  }

  // Both nodes' launchers at once; each one's output in node-R.log, its exit code and end time (seconds since
  // the start of the script) in rc-R and end-R.
  ProcessResult LaunchTwoNodes(const std::string& extra) {
    const int port = FreeLoopbackPorts(2);
    const std::string d = dir_.path();
    WriteSecret("secret", kSecret);
    std::string script = "cd " + d + " && s=$(date +%s.%N); ";
    for (int node : {0, 1}) {
      script += "(DTRAIN_WORKER_BIN=" + d + "/worker.sh " + DtrainBin() + " launch --nnodes 2 --node-rank " +
                std::to_string(node) + " --secret-file " + d + "/secret --master-addr 127.0.0.1 --master-port " +
                std::to_string(port) + " --nproc-per-node 2 --grace-seconds 2 " + extra + " cfg.yaml > node-" +
                std::to_string(node) + ".log 2>&1; echo $? > rc-" + std::to_string(node) +
                "; awk \"BEGIN{print $(date +%s.%N) - $s}\" > end-" + std::to_string(node) + ") & ";
    }
    script += "wait";
    return RunCommand(script);
  }
  // A secret file of mode 0600, as `openssl rand -hex 32 > secret && chmod 600 secret` makes it.
  void WriteSecret(const std::string& name, const std::string& text) {
    WriteFile(dir_.path() + "/" + name, text + "\n");
    chmod((dir_.path() + "/" + name).c_str(), 0600);
  }
  static constexpr const char* kSecret = "5f1c0b8e2d4a7f90c3e6b1d8a2f4c7e9b0d3f6a8c1e4b7d0f2a5c8e1b4d7f0a3";
  std::string Read(const std::string& name) const { return ReadFile(dir_.path() + "/" + name); }
  int Rc(int node) const { return std::stoi(Read("rc-" + std::to_string(node))); }
  double End(int node) const { return std::stod(Read("end-" + std::to_string(node))); }

  TempDir dir_;
};

TEST_F(PerNodeTest, EachNodeStartsItsWorkersWithTorchrunVariables) {
  WriteWorker("echo \"hello from rank $r\"\nexit 0\n");
  LaunchTwoNodes("");
  EXPECT_EQ(Rc(0), 0) << Read("node-0.log");
  EXPECT_EQ(Rc(1), 0) << Read("node-1.log");
  for (int r = 0; r < 4; ++r) {
    const std::string env = Read("env-" + std::to_string(r));
    EXPECT_NE(env.find("RANK=" + std::to_string(r) + " LOCAL_RANK=" + std::to_string(r % 2) +
                       " WORLD_SIZE=4 LOCAL_WORLD_SIZE=2 NODE_RANK=" + std::to_string(r / 2) +
                       " MASTER_ADDR=127.0.0.1 MASTER_PORT="),
              std::string::npos)
        << env;
    EXPECT_NE(env.find("DTRAIN_RESTART_COUNT=0"), std::string::npos) << env;
    // The workers inherit the job secret (for the TCP rendezvous), from the environment, not the command line.
    EXPECT_NE(env.find("DTRAIN_JOB_SECRET=" + std::string(kSecret)), std::string::npos) << env;
  }
  // Each node's console shows its first rank's output (node 0: rank 0, the job's progress lines).
  EXPECT_NE(Read("node-0.log").find("hello from rank 0"), std::string::npos) << Read("node-0.log");
  EXPECT_NE(Read("node-1.log").find("hello from rank 2"), std::string::npos) << Read("node-1.log");
  EXPECT_EQ(Read("node-0.log").find("hello from rank 1"), std::string::npos);
}

TEST_F(PerNodeTest, KilledWorkerOnOneNodeStopsBothNodesWithinTheBound) {
  // Rank 3 (node 1) dies by SIGKILL 3 s after it started; every other rank would run for 120 s.
  WriteWorker("if [ \"$r\" = 3 ]; then sleep 3; kill -9 $$; fi\nexec sleep 120\n");
  LaunchTwoNodes("");
  EXPECT_EQ(Rc(1), 137) << Read("node-1.log");
  EXPECT_EQ(Rc(0), 137) << Read("node-0.log");  // every node returns the root cause's code
  // Both launchers are done well within 10 s of the kill (grace 2 s; start-up included here).
  EXPECT_LT(End(0), 3 + 10) << Read("node-0.log");
  EXPECT_LT(End(1), 3 + 10) << Read("node-1.log");
  EXPECT_NE(Read("node-1.log").find("rank 3 on host"), std::string::npos) << Read("node-1.log");
  EXPECT_NE(Read("node-1.log").find("failed first: signal 9"), std::string::npos) << Read("node-1.log");
  const std::string n0 = Read("node-0.log");
  EXPECT_NE(n0.find("node 0: the job stopped because of node 1: rank 3 on host"), std::string::npos) << n0;
  for (int r = 0; r < 4; ++r) {  // no worker outlives its launcher
    const int pid = std::stoi(Read("pid-" + std::to_string(r)));
    EXPECT_NE(RunCommand("kill -0 " + std::to_string(pid)).exit_code, 0) << "rank " << r << " still runs";
  }
}

TEST_F(PerNodeTest, LostLauncherStopsTheOtherNode) {
  // Node 1's launcher is killed (its host gone): node 0 must stop its workers and fail with a clear message.
  WriteWorker(
      "if [ \"$r\" = 2 ]; then sleep 3; kill -9 $PPID; fi\n"
      "exec sleep 120\n");
  LaunchTwoNodes("");
  const std::string n0 = Read("node-0.log");
  EXPECT_EQ(Rc(0), 1) << n0;
  EXPECT_LT(End(0), 3 + 10) << n0;
  EXPECT_NE(n0.find("node 1's launcher closed its link"), std::string::npos) << n0;
}

TEST_F(PerNodeTest, CpuTrainingWithoutMpiIsAUsageError) {
  const ProcessResult r =
      RunCommand("DTRAIN_JOB_SECRET=" + std::string(kSecret) + " " + DtrainBin() +
                 " launch --nnodes 2 --node-rank 1 --master-addr 127.0.0.1 --nproc-per-node 1 " +
                 std::string(DT_SOURCE_DIR) + "/configs/fashion_mnist_mlp.yaml --set train.device=cpu");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("the CPU path reduces gradients with MPI"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("dtrain launch --hosts/--hostfile"), std::string::npos) << r.output;
}

TEST_F(PerNodeTest, BadPerNodeFlagsAreUsageErrors) {
  const std::string cfg = std::string(DT_SOURCE_DIR) + "/configs/fashion_mnist_mlp.yaml";
  ProcessResult r = RunCommand(DtrainBin() + " launch --node-rank 2 --nnodes 2 --master-addr h " + cfg);
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.output.find("--node-rank 2: expected 0..1 (--nnodes 2)"), std::string::npos) << r.output;
  r = RunCommand(DtrainBin() + " launch --node-rank 0 --nnodes 2 " + cfg);
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.output.find("more than one node needs --master-addr HOST"), std::string::npos) << r.output;
  r = RunCommand(DtrainBin() + " launch --node-rank 0 --master-addr h " + cfg);
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.output.find("per-node start needs --nnodes N"), std::string::npos) << r.output;
}

// The attack: a launcher that does not hold the job's secret asks to be node 1. Node 0 never counts it (it keeps
// waiting for the real node 1, naming the refused address); the intruder is refused at once with exit 2; SIGINT
// then stops node 0's join at once (it used to be ignored for up to 300 s).
TEST_F(PerNodeTest, LauncherWithAnotherSecretIsRefusedAndSigintStopsTheJoin) {
  WriteWorker("exit 0\n");
  WriteSecret("secret", kSecret);
  WriteSecret("other", "another-secret-of-at-least-32-characters-0123456789");
  const int port = FreeLoopbackPorts(2);
  const std::string d = dir_.path();
  const std::string launch = "DTRAIN_WORKER_BIN=" + d + "/worker.sh " + DtrainBin() +
                             " launch --nnodes 2 --master-addr 127.0.0.1 --master-port " + std::to_string(port) +
                             " --nproc-per-node 1 cfg.yaml --node-rank ";
  RunCommand("cd " + d + "; " + launch + "0 --secret-file secret > node-0.log 2>&1 & pid=$!; sleep 1; " + launch +
             "1 --secret-file other > node-1.log 2>&1; echo $? > rc-1; sleep 0.5; s=$(date +%s.%N); kill -INT $pid; "
             "wait $pid; echo $? > rc-0; awk \"BEGIN{print $(date +%s.%N) - $s}\" > end-0");
  const std::string n0 = Read("node-0.log"), n1 = Read("node-1.log");
  EXPECT_EQ(Rc(1), 2) << n1;
  EXPECT_NE(n1.find("refused this process: it holds another job secret"), std::string::npos) << n1;
  EXPECT_NE(n0.find("dropped a connection from 127.0.0.1:"), std::string::npos) << n0;
  EXPECT_NE(n0.find("it does not know the job secret"), std::string::npos) << n0;
  EXPECT_EQ(Rc(0), 130) << n0;  // 128 + SIGINT
  EXPECT_LT(End(0), 2.0) << n0;
  EXPECT_NE(n0.find("Interrupt while joining the other nodes' launchers"), std::string::npos) << n0;
}

TEST_F(PerNodeTest, SecretIsRequiredAndItsFileMustBePrivate) {
  const std::string cfg = std::string(DT_SOURCE_DIR) + "/configs/fashion_mnist_mlp.yaml";
  const std::string launch = "env -u DTRAIN_JOB_SECRET -u DTRAIN_JOB_SECRET_FILE " + DtrainBin() +
                             " launch --nnodes 2 --node-rank 1 --master-addr 127.0.0.1 --nproc-per-node 1 " + cfg;
  ProcessResult r = RunCommand(launch);
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("no job secret"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("openssl rand -hex 32 > secret && chmod 600 secret"), std::string::npos) << r.output;
  WriteFile(dir_.path() + "/open", std::string(kSecret) + "\n");
  chmod((dir_.path() + "/open").c_str(), 0644);
  r = RunCommand(launch + " --secret-file " + dir_.path() + "/open");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("has mode 0644: other users may read it; `chmod 600 " + dir_.path() + "/open`"),
            std::string::npos)
      << r.output;
  EXPECT_EQ(r.output.find(kSecret), std::string::npos) << "the secret was printed";
  WriteSecret("short", "too-short");
  r = RunCommand(launch + " --secret-file " + dir_.path() + "/short");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("has 9 characters, fewer than 32"), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("too-short"), std::string::npos) << "the secret was printed";
}

}  // namespace
}  // namespace dtrain::testing
