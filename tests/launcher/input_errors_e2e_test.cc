// Bad input to the real binary ends in one clear message and exit 2, and destroys nothing:
// `dtrain data convert-text` on a directory, on an unreadable file, into an existing dataset (refused
// unless --overwrite, which leaves no stale shard); a flipped bit in a dataset manifest; a directory,
// an empty file or a FIFO given as the config; train.epochs so large that the run's length overflows;
// an MLP width that asks for 4e18 bytes; a password in the storage endpoint (never printed).

#include <dirent.h>
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "tests/testing/subprocess.h"

namespace dtrain::testing {
namespace {

std::vector<std::string> Shards(const std::string& dir) {
  std::vector<std::string> out;
  DIR* d = opendir(dir.c_str());
  if (d == nullptr) return out;
  while (const dirent* e = readdir(d)) {
    if (std::string(e->d_name).rfind("shard-", 0) == 0) out.push_back(e->d_name);
  }
  closedir(d);
  return out;
}

TEST(DataConvertE2E, DirectoryAndUnreadableInputsAreExit2WithTheReason) {
  TempDir dir;
  ProcessResult r = RunCommand(DtrainBin() + " data convert-text --out " + dir.path() + "/ds " + dir.path());
  EXPECT_EQ(r.exit_code, 2) << r.output;  // was 134: an uncaught exception
  EXPECT_NE(r.output.find(dir.path() + ": is a directory"), std::string::npos) << r.output;
  // /proc/self/mem opens but every read at offset 0 fails with EIO: the reason is named.
  r = RunCommand(DtrainBin() + " data convert-text --out " + dir.path() + "/ds /proc/self/mem");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("/proc/self/mem: cannot read the input text file: Input/output error"), std::string::npos)
      << r.output;
  r = RunCommand(DtrainBin() + " data convert-text --out " + dir.path() + "/ds " + dir.path() + "/missing.txt");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("missing.txt: input text file does not exist"), std::string::npos) << r.output;
}

TEST(DataConvertE2E, ExistingDatasetIsRefusedUnlessOverwriteWhichLeavesNoStaleShard) {
  TempDir dir;
  std::string text;
  for (int i = 0; i < 5000; ++i) text.push_back(static_cast<char>('a' + i % 26));
  WriteFile(dir.path() + "/a.txt", text);
  const std::string out = dir.path() + "/ds";
  const std::string convert = DtrainBin() + " data convert-text --seq-len 64 --out " + out + " ";
  ProcessResult r = RunCommand(convert + "--samples-per-shard 20 " + dir.path() + "/a.txt");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  ASSERT_EQ(Shards(out).size(), 4u);  // 78 records: 20, 20, 20, 18
  const std::string manifest = ReadFile(out + "/manifest.pb");

  r = RunCommand(convert + "--samples-per-shard 100 " + dir.path() + "/a.txt");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find(out + ": is not empty (it holds a dataset): give a new --out directory, or --overwrite"),
            std::string::npos)
      << r.output;
  EXPECT_EQ(ReadFile(out + "/manifest.pb"), manifest);
  EXPECT_EQ(Shards(out).size(), 4u);

  r = RunCommand(convert + "--samples-per-shard 100 --overwrite " + dir.path() + "/a.txt");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(Shards(out), std::vector<std::string>{"shard-00000.dts"});
  r = RunCommand(DtrainBin() + " data verify " + out);
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("all 1 shards ok"), std::string::npos) << r.output;

  // One flipped bit in the manifest: DataLoss naming the file (exit 2), for verify and inspect alike.
  std::string m = ReadFile(out + "/manifest.pb");
  m[m.size() / 2] ^= 0x20;
  WriteFile(out + "/manifest.pb", m);
  for (const std::string verb : {"verify", "inspect"}) {
    r = RunCommand(DtrainBin() + " data " + verb + " " + out);
    EXPECT_EQ(r.exit_code, 2) << r.output;
    EXPECT_NE(r.output.find(out + "/manifest.pb: checksum mismatch"), std::string::npos) << r.output;
  }
}

TEST(ConfigInputE2E, DirectoryOrEmptyConfigIsExit2) {
  TempDir dir;
  ProcessResult r = RunCommand(DtrainBin() + " train " + dir.path() + " --set train.device=cpu");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("config " + dir.path() + " is a directory"), std::string::npos) << r.output;
  WriteFile(dir.path() + "/empty.yaml", "");
  r = RunCommand(DtrainBin() + " train " + dir.path() +
                 "/empty.yaml --set train.device=cpu --set run.dir=" + dir.path() + "/run");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("config " + dir.path() + "/empty.yaml is empty"), std::string::npos) << r.output;
  r = RunCommand(DtrainBin() + " launch --nproc-per-node 2 " + dir.path() + "/empty.yaml --set run.dir=" + dir.path() +
                 "/run");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("is empty"), std::string::npos) << r.output;
}

