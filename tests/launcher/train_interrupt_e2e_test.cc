// Ctrl-C on `dtrain train` started by hand, through the real binary (CPU, Fashion-MNIST CI config): the step in
// flight ends, a checkpoint of it is saved, one line gives the exact command that resumes, exit 75; that command
// resumes from the step. A second Ctrl-C while the checkpoint is written ends the process at once (as a second
// SIGINT to `dtrain launch` does) and leaves no broken checkpoint: the interrupted save never became one.

#include <gtest/gtest.h>
#include <signal.h>

#include <filesystem>
#include <string>

#include "tests/testing/background_process.h"
#include "tests/testing/subprocess.h"

namespace dtrain::testing {
namespace {

const std::string kCiConfig = std::string(DT_SOURCE_DIR) + "/configs/fashion_mnist_mlp_ci.yaml";
// 40 steps with a progress record after each, no periodic checkpoint: only the interrupt saves.
const std::string kSets =
    " --set train.device=cpu --set train.eval=false --set train.log_every=1 --set train.max_steps=40 --set "
    "checkpoint.every_steps=0";

bool Trained(const std::string& run) {
  return ReadFile(run + "/metrics.jsonl").find("\"kind\":\"train\"") != std::string::npos;
}

// The rest of the line of `text` that follows `prefix` ("" when no line starts so).
std::string AfterPrefix(const std::string& text, const std::string& prefix) {
  const size_t at = text.find(prefix);
  if (at == std::string::npos || (at > 0 && text[at - 1] != '\n')) return "";
  const size_t begin = at + prefix.size();
  return text.substr(begin, text.find('\n', begin) - begin);
}

TEST(TrainInterruptE2E, CtrlCSavesExits75AndPrintsTheCommandThatResumes) {
  DT_SKIP_WITHOUT_FASHION_MNIST();
  TempDir dir;
  const std::string run = dir.File("run"), ck = run + "/checkpoints";
  // --resume never is for this start only: the printed command must drop it (it would refuse the new checkpoint).
  BackgroundProcess p(DtrainBin() + " train " + kCiConfig + kSets + " --resume never --set run.dir=" + run,
                      dir.File("a.log"));
  ASSERT_TRUE(WaitUntil([&] { return Trained(run); }, 60)) << ReadFile(dir.File("a.log"));
  p.Signal(SIGINT);
  const ProcessResult a = p.Wait(60);
  ASSERT_EQ(a.exit_code, 75) << a.output;
  const std::string line = AfterPrefix(a.output, "dtrain: warning: interrupted (SIGINT): checkpoint of step ");
  ASSERT_FALSE(line.empty()) << a.output;
  const int64_t step = std::stoll(line);
  ASSERT_GE(step, 1) << line;
  ASSERT_LT(step, 40) << line;
  char step_dir[32];
  std::snprintf(step_dir, sizeof(step_dir), "step-%08lld", static_cast<long long>(step));
  const std::string resume = DtrainBin() + " train " + kCiConfig + kSets + " --set run.dir=" + run;
  EXPECT_EQ(line, std::to_string(step) + " saved in " + ck + "; to resume: " + resume);
  EXPECT_EQ(ReadFile(ck + "/latest"), std::string(step_dir) + "\n");
  const ProcessResult verify = RunCommand(DtrainBin() + " ckpt verify " + ck);
  EXPECT_EQ(verify.exit_code, 0) << verify.output;

  const ProcessResult b = RunCommand(resume);
  ASSERT_EQ(b.exit_code, 0) << b.output;
  EXPECT_NE(b.output.find("resumed from " + ck + "/" + step_dir + ": step " + std::to_string(step)), std::string::npos)
      << b.output;
  EXPECT_EQ(ReadFile(ck + "/latest"), "step-00000040\n");
}

TEST(TrainInterruptE2E, ASecondCtrlCWhileSavingEndsAtOnceAndBreaksNoCheckpoint) {
  DT_SKIP_WITHOUT_FASHION_MNIST();
  TempDir dir;
  const std::string run = dir.File("run"), ck = run + "/checkpoints";
  const std::string train = DtrainBin() + " train " + kCiConfig + kSets + " --set run.dir=" + run;
  // The save's manifest write blocks for 60 s: the second Ctrl-C comes while the checkpoint is being written.
  BackgroundProcess p("env DTRAIN_STORAGE_FAULT=op=put,key=manifest.pb,nth=1,action=hang,seconds=60 " + train,
                      dir.File("a.log"));
  ASSERT_TRUE(WaitUntil([&] { return Trained(run); }, 60)) << ReadFile(dir.File("a.log"));
  p.Signal(SIGINT);
  // The data files are written (the manifest's write is what hangs).
  auto data_written = [&] {
    std::error_code ec;
    for (const auto& e : std::filesystem::directory_iterator(ck, ec)) {
      if (std::filesystem::exists(e.path() / "params.bin")) return true;
    }
    return false;
  };
  ASSERT_TRUE(WaitUntil(data_written, 60)) << ReadFile(dir.File("a.log"));
  p.Signal(SIGINT);
  const ProcessResult a = p.Wait(10);  // at once, not after the 60 s hang
  EXPECT_EQ(a.signal, SIGINT) << a.exit_code << "\n" << a.output;
  EXPECT_EQ(a.output.find("to resume:"), std::string::npos) << a.output;

  // The interrupted save is no checkpoint: the next start says so, starts at step 0 and ends with a valid one.
  const ProcessResult b = RunCommand(train);
  ASSERT_EQ(b.exit_code, 0) << b.output;
  EXPECT_NE(b.output.find("no checkpoint in " + ck + ": starting from step 0"), std::string::npos) << b.output;
  EXPECT_EQ(ReadFile(ck + "/latest"), "step-00000040\n");
  const ProcessResult verify = RunCommand(DtrainBin() + " ckpt verify " + ck);
  EXPECT_EQ(verify.exit_code, 0) << verify.output;
}

}  // namespace
}  // namespace dtrain::testing
