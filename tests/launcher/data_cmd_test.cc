#include "launcher/cli/data_cmd.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <string>

#include "tests/testing/subprocess.h"

namespace dtrain::launcher {
namespace {

using dtrain::testing::DtrainBin;
using dtrain::testing::RunCommand;
using dtrain::testing::TempDir;
using dtrain::testing::WriteFile;

TEST(DataCmdTest, ConvertTextInspectVerifyAndACorruptShard) {
  TempDir dir;
  std::string text;
  for (int i = 0; i < 5000; ++i) text.push_back(static_cast<char>('a' + i % 26));
  WriteFile(dir.path() + "/a.txt", text);
  const std::string out = dir.path() + "/ds";
  ASSERT_TRUE(RunData({"convert-text", "--out", out, "--seq-len", "64", "--samples-per-shard", "20", "--dtype",
                       "uint16", dir.path() + "/a.txt"})
                  .ok());
  ASSERT_TRUE(RunData({"inspect", out}).ok());
  ASSERT_TRUE(RunData({"verify", out}).ok());
  // (5000 - 1) / 64 = 78 records -> shards of 20, 20, 20, 18.
  ASSERT_TRUE(std::filesystem::exists(out + "/shard-00003.dts"));
  const std::string victim = out + "/shard-00002.dts";
  FILE* f = std::fopen(victim.c_str(), "r+b");
  ASSERT_NE(f, nullptr);
  std::fseek(f, -7, SEEK_END);
  std::fputc('#', f);
  std::fclose(f);
  const Status st = RunData({"verify", out});
  EXPECT_EQ(st.code(), Status::Code::kDataLoss);
  EXPECT_NE(st.message().find(victim), std::string::npos) << st.ToString();
  EXPECT_EQ(RunData({"convert-text", "--out", out, "--dtype", "int8", dir.path() + "/a.txt"}).code(),
            Status::Code::kInvalidArgument);
  EXPECT_EQ(RunData({"frobnicate"}).code(), Status::Code::kInvalidArgument);
}

TEST(DataCmdTest, BinaryConvertsFashionMnistAndVerifyExitsTwoNamingTheFile) {
  if (!std::filesystem::exists("/usr/share/datasets/fashion-mnist/t10k-images-idx3-ubyte.gz")) {
    GTEST_SKIP() << "Fashion-MNIST not installed (apt-get install dataset-fashion-mnist)";
  }
  TempDir dir;
  const std::string bin = DtrainBin();
  auto r = RunCommand(bin + " data convert-fashion-mnist --split t10k --samples-per-shard 4000 --out " + dir.path());
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("10000 samples in 3 shards"), std::string::npos) << r.output;
  r = RunCommand(bin + " data inspect " + dir.path() + "/t10k");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("dims [28, 28]"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("samples 10000"), std::string::npos) << r.output;
  r = RunCommand(bin + " data verify " + dir.path() + "/t10k");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const std::string victim = dir.path() + "/t10k/shard-00001.dts";
  std::filesystem::resize_file(victim, std::filesystem::file_size(victim) - 100);
  r = RunCommand(bin + " data verify " + dir.path() + "/t10k");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find(victim), std::string::npos) << r.output;
}

// `convert-text --overwrite` onto its own dataset used to delete its input shard. Converting into a directory that
// holds an input is refused (exit 2) with or without --overwrite, and the input stays; --overwrite onto another
// non-empty directory moves it aside, deleting nothing.
TEST(DataCmdTest, ConvertOntoItsOwnInputIsRefusedAndOverwriteMovesAside) {
  TempDir dir;
  std::string text;
  for (int i = 0; i < 3000; ++i) text.push_back(static_cast<char>('a' + i % 26));
  const std::string out = dir.path() + "/ds";
  std::filesystem::create_directories(out);
  WriteFile(out + "/corpus.txt", text);
  WriteFile(out + "/notes.txt", "the user's notes");
  for (const bool overwrite : {false, true}) {
    std::vector<std::string> args = {"convert-text", "--out", out, "--seq-len", "64", out + "/corpus.txt"};
    if (overwrite) args.push_back("--overwrite");
    const Status st = RunData(args);
    EXPECT_EQ(st.code(), Status::Code::kInvalidArgument) << st.ToString();
    EXPECT_NE(st.message().find("holds the input " + out + "/corpus.txt"), std::string::npos) << st.ToString();
    EXPECT_EQ(testing::ReadFile(out + "/corpus.txt"), text);
  }
  // The same through the binary: exit 2.
  const auto r =
      RunCommand(DtrainBin() + " data convert-text --overwrite --seq-len 64 --out " + out + " " + out + "/corpus.txt");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_EQ(testing::ReadFile(out + "/corpus.txt"), text);

  // Another non-empty directory: refused without --overwrite; with it, moved aside whole.
  const std::string fresh = dir.path() + "/fresh";
  ASSERT_TRUE(RunData({"convert-text", "--out", fresh, "--seq-len", "64", out + "/corpus.txt"}).ok());
  WriteFile(fresh + "/mine.txt", "keep me");
  EXPECT_EQ(RunData({"convert-text", "--out", fresh, "--seq-len", "32", out + "/corpus.txt"}).code(),
            Status::Code::kInvalidArgument);
  ASSERT_TRUE(RunData({"convert-text", "--out", fresh, "--seq-len", "32", "--overwrite", out + "/corpus.txt"}).ok());
  int aside = 0;
  for (const auto& e : std::filesystem::directory_iterator(dir.path())) {
    const std::string n = e.path().filename().string();
    if (n.rfind("fresh.replaced-", 0) != 0) continue;
    ++aside;
    EXPECT_EQ(testing::ReadFile(e.path().string() + "/mine.txt"), "keep me");
    EXPECT_TRUE(std::filesystem::exists(e.path().string() + "/manifest.pb"));
  }
  EXPECT_EQ(aside, 1);
  ASSERT_TRUE(RunData({"verify", fresh}).ok());
}

}  // namespace
}  // namespace dtrain::launcher
