#include "runtime/checkpoint/safetensors.h"

#include <gtest/gtest.h>

#include <fstream>

#include "tests/testing/subprocess.h"

namespace dtrain::runtime {
namespace {

TEST(Safetensors, RoundTripsNamesShapesAndValues) {
  testing::TempDir dir;
  const std::string path = dir.path() + "/w.safetensors";
  std::vector<NamedTensor> in = {
      {"fc0.weight", {2, 3}, {1, 2, 3, 4, 5, 6}}, {"fc0.bias", {2}, {-0.5f, 0.25f}}, {"empty", {0}, {}}};
  ASSERT_TRUE(WriteSafetensors(path, in, {{"format", "pt"}}).ok());
  std::vector<NamedTensor> out;
  const Status st = ReadSafetensors(path, &out);
  ASSERT_TRUE(st.ok()) << st.ToString();
  ASSERT_EQ(out.size(), 3u);
  for (size_t i = 0; i < in.size(); ++i) {
    EXPECT_EQ(out[i].name, in[i].name);
    EXPECT_EQ(out[i].shape, in[i].shape);
    EXPECT_EQ(out[i].data, in[i].data);
  }
  // The header is 8-byte aligned, as the format requires, and there is no temporary file left.
  const std::string bytes = testing::ReadFile(path);
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | static_cast<unsigned char>(bytes[i]);
  EXPECT_EQ(n % 8, 0u);
  EXPECT_EQ(bytes.size(), 8 + n + 8 * sizeof(float));
  EXPECT_FALSE(std::ifstream(path + ".tmp").good());
}

TEST(Safetensors, CorruptFilesAreDataLossNamingThePath) {
  testing::TempDir dir;
  const std::string path = dir.path() + "/w.safetensors";
  ASSERT_TRUE(WriteSafetensors(path, {{"w", {4}, {1, 2, 3, 4}}}).ok());
  const std::string good = testing::ReadFile(path);
  std::vector<NamedTensor> out;
  const std::vector<std::string> bad = {
      good.substr(0, good.size() - 3),                                      // truncated data
      good.substr(0, 5),                                                    // truncated length
      std::string("\xff\xff\xff\xff\xff\xff\xff\x7f", 8) + good.substr(8),  // absurd header length
      good.substr(0, 8) + std::string(good.size() - 8, '{'),                // garbage header
  };
  for (const auto& b : bad) {
    testing::WriteFile(path, b);
    const Status st = ReadSafetensors(path, &out);
    EXPECT_EQ(st.code(), Status::Code::kDataLoss) << st.ToString();
    EXPECT_NE(st.message().find(path), std::string::npos) << st.ToString();
  }
  EXPECT_EQ(ReadSafetensors(dir.path() + "/missing", &out).code(), Status::Code::kNotFound);
}

// Regression: the writer accepted two tensors of one name and wrote a header with a key twice, which
// Python's json (and so safetensors.torch.load_file) reads as one tensor, the last: a tensor vanished.
// Was: model.init_from naming a directory (e.g. a --format hf export) said "shorter than 8 bytes".
TEST(Safetensors, ADirectoryIsSaidToBeADirectory) {
  testing::TempDir dir;
  std::vector<NamedTensor> tensors;
  const Status st = ReadSafetensors(dir.path(), &tensors);
  EXPECT_EQ(st.code(), Status::Code::kInvalidArgument);
  EXPECT_EQ(st.message(), "safetensors file '" + dir.path() + "': is a directory, not a regular file");
}

TEST(Safetensors, DuplicateNamesAreRefusedByTheWriterAndTheReader) {
  testing::TempDir dir;
  const std::string path = dir.path() + "/w.safetensors";
  const Status st =
      WriteSafetensors(path, {{"fc0.weight", {1}, {1}}, {"fc0.bias", {1}, {2}}, {"fc0.weight", {1}, {3}}});
  EXPECT_EQ(st.code(), Status::Code::kInvalidArgument) << st.ToString();
  EXPECT_NE(st.message().find("duplicate tensor name 'fc0.weight' (tensor 2 of 3)"), std::string::npos) << st.message();
  EXPECT_FALSE(std::ifstream(path).good());
  EXPECT_FALSE(std::ifstream(path + ".tmp").good());

  // A file from elsewhere with a name twice is corrupt for the reader.
  std::string header =
      R"({"w":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},"w":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})";
  while (header.size() % 8 != 0) header += ' ';
  std::string file(8, '\0');
  for (int i = 0; i < 8; ++i) file[i] = static_cast<char>(static_cast<uint64_t>(header.size()) >> (8 * i));
  testing::WriteFile(path, file + header + std::string(8, '\0'));
  std::vector<NamedTensor> out;
  const Status rd = ReadSafetensors(path, &out);
  EXPECT_EQ(rd.code(), Status::Code::kDataLoss) << rd.ToString();
  EXPECT_NE(rd.message().find(path + ": tensor 'w' appears twice"), std::string::npos) << rd.message();
}

}  // namespace
}  // namespace dtrain::runtime
