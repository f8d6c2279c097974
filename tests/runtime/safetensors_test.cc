#include "runtime/safetensors.h"

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

}  // namespace
}  // namespace dtrain::runtime
