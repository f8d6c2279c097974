// Regressions found by fuzz/safetensors_fuzzer.cc (scripts/fuzz.sh). Each test names the failure the
// fuzzer reported before the fix in runtime/checkpoint/safetensors.cc.

#include <gtest/gtest.h>

#include <cstdint>
#include <fstream>
#include <string>
#include <vector>

#include "runtime/checkpoint/safetensors.h"
#include "tests/testing/subprocess.h"

namespace dtrain::runtime {
namespace {

// A file from a header: the 8-byte little-endian length, the header padded with spaces, then `data`.
std::string FileWithHeader(std::string header, const std::string& data) {
  while (header.size() % 8 != 0) header += ' ';
  std::string out(8, '\0');
  for (int i = 0; i < 8; ++i) out[i] = static_cast<char>(static_cast<uint64_t>(header.size()) >> (8 * i));
  return out + header + data;
}

// Was: `{"__metadata__":{...},}` (a comma before the closing brace), which the reader rejected as a
// malformed header: a file with metadata and no tensors did not read back.
TEST(SafetensorsRegression, MetadataWithoutTensorsReadsBack) {
  testing::TempDir dir;
  const std::string path = dir.path() + "/m.safetensors";
  ASSERT_TRUE(WriteSafetensors(path, {}, {{"format", "pt"}}).ok());
  const std::string bytes = testing::ReadFile(path);
  EXPECT_EQ(bytes.find("{\"__metadata__\":{\"format\":\"pt\"}}"), 8u) << bytes.substr(8);
  std::vector<NamedTensor> out = {{"stale", {1}, {1}}};
  const Status st = ReadSafetensors(path, &out);
  ASSERT_TRUE(st.ok()) << st.ToString();
  EXPECT_TRUE(out.empty());
}

// Was: the writer escapes control characters as \n, \t, \u0001 (JSON), the reader dropped the backslash
// and kept the letter, so "a\nb" read back as "anb" and "\x01" as "u0001".
TEST(SafetensorsRegression, NamesWithEscapedCharactersRoundTrip) {
  testing::TempDir dir;
  const std::string path = dir.path() + "/n.safetensors";
  const std::vector<std::string> names = {"a\nb", std::string("\x01\x1f\t\r", 4), "q\"\\/", "caf\xc3\xa9"};
  std::vector<NamedTensor> in;
  for (size_t i = 0; i < names.size(); ++i) in.push_back({names[i], {1}, {static_cast<float>(i)}});
  ASSERT_TRUE(WriteSafetensors(path, in).ok());
  std::vector<NamedTensor> out;
  const Status st = ReadSafetensors(path, &out);
  ASSERT_TRUE(st.ok()) << st.ToString();
  ASSERT_EQ(out.size(), names.size());
  for (size_t i = 0; i < names.size(); ++i) {
    EXPECT_EQ(out[i].name, names[i]);
    EXPECT_EQ(out[i].data, std::vector<float>{static_cast<float>(i)});
  }
}

// Other writers (Python's json) escape non-ASCII as \uXXXX, surrogate pairs included: decoded to UTF-8.
// A broken escape is a malformed header, not a crash or a silently different name.
TEST(SafetensorsRegression, UnicodeEscapesDecodeToUtf8AndBadEscapesAreDataLoss) {
  testing::TempDir dir;
  const std::string path = dir.path() + "/u.safetensors";
  const std::string four(4, '\0');
  testing::WriteFile(
      path, FileWithHeader(R"({"caf\u00e9\ud83d\ude00\/":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})", four));
  std::vector<NamedTensor> out;
  Status st = ReadSafetensors(path, &out);
  ASSERT_TRUE(st.ok()) << st.ToString();
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].name, "caf\xc3\xa9\xf0\x9f\x98\x80/");
  for (const char* bad : {R"(\u00e)", R"(\ud83d)", R"(\ude00)", R"(\ud83dx)", R"(\x41)", R"(\u00g0)"}) {
    testing::WriteFile(
        path, FileWithHeader(std::string("{\"a") + bad + "\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}",
                             four));
    st = ReadSafetensors(path, &out);
    EXPECT_EQ(st.code(), Status::Code::kDataLoss) << bad << ": " << st.ToString();
  }
}

// Was: shape [1,-1,-1] (numel 1) and a tensor named "__metadata__" were written, and the file then did
// not read back. Both are now InvalidArgument at write time.
TEST(SafetensorsRegression, NegativeDimsAndTheReservedNameAreRejectedAtWrite) {
  testing::TempDir dir;
  const std::string path = dir.path() + "/r.safetensors";
  Status st = WriteSafetensors(path, {{"w", {1, -1, -1}, {0.5f}}});
  EXPECT_EQ(st.code(), Status::Code::kInvalidArgument) << st.ToString();
  EXPECT_NE(st.message().find("negative dim -1"), std::string::npos) << st.ToString();
  st = WriteSafetensors(path, {{"__metadata__", {1}, {0.5f}}});
  EXPECT_EQ(st.code(), Status::Code::kInvalidArgument) << st.ToString();
  EXPECT_FALSE(std::ifstream(path).good());
}

// Was: a zero-element tensor was read with memcpy(nullptr, ..., 0), undefined behaviour that UBSan
// reports (scripts/sanitize.sh runs this test under it).
TEST(SafetensorsRegression, ZeroElementTensorsReadWithoutCopying) {
  testing::TempDir dir;
  const std::string path = dir.path() + "/z.safetensors";
  ASSERT_TRUE(WriteSafetensors(path, {{"empty", {0, 3}, {}}, {"one", {1}, {2.5f}}}).ok());
  std::vector<NamedTensor> out;
  const Status st = ReadSafetensors(path, &out);
  ASSERT_TRUE(st.ok()) << st.ToString();
  ASSERT_EQ(out.size(), 2u);
  EXPECT_EQ(out[0].shape, (std::vector<int64_t>{0, 3}));
  EXPECT_TRUE(out[0].data.empty());
  EXPECT_EQ(out[1].data, std::vector<float>{2.5f});
}

}  // namespace
}  // namespace dtrain::runtime
