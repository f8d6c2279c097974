// `dtrain completion bash` (launcher/cli/completion.h) sourced in a real bash: the completion function fills
// COMPREPLY from the parser's own subcommands and flags.

#include <gtest/gtest.h>

#include <string>

#include "tests/testing/subprocess.h"

namespace dtrain::launcher {
namespace {

using testing::DtrainBin;
using testing::ProcessResult;
using testing::RunCommand;
using testing::TempDir;
using testing::WriteFile;

class CompletionE2E : public ::testing::Test {
 protected:
  void SetUp() override {
    const ProcessResult r = RunCommand(DtrainBin() + " completion bash > " + dir_.path() + "/dtrain.bash");
    ASSERT_EQ(r.exit_code, 0) << r.output;
  }

  // COMPREPLY after completing the last of `words` (a bash array literal, e.g. "dtrain la").
  std::string Complete(const std::string& words) {
    const std::string script = dir_.path() + "/complete.sh";
    WriteFile(script, "source " + dir_.path() +
                          "/dtrain.bash\n"
                          "COMP_WORDS=(" +
                          words +
                          ")\n"
                          "COMP_CWORD=$((${#COMP_WORDS[@]} - 1))\n"
                          "_dtrain\n"
                          "echo \"${COMPREPLY[*]}\"\n");
    const ProcessResult r = RunCommand("bash " + script);
    EXPECT_EQ(r.exit_code, 0) << r.output;
    return r.output;
  }

  TempDir dir_;
};

TEST_F(CompletionE2E, SubcommandsAndFlagsComeFromTheParser) {
  EXPECT_EQ(Complete("dtrain la"), "launch\n");
  EXPECT_EQ(Complete("dtrain launch --npr"), "--nproc-per-node\n");  // the alias is accepted, not offered
  EXPECT_EQ(Complete("dtrain launch configs/x.yaml --max"), "--max-restarts\n");
  EXPECT_EQ(Complete("dtrain data conv"), "convert-fashion-mnist convert-text\n");
  EXPECT_EQ(Complete("dtrain data bench d --th"), "--threads\n");
  EXPECT_EQ(Complete("dtrain ckpt export u --ou"), "--out\n");
  EXPECT_EQ(Complete("dtrain config show --d"), "--defaults --diff\n");
  EXPECT_EQ(Complete("dtrain c"), "ckpt config completion\n");
  EXPECT_EQ(Complete("dtrain bench ''"), "allreduce\n");
  // A command without subcommands leaves words to bash's default (file names): no reply.
  EXPECT_EQ(Complete("dtrain launch conf"), "\n");
}

TEST_F(CompletionE2E, SetCompletesConfigKeysFromTheSchema) {
  EXPECT_EQ(Complete("dtrain train x.yaml --set optim.l"), "optim.lr=\n");
  EXPECT_EQ(Complete("dtrain launch x.yaml --set dist.z"), "dist.zero1=\n");
  EXPECT_EQ(Complete("dtrain config show x.yaml --set model.mlp.h"), "model.mlp.hidden=\n");
  EXPECT_EQ(Complete("dtrain train x.yaml --set = run.prometheus_"), "run.prometheus_port= run.prometheus_addr=\n");
  // After the key, the value is the user's: bash's default.
  EXPECT_EQ(Complete("dtrain train x.yaml --set optim.lr = 3"), "\n");
}

TEST_F(CompletionE2E, RegistersTheFunctionForDtrain) {
  const std::string script = dir_.path() + "/registered.sh";
  WriteFile(script, "source " + dir_.path() + "/dtrain.bash\ncomplete -p dtrain\n");
  const ProcessResult r = RunCommand("bash " + script);
  EXPECT_EQ(r.output, "complete -o default -F _dtrain dtrain\n");
}

}  // namespace
}  // namespace dtrain::launcher
