// The checkpoint coordinator's restore path (runtime/train/checkpoint_coordinator.h) through the real binary (CPU,
// Fashion-MNIST CI config): a checkpoint whose optimizer state fails its CRC32C after params.bin and the state itself
// were already written chunk by chunk restores nothing: with --overwrite the run starts afresh from exactly the initial
// parameters and optimizer state; and the save after a resume takes the snapshot buffers allocated in the background.

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "tests/testing/safetensors_diff.h"
#include "tests/testing/subprocess.h"

namespace dtrain::testing {
namespace {

const std::string kData = ::dtrain::testing::kFashionMnistDir;
const std::string kCiConfig = std::string(DT_SOURCE_DIR) + "/configs/fashion_mnist_mlp_ci.yaml";
const std::string kCommon =
    " --set train.device=cpu --set train.eval=false --set train.log_every=10 --set train.max_steps=20"
    " --set checkpoint.every_steps=10";

TEST(RestoreE2E, ACheckpointFailingAfterItsParametersWereCopiedRestoresNothing) {
  DT_SKIP_WITHOUT_FASHION_MNIST();
  TempDir dir;
  const std::string d = dir.path();
  const std::string train = DtrainBin() + " train " + kCiConfig + kCommon;
  ProcessResult a = RunCommand(train + " --set run.dir=" + d + "/a");
  ASSERT_EQ(a.exit_code, 0) << a.output;
  // b starts with a's checkpoints, each with params.bin intact (it verifies, and is copied into the model as it is
  // read) and every other file's last byte flipped (its CRC32C fails once the whole file is in).
  namespace fs = std::filesystem;
  fs::create_directories(d + "/b");
  fs::copy(d + "/a/checkpoints", d + "/b/checkpoints", fs::copy_options::recursive);
  int flipped = 0;
  for (const auto& step : fs::directory_iterator(d + "/b/checkpoints")) {
    if (!step.is_directory()) continue;
    for (const auto& f : fs::directory_iterator(step.path())) {
      if (f.path().extension() != ".bin" || f.path().filename() == "params.bin") continue;
      std::string bytes = ReadFile(f.path().string());
      ASSERT_FALSE(bytes.empty());
      bytes.back() ^= 0x10;
      WriteFile(f.path().string(), bytes);
      ++flipped;
    }
  }
  ASSERT_GE(flipped, 2);  // the optimizer state of both checkpoints
  ProcessResult b = RunCommand(train + " --overwrite --set run.dir=" + d + "/b");
  ASSERT_EQ(b.exit_code, 0) << b.output;
  EXPECT_NE(b.output.find("(corrupt data)"), std::string::npos) << b.output;
  EXPECT_NE(b.output.find("parameters initialised again, optimizer state reset"), std::string::npos) << b.output;
  // A fresh start from the initial parameters: the same final weights as a, bit for bit.
  EXPECT_EQ(MaxSafetensorsDiff(d + "/a/final.safetensors", d + "/b/final.safetensors"), 0.0);
}

// A resume reads straight into the state; the snapshot pool, started after it, serves the next save: nothing is
// allocated at the save, and the restore is timed split into read + verify and copy.
TEST(RestoreE2E, TheSaveAfterAResumeTakesTheBackgroundSnapshotBuffers) {
  DT_SKIP_WITHOUT_FASHION_MNIST();
  TempDir dir;
  const std::string train = DtrainBin() + " train " + kCiConfig + kCommon + " --set run.dir=" + dir.path();
  ProcessResult first = RunCommand(train);
  ASSERT_EQ(first.exit_code, 0) << first.output;
  ProcessResult resumed = RunCommand(train + " --set train.max_steps=30");
  ASSERT_EQ(resumed.exit_code, 0) << resumed.output;
  EXPECT_NE(resumed.output.find("resumed from"), std::string::npos) << resumed.output;
  EXPECT_NE(resumed.output.find("read and verified in"), std::string::npos) << resumed.output;
  EXPECT_EQ(resumed.output.find("allocating now"), std::string::npos) << resumed.output;
  EXPECT_EQ(resumed.output.find("snapshot layout differs"), std::string::npos) << resumed.output;
  EXPECT_NE(resumed.output.find("checkpoint step 30: training stalled"), std::string::npos) << resumed.output;
}

}  // namespace
}  // namespace dtrain::testing
