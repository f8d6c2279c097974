// Preemption end to end: SIGUSR1 or SIGINT to `dtrain launch` (2 CPU ranks), or SIGTERM to a worker -> the ranks agree
// at a step boundary, rank 0 saves a checkpoint of that step, every rank exits 75, the launcher passes 75 through; the
// same command again resumes from that checkpoint. A SIGUSR1 during a worker's start is kept for its first step.

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <regex>
#include <string>
#include <thread>

#include "tests/testing/subprocess.h"

namespace dtrain::testing {
namespace {

const std::string kData = ::dtrain::testing::kFashionMnistDir;
const std::string kCiConfig = std::string(DT_SOURCE_DIR) + "/configs/fashion_mnist_mlp_ci.yaml";

// Runs `command` (via sh, exec'ed so the pid is the command's) with output to `log`; once `ready_file` holds
// `ready_text`, sends `sig`; returns the wait status, or -1 on a timeout.
int RunAndSignalStatus(const std::string& command, const std::string& log, const std::string& ready_file,
                       const std::string& ready_text, int sig) {
  const pid_t pid = fork();
  if (pid == 0) {
    const std::string sh = "exec " + command + " > " + log + " 2>&1";
    execl("/bin/sh", "sh", "-c", sh.c_str(), static_cast<char*>(nullptr));
    _exit(127);
  }
  const auto start = std::chrono::steady_clock::now();
  bool sent = false;
  int status = 0;
  while (std::chrono::steady_clock::now() - start < std::chrono::seconds(60)) {
    if (waitpid(pid, &status, WNOHANG) == pid) return status;
    if (!sent && ReadFile(ready_file).find(ready_text) != std::string::npos) {
      kill(pid, sig);
      sent = true;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(sent ? 20 : 2));
  }
  kill(pid, SIGKILL);
  waitpid(pid, &status, 0);
  return -1;
}

// As RunAndSignalStatus, sending `sig` once `ready_file` holds a "kind":"train" line; returns the exit code (-1 on a
// timeout or a signal death).
int RunAndSignal(const std::string& command, const std::string& log, const std::string& ready_file, int sig) {
  const int status = RunAndSignalStatus(command, log, ready_file, "\"kind\":\"train\"", sig);
  return status != -1 && WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

// The step of "checkpoint of step N saved" in a log, -1 when absent.
int64_t PreemptedStep(const std::string& log) {
  std::smatch m;
  if (!std::regex_search(log, m, std::regex("checkpoint of step ([0-9]+) saved"))) return -1;
  return std::stoll(m[1]);
}

TEST(PreemptE2E, SignalsCheckpointAndExit75ThenTheSameCommandResumes) {
  DT_SKIP_WITHOUT_FASHION_MNIST();
  TempDir dir;
  const std::string d = dir.path();
  // Many steps (no periodic checkpoints): only the preemption saves.
  const std::string cmd =
      DtrainBin() + " launch --nproc-per-node 2 " + kCiConfig +
      " --set train.device=cpu --set train.eval=false --set train.epochs=20 --set schedule.warmup_steps=0 --set "
      "train.log_every=5 --set data.batch_size=64 --set checkpoint.every_steps=0 --set run.dir=" +
      d + "/run";
  const std::string metrics = d + "/run/metrics.jsonl";
  // 1. SIGUSR1 (Slurm --signal=USR1@90; the launcher forwards it to every rank).
  ASSERT_EQ(RunAndSignal(cmd, d + "/a.log", metrics, SIGUSR1), 75) << ReadFile(d + "/a.log");
  const std::string a = ReadFile(d + "/a.log");
  const int64_t s1 = PreemptedStep(a);
  ASSERT_GE(s1, 5) << a;
  // A planned stop: mpirun's "Primary job terminated normally, but 2 processes returned a non-zero exit code" banner
  // is not shown (it read as a crash).
  EXPECT_EQ(a.find("Primary job"), std::string::npos) << a;
  ProcessResult list = RunCommand(DtrainBin() + " ckpt verify " + d + "/run/checkpoints");
  EXPECT_EQ(list.exit_code, 0) << list.output;
  EXPECT_NE(list.output.find("step-" + std::string(8 - std::to_string(s1).size(), '0') + std::to_string(s1) + "  OK"),
            std::string::npos)
      << list.output;

  // 2. SIGTERM (spot reclaim, scancel; Slurm signals every task directly) to a worker started by hand:
  //    it resumes from that checkpoint at world size 1 with the same global batch, is preempted later.
  std::remove(metrics.c_str());
  const std::string one =
      DtrainBin() + " train" + cmd.substr(cmd.find(" launch --nproc-per-node 2") + 26) + " --set data.batch_size=128";
  ASSERT_EQ(RunAndSignal(one, d + "/b.log", metrics, SIGTERM), 75) << ReadFile(d + "/b.log");
  const std::string b = ReadFile(d + "/b.log");
  EXPECT_NE(b.find("resumed from " + d + "/run/checkpoints/step-"), std::string::npos) << b;
  EXPECT_NE(b.find(": step " + std::to_string(s1) + ","), std::string::npos) << b;
  const int64_t s2 = PreemptedStep(b);
  EXPECT_GT(s2, s1) << b;

  // 3. Ctrl-C (SIGINT) to `dtrain launch`: as SIGTERM from a scheduler (the same branch; spot_simulation_e2e sends
  //    SIGTERM), the launcher lets the ranks checkpoint within the grace period and passes their 75 through. It used
  //    to SIGTERM mpirun, whose own SIGKILL about a second later cut a rank's save short.
  std::remove(metrics.c_str());
  ASSERT_EQ(RunAndSignal(cmd, d + "/c.log", metrics, SIGINT), 75) << ReadFile(d + "/c.log");
  const std::string c = ReadFile(d + "/c.log");
  EXPECT_NE(c.find(": step " + std::to_string(s2) + ","), std::string::npos) << c;
  const int64_t s3 = PreemptedStep(c);
  EXPECT_GT(s3, s2) << c;
  EXPECT_EQ(c.find("Primary job"), std::string::npos) << c;

  // 4. And finishes: 5 more steps.
  ProcessResult done = RunCommand(cmd + " --set train.max_steps=" + std::to_string(s3 + 5));
  ASSERT_EQ(done.exit_code, 0) << done.output;
  EXPECT_NE(done.output.find(": step " + std::to_string(s3) + ","), std::string::npos) << done.output;
}

// The mistake of issue 38: a checkpoint request (SIGUSR1: the elastic launcher's grow, a notice) that reaches a worker
// while it starts. The worker must not die of it (the elastic launcher would count its host as lost) but keep it for
// its first step: save, exit 75. The start is held 3 s at the checkpoint store's first listing (its preflight,
// DTRAIN_STORAGE_FAULT), before which the handlers used to be installed; the signal goes out at the worker's first
// output line.
TEST(PreemptE2E, ACheckpointRequestDuringTheStartIsKeptForTheFirstStep) {
  DT_SKIP_WITHOUT_FASHION_MNIST();
  TempDir dir;
  const std::string d = dir.path();
  const std::string train = DtrainBin() + " train " + kCiConfig +
                            " --set train.device=cpu --set train.eval=false --set train.epochs=20 --set "
                            "schedule.warmup_steps=0 --set checkpoint.every_steps=0 --set run.dir=" +
                            d + "/run";
  const std::string hold = "env DTRAIN_STORAGE_FAULT=op=list,nth=1,action=hang,seconds=3 ";
  const auto t0 = std::chrono::steady_clock::now();
  const int status = RunAndSignalStatus(hold + train, d + "/a.log", d + "/a.log", "\n", SIGUSR1);
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const std::string a = ReadFile(d + "/a.log");
  ASSERT_NE(status, -1) << a;
  ASSERT_FALSE(WIFSIGNALED(status)) << "died of signal " << WTERMSIG(status) << ":\n" << a;
  EXPECT_EQ(WEXITSTATUS(status), 75) << a;
  EXPECT_GE(s, 3.0) << "the start was not held: the signal may have come after the store was open\n" << a;
  EXPECT_NE(a.find("preemption signal 10"), std::string::npos) << a;
  EXPECT_EQ(PreemptedStep(a), 1) << a;
  ProcessResult verify = RunCommand(DtrainBin() + " ckpt verify " + d + "/run/checkpoints");
  EXPECT_EQ(verify.exit_code, 0) << verify.output;
  EXPECT_NE(verify.output.find("step-00000001  OK"), std::string::npos) << verify.output;

  // Without checkpoints nothing reads the request: SIGUSR1 ends the worker as it always did.
  const int off = RunAndSignalStatus(train + " --set checkpoint.enabled=false --set run.dir=" + d + "/off",
                                     d + "/b.log", d + "/b.log", "\n", SIGUSR1);
  ASSERT_NE(off, -1) << ReadFile(d + "/b.log");
  ASSERT_TRUE(WIFSIGNALED(off)) << "exit " << WEXITSTATUS(off) << ":\n" << ReadFile(d + "/b.log");
  EXPECT_EQ(WTERMSIG(off), SIGUSR1);
}

}  // namespace
}  // namespace dtrain::testing