const std::string kCiConfig = std::string(DT_SOURCE_DIR) + "/configs/fashion_mnist_mlp_ci.yaml";

// Was: the open blocked forever. `timeout` turns a regression into exit 124 instead of a hung test.
TEST(ConfigInputE2E, AFifoAsTheConfigIsExit2AtOnce) {
  TempDir dir;
  const std::string fifo = dir.path() + "/config.yaml";
  ASSERT_EQ(RunCommand("mkfifo " + fifo).exit_code, 0);
  ProcessResult r = RunCommand("timeout 60 " + DtrainBin() + " train " + fifo + " --set train.device=cpu");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("config " + fifo + " is a FIFO (named pipe), not a regular file"), std::string::npos)
      << r.output;
}

// A FIFO in place of a shard, or given as input text: refused at once naming it (an open would block forever).
TEST(DataConvertE2E, AFifoAsShardOrInputIsExit2AtOnce) {
  TempDir dir;
  std::string text;
  for (int i = 0; i < 3000; ++i) text.push_back(static_cast<char>('a' + i % 26));
  WriteFile(dir.path() + "/a.txt", text);
  const std::string out = dir.path() + "/ds";
  ProcessResult r =
      RunCommand(DtrainBin() + " data convert-text --seq-len 64 --out " + out + " " + dir.path() + "/a.txt");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  ASSERT_EQ(RunCommand("rm " + out + "/shard-00000.dts && mkfifo " + out + "/shard-00000.dts").exit_code, 0);
  r = RunCommand("timeout 60 " + DtrainBin() + " data verify " + out);
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("shard '" + out + "/shard-00000.dts': is a FIFO (named pipe), not a regular file"),
            std::string::npos)
      << r.output;
  r = RunCommand("timeout 60 " + DtrainBin() + " data convert-text --seq-len 64 --out " + dir.path() + "/ds2 " + out +
                 "/shard-00000.dts");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("is a FIFO"), std::string::npos) << r.output;
}

// Was: signed overflow of epochs x steps (UBSan), and the run exited 0 after one epoch.
TEST(ConfigInputE2E, AnEpochCountThatOverflowsTheRunLengthIsExit2) {
  DT_SKIP_WITHOUT_FASHION_MNIST();
  TempDir dir;
  ProcessResult r =
      RunCommand(DtrainBin() + " train " + kCiConfig +
                 " --set train.device=cpu --set train.epochs=9223372036854775807 --set run.dir=" + dir.path() + "/run");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("train.epochs x training samples: 9223372036854775807 x 10000 does not fit"),
            std::string::npos)
      << r.output;
  EXPECT_EQ(r.output.find("step 1/"), std::string::npos) << r.output;
}

// Was: an allocation of 4e18 bytes that named no field (and was retried by --max-restarts).
TEST(ConfigInputE2E, AnMlpWidthOutOfRangeIsExit2NamingTheField) {
  DT_SKIP_WITHOUT_FASHION_MNIST();
  TempDir dir;
  ProcessResult r = RunCommand(
      DtrainBin() + " train " + kCiConfig +
      " --set train.device=cpu --set model.mlp.hidden=[256,2000000000] --set run.dir=" + dir.path() + "/run");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("model.mlp.hidden[1]: 2000000000 is outside [1, 16777216]"), std::string::npos) << r.output;
  r = RunCommand(DtrainBin() + " train " + kCiConfig +
                 " --set train.device=cpu --set model.mlp.hidden=[16000000,16000000] --set run.dir=" + dir.path() +
                 "/run");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("model.mlp: more than 17179869184 parameters"), std::string::npos) << r.output;
}

// Was: a password inside the S3 endpoint was printed twice and written to <run.dir>/config.yaml.
TEST(ConfigInputE2E, APasswordInTheStorageEndpointIsNeverPrintedOrWritten) {
  DT_SKIP_WITHOUT_FASHION_MNIST();
  TempDir dir;
  ProcessResult r =
      RunCommand(DtrainBin() + " train " + kCiConfig +
                 " --set train.device=cpu --set train.max_steps=2 --set checkpoint.url=s3://b/run" +
                 " --set storage.endpoint=http://admin:hunter2@127.0.0.1:1 --set run.dir=" + dir.path() + "/run");
  EXPECT_NE(r.exit_code, 0) << r.output;
  EXPECT_EQ(r.output.find("hunter2"), std::string::npos) << r.output;
  EXPECT_EQ(ReadFile(dir.path() + "/run/config.yaml").find("hunter2"), std::string::npos);
  ProcessResult shown = RunCommand(DtrainBin() + " config show " + kCiConfig +
                                   " --set storage.endpoint=http://admin:hunter2@127.0.0.1:1");
  EXPECT_EQ(shown.output.find("hunter2"), std::string::npos) << shown.output;
  EXPECT_NE(shown.output.find("http://<redacted>@127.0.0.1:1"), std::string::npos) << shown.output;
}

}  // namespace
}  // namespace dtrain::testing
