#include "runtime/checkpoint/safetensors.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <fstream>
#include <limits>
#include <string>
#include <vector>

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

// The streamed writer (one tensor's buffer, filled in order) writes the same bytes as the one given every tensor; a
// fill that fails leaves no file, and its error names the path.
TEST(Safetensors, StreamedWriteEqualsTheWholeWriteAndAFailedFillLeavesNothing) {
  testing::TempDir dir;
  const std::vector<NamedTensor> in = {
      {"a", {2, 3}, {1, 2, 3, 4, 5, 6}}, {"b", {2}, {-0.5f, 0.25f}}, {"empty", {0}, {}}, {"c", {1}, {7}}};
  ASSERT_TRUE(WriteSafetensors(dir.path() + "/whole.safetensors", in, {{"step", "3"}}).ok());
  std::vector<NamedTensor> shapes = in;
  for (NamedTensor& t : shapes) t.data.clear();
  std::vector<size_t> order;
  auto fill = [&](size_t t, float* dst) {
    order.push_back(t);
    std::copy(in[t].data.begin(), in[t].data.end(), dst);
    return Status::OK();
  };
  ASSERT_TRUE(WriteSafetensors(dir.path() + "/streamed.safetensors", shapes, fill, {{"step", "3"}}).ok());
  EXPECT_EQ(order, (std::vector<size_t>{0, 1, 2, 3}));
  EXPECT_EQ(testing::ReadFile(dir.path() + "/streamed.safetensors"),
            testing::ReadFile(dir.path() + "/whole.safetensors"));

  const std::string failed = dir.path() + "/failed.safetensors";
  auto fail_at_b = [&](size_t t, float* dst) {
    return t == 1 ? Status::Unavailable("device copy failed") : fill(t, dst);
  };
  const Status st = WriteSafetensors(failed, shapes, fail_at_b);
  EXPECT_EQ(st.code(), Status::Code::kUnavailable);
  EXPECT_NE(st.message().find(failed), std::string::npos) << st.ToString();
  EXPECT_FALSE(std::ifstream(failed).good());
  EXPECT_FALSE(std::ifstream(failed + ".tmp").good());
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

// A file from a header and raw data (the 8-byte little-endian length, the header padded with spaces).
std::string RawFile(std::string header, const std::string& data) {
  while (header.size() % 8 != 0) header += ' ';
  std::string out(8, '\0');
  for (int i = 0; i < 8; ++i) out[i] = static_cast<char>(static_cast<uint64_t>(header.size()) >> (8 * i));
  return out + header + data;
}

// Little-endian 16-bit words.
std::string Words(const std::vector<uint16_t>& w) {
  std::string out;
  for (uint16_t v : w) out += std::string{static_cast<char>(v & 0xff), static_cast<char>(v >> 8)};
  return out;
}

// Published Llama weights are bf16, some checkpoints f16: both read as f32, exactly.
TEST(Safetensors, Bf16AndF16WidenToF32Exactly) {
  testing::TempDir dir;
  const std::string path = dir.path() + "/h.safetensors";
  // bf16: 1, -2.5, 3.140625, +inf, the smallest subnormal 2^-133, -0
  // f16:  1, -2.5, 65504 (the largest), +inf, the smallest subnormal 2^-24, the largest subnormal 1023 * 2^-24, -0
  const std::string bf16 = Words({0x3f80, 0xc020, 0x4049, 0x7f80, 0x0001, 0x8000});
  const std::string f16 = Words({0x3c00, 0xc100, 0x7bff, 0x7c00, 0x0001, 0x03ff, 0x8000, 0x7e00});
  testing::WriteFile(path, RawFile(R"({"__metadata__":{"format":"pt"},)"
                                   R"("b":{"dtype":"BF16","shape":[2,3],"data_offsets":[0,12]},)"
                                   R"("h":{"dtype":"F16","shape":[8],"data_offsets":[12,28]}})",
                                   bf16 + f16));
  std::vector<NamedTensor> out;
  const Status st = ReadSafetensors(path, &out);
  ASSERT_TRUE(st.ok()) << st.ToString();
  ASSERT_EQ(out.size(), 2u);
  EXPECT_EQ(out[0].shape, (std::vector<int64_t>{2, 3}));
  const float inf = std::numeric_limits<float>::infinity();
  const std::vector<float> want_b = {1.0f, -2.5f, 3.140625f, inf, std::ldexp(1.0f, -133), -0.0f};
  ASSERT_EQ(out[0].data.size(), want_b.size());
  for (size_t i = 0; i < want_b.size(); ++i) EXPECT_EQ(out[0].data[i], want_b[i]) << i;
  EXPECT_TRUE(std::signbit(out[0].data[5]));
  const std::vector<float> want_h = {1.0f, -2.5f, 65504.0f, inf, std::ldexp(1.0f, -24), 1023 * std::ldexp(1.0f, -24),
                                     -0.0f};
  ASSERT_EQ(out[1].data.size(), 8u);
  for (size_t i = 0; i < want_h.size(); ++i) EXPECT_EQ(out[1].data[i], want_h[i]) << i;
  EXPECT_TRUE(std::signbit(out[1].data[6]));
  EXPECT_TRUE(std::isnan(out[1].data[7]));

  // The offsets must span 2 bytes per element for these dtypes (4 would be an F32 size): corrupt.
  testing::WriteFile(path, RawFile(R"({"b":{"dtype":"BF16","shape":[3],"data_offsets":[0,12]}})", bf16));
  Status bad = ReadSafetensors(path, &out);
  EXPECT_EQ(bad.code(), Status::Code::kDataLoss) << bad.ToString();
  EXPECT_NE(bad.message().find("tensor 'b' offsets do not match its shape"), std::string::npos) << bad.message();
  // Other dtypes are named.
  testing::WriteFile(path, RawFile(R"({"q":{"dtype":"I8","shape":[4],"data_offsets":[0,4]}})", "abcd"));
  bad = ReadSafetensors(path, &out);
  EXPECT_EQ(bad.code(), Status::Code::kInvalidArgument) << bad.ToString();
  EXPECT_NE(bad.message().find("tensor 'q' has dtype I8, want F32, BF16 or F16"), std::string::npos) << bad.message();
}

}  // namespace
}  // namespace dtrain::runtime
