// `dtrain ckpt export --out` never replaces a user's work without asking, through the real binary: an existing
// file is refused (exit 2) and left as it was; --overwrite moves it aside (never deletes it); a file of the
// checkpoint it reads is refused even with --overwrite (it used to be overwritten, and the checkpoint then failed
// verify); a path inside another checkpoint store is refused unless --overwrite. `ckpt inspect` on a step directory
// inspects that step (it used to say "no valid checkpoint").

#include <gtest/gtest.h>

#include <filesystem>
#include <string>

#include "tests/testing/subprocess.h"

namespace dtrain::testing {
namespace {

const std::string kCiConfig = std::string(DT_SOURCE_DIR) + "/configs/fashion_mnist_mlp_ci.yaml";

// One short CPU run with checkpoints at steps 2 and 4 in <dir>/<name>/checkpoints.
void Train(const std::string& dir, const std::string& name) {
  ProcessResult r = RunCommand(
      DtrainBin() + " train " + kCiConfig + " --set train.device=cpu --set train.eval=false --set train.max_steps=4" +
      " --set schedule.warmup_steps=2 --set checkpoint.every_steps=2 --set run.dir=" + dir + "/" + name);
  ASSERT_EQ(r.exit_code, 0) << r.output;
}

std::vector<std::string> Replaced(const std::string& dir, const std::string& prefix) {
  std::vector<std::string> out;
  for (const auto& e : std::filesystem::directory_iterator(dir)) {
    const std::string n = e.path().filename().string();
    if (n.rfind(prefix + ".replaced-", 0) == 0) out.push_back(e.path().string());
  }
  return out;
}

TEST(CkptExportE2E, ExistingPathsAndCheckpointFilesAreNotOverwrittenWithoutAsking) {
  DT_SKIP_WITHOUT_FASHION_MNIST();
  TempDir tmp;
  const std::string d = tmp.path();
  Train(d, "a");
  const std::string ck = d + "/a/checkpoints";
  const std::string exp = DtrainBin() + " ckpt export " + ck + " --out ";

  // A user's file.
  WriteFile(d + "/mine.safetensors", "the user's own work");
  ProcessResult refused = RunCommand(exp + d + "/mine.safetensors");
  EXPECT_EQ(refused.exit_code, 2) << refused.output;
  EXPECT_NE(refused.output.find("exists: dtrain ckpt export does not replace it"), std::string::npos) << refused.output;
  EXPECT_EQ(ReadFile(d + "/mine.safetensors"), "the user's own work");
  ProcessResult over = RunCommand(exp + d + "/mine.safetensors --overwrite");
  ASSERT_EQ(over.exit_code, 0) << over.output;
  const auto aside = Replaced(d, "mine.safetensors");
  ASSERT_EQ(aside.size(), 1u);
  EXPECT_EQ(ReadFile(aside[0]), "the user's own work");
  EXPECT_NE(over.output.find("moved the existing '" + d + "/mine.safetensors' aside to '" + aside[0] + "'"),
            std::string::npos)
      << over.output;
  EXPECT_GT(ReadFile(d + "/mine.safetensors").size(), 1000u);

  // A file of the checkpoint it reads: refused even with --overwrite, and the checkpoint still verifies.
  const std::string own = ck + "/step-00000004/params.bin";
  const std::string before = ReadFile(own);
  for (const std::string& flag : {"", " --overwrite"}) {
    ProcessResult onto = RunCommand(exp + own + flag);
    EXPECT_EQ(onto.exit_code, 2) << onto.output;
    EXPECT_NE(onto.output.find("lies inside the checkpoint store it exports"), std::string::npos) << onto.output;
  }
  EXPECT_EQ(ReadFile(own), before);
  EXPECT_EQ(RunCommand(DtrainBin() + " ckpt verify " + ck).exit_code, 0);

  // Inside another run's checkpoint store: refused unless --overwrite.
  Train(d, "b");
  const std::string other = d + "/b/checkpoints/w.safetensors";
  ProcessResult inside = RunCommand(exp + other);
  EXPECT_EQ(inside.exit_code, 2) << inside.output;
  EXPECT_NE(inside.output.find("lies inside the checkpoint store"), std::string::npos) << inside.output;
  EXPECT_EQ(RunCommand(exp + other + " --overwrite").exit_code, 0);

  // A new path outside any store needs no flag.
  EXPECT_EQ(RunCommand(exp + d + "/new.safetensors").exit_code, 0);
}

TEST(CkptExportE2E, InspectOnAStepDirectoryInspectsThatStep) {
  DT_SKIP_WITHOUT_FASHION_MNIST();
  TempDir tmp;
  Train(tmp.path(), "a");
  ProcessResult r = RunCommand(DtrainBin() + " ckpt inspect " + tmp.path() + "/a/checkpoints/step-00000002/");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("step           2 (optimizer adamw, step 2)"), std::string::npos) << r.output;
  ProcessResult mismatch =
      RunCommand(DtrainBin() + " ckpt inspect " + tmp.path() + "/a/checkpoints/step-00000002 --step 4");
  EXPECT_EQ(mismatch.exit_code, 2) << mismatch.output;
}

}  // namespace
}  // namespace dtrain::testing
