// One exit-code contract for every command (launcher/exit_codes.h, ExitCodeFor): a dataset shard with flipped
// bytes is a data error, exit 2, whether `dtrain train` reads it or the ranks of `dtrain launch` do (per-node and
// under mpirun) — and `dtrain launch --max-restarts` does not restart on it; a corrupt manifest is exit 2 too,
// found by `dtrain train` or by the launcher's own check before any rank starts.

#include <gtest/gtest.h>

#include <fstream>
#include <string>

#include "tests/testing/subprocess.h"

namespace dtrain::testing {
namespace {

const std::string kMlp = std::string(DT_SOURCE_DIR) + "/configs/fashion_mnist_mlp_ci.yaml";
const std::string kFmnist = ::dtrain::testing::kFashionMnistDir;

class CorruptDataTest : public ::testing::Test {
 protected:
  void SetUp() override {
    DT_SKIP_WITHOUT_FASHION_MNIST();
    const ProcessResult conv = RunCommand(DtrainBin() + " data convert-fashion-mnist --split train --out " +
                                          dir_.path() + "/fmnist --samples-per-shard 10000");
    ASSERT_EQ(conv.exit_code, 0) << conv.output;
    // Flip bytes in the middle of the first shard: inside a record (the header and its CRC stay intact, so the
    // launcher's check before the start passes and the ranks find it when they read the record).
    std::string bytes = ReadFile(shard());
    ASSERT_GT(bytes.size(), 4096u);
    for (size_t i = bytes.size() / 2; i < bytes.size() / 2 + 64; ++i) bytes[i] = static_cast<char>(bytes[i] ^ 0x5a);
    WriteFile(shard(), bytes);
  }

  std::string shard() const { return dir_.path() + "/fmnist/train/shard-00000.dts"; }
  std::string Sets(const std::string& run) const {
    return " --set data.dataset=shards --set data.train_shards=" + dir_.path() +
           "/fmnist/train --set data.shuffle=false --set train.eval=false"
           " --set train.device=cpu --set run.dir=" +
           dir_.path() + "/" + run;
  }

  TempDir dir_;
};

TEST_F(CorruptDataTest, TrainExitsTwo) {
  const ProcessResult r = RunCommand(DtrainBin() + " train " + kMlp + Sets("train"));
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("shard-00000.dts"), std::string::npos) << r.output;
}

TEST_F(CorruptDataTest, LaunchExitsTwoLikeTrainAndDoesNotRestart) {
  const ProcessResult r =
      RunCommand(DtrainBin() + " launch --nproc-per-node 2 --max-restarts 2 " + kMlp + Sets("launch"));
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("shard-00000.dts"), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("restarting the job"), std::string::npos) << r.output;
}

TEST_F(CorruptDataTest, PerNodeLaunchExitsTwoLikeTrain) {
  // One rank per node: the per-node start of a CPU job (the CPU path needs MPI for more than one rank).
  const ProcessResult r = RunCommand(DtrainBin() +
                                     " launch --node-rank 0 --nnodes 1 --nproc-per-node 1 --master-addr 127.0.0.1 "
                                     "--max-restarts 2 " +
                                     kMlp + Sets("node"));
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("shard-00000.dts"), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("restarting the job"), std::string::npos) << r.output;
}

TEST_F(CorruptDataTest, CorruptManifestIsExitTwoForTrainAndForTheLaunchersOwnCheck) {
  // Found before any rank starts: by the launcher's check of the run (runtime/train/run_check.h), mapped by the
  // same ExitCodeFor as `dtrain train`'s error.
  const std::string manifest = dir_.path() + "/fmnist/train/manifest.pb";
  std::string m = ReadFile(manifest);
  ASSERT_FALSE(m.empty());
  m[m.size() / 2] ^= 0x20;
  WriteFile(manifest, m);
  ProcessResult r = RunCommand(DtrainBin() + " train " + kMlp + Sets("train"));
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("manifest.pb"), std::string::npos) << r.output;
  r = RunCommand(DtrainBin() + " launch --nproc-per-node 2 " + kMlp + Sets("launch"));
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("dtrain launch: error:"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("manifest.pb"), std::string::npos) << r.output;
}

}  // namespace
}  // namespace dtrain::testing
