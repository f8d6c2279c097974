// ImportTokens: nanoGPT raw uint16 files and llm.c .bin shards become TOKENS datasets, record by record.

#include "data/import_tokens.h"

#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>

#include "data/dataset.h"
#include "tests/testing/subprocess.h"

namespace dtrain::data {
namespace {

using testing::TempDir;

void WriteRaw(const std::string& path, const std::vector<uint16_t>& tokens) {
  std::ofstream(path, std::ios::binary).write(reinterpret_cast<const char*>(tokens.data()), tokens.size() * 2);
}

void WriteLlmc(const std::string& path, const std::vector<uint16_t>& tokens, int32_t count_in_header) {
  int32_t header[256] = {20240520, 1, count_in_header};
  std::ofstream out(path, std::ios::binary);
  out.write(reinterpret_cast<const char*>(header), sizeof(header));
  out.write(reinterpret_cast<const char*>(tokens.data()), tokens.size() * 2);
}

// Record r of a dataset of uint16 tokens.
std::vector<uint16_t> Record(const Dataset& d, int64_t r, int64_t len) {
  std::vector<uint16_t> v(len);
  EXPECT_TRUE(d.Read(r, v.data()).ok());
  return v;
}

TEST(ImportTokens, RawAndLlmcFilesAreOneStreamCutIntoOverlappingRecords) {
  TempDir dir;
  std::vector<uint16_t> a(10), b(7);
  for (int i = 0; i < 10; ++i) a[i] = static_cast<uint16_t>(50000 + i);  // GPT-2 ids above 2^15
  for (int i = 0; i < 7; ++i) b[i] = static_cast<uint16_t>(100 + i);
  WriteRaw(dir.path() + "/train.bin", a);
  WriteLlmc(dir.path() + "/shard_000.bin", b, 7);
  ImportTokensOptions o;
  o.seq_len = 4;  // records of 5 tokens, stride 4
  int64_t dropped = -1;
  proto::DatasetManifest m;
  ASSERT_TRUE(
      ImportTokens({dir.path() + "/train.bin", dir.path() + "/shard_000.bin"}, dir.path() + "/ds", o, &dropped, &m)
          .ok());
  // 17 tokens: records start at 0, 4, 8, 12 (the one at 12 ends at 16); no token left over.
  EXPECT_EQ(m.total_samples(), 4u);
  EXPECT_EQ(dropped, 0);
  EXPECT_EQ(m.schema().vocab_size(), 50257);
  EXPECT_EQ(m.schema().dims(0), 5);
  std::unique_ptr<Dataset> d;
  ASSERT_TRUE(Dataset::Open(dir.path() + "/ds", /*verify_checksums=*/true, &d).ok());
  EXPECT_EQ(Record(*d, 0, 5), (std::vector<uint16_t>{50000, 50001, 50002, 50003, 50004}));
  EXPECT_EQ(Record(*d, 2, 5), (std::vector<uint16_t>{50008, 50009, 100, 101, 102}));  // across the two files
  EXPECT_EQ(Record(*d, 3, 5), (std::vector<uint16_t>{102, 103, 104, 105, 106}));
}

TEST(ImportTokens, BadInputsAreNamed) {
  TempDir dir;
  ImportTokensOptions o;
  o.seq_len = 2;
  WriteRaw(dir.path() + "/big.bin", {1, 2, 60000});
  Status st = ImportTokens({dir.path() + "/big.bin"}, dir.path() + "/o1", o);
  EXPECT_EQ(st.code(), Status::Code::kInvalidArgument);
  EXPECT_NE(st.message().find("big.bin: token 2 is 60000, not below --vocab-size 50257"), std::string::npos)
      << st.ToString();

  WriteLlmc(dir.path() + "/short.bin", {1, 2, 3}, 9);  // the header claims more tokens than the file holds
  st = ImportTokens({dir.path() + "/short.bin"}, dir.path() + "/o2", o);
  EXPECT_EQ(st.code(), Status::Code::kDataLoss);
  EXPECT_NE(st.message().find("llm.c header says 9 tokens"), std::string::npos) << st.ToString();

  std::ofstream(dir.path() + "/odd.bin", std::ios::binary) << "abc";
  st = ImportTokens({dir.path() + "/odd.bin"}, dir.path() + "/o3", o);
  EXPECT_EQ(st.code(), Status::Code::kDataLoss);

  o.format = "llmc";
  st = ImportTokens({dir.path() + "/big.bin"}, dir.path() + "/o4", o);  // raw data read as llm.c: no magic
  EXPECT_EQ(st.code(), Status::Code::kDataLoss);

  o.format = "auto";
  o.seq_len = 100;
  WriteRaw(dir.path() + "/few.bin", {1, 2, 3});
  EXPECT_EQ(ImportTokens({dir.path() + "/few.bin"}, dir.path() + "/o5", o).code(), Status::Code::kInvalidArgument);
  EXPECT_EQ(ImportTokens({dir.path() + "/none.bin"}, dir.path() + "/o6", o).code(), Status::Code::kNotFound);
}

// Was: --format auto read an llm.c shard whose magic was damaged as raw tokens (its header as 512 of them).
TEST(ImportTokens, AutoRefusesADamagedLlmcHeader) {
  TempDir dir;
  ImportTokensOptions o;
  o.seq_len = 2;
  std::vector<uint16_t> tokens(100, 7);
  const std::string flipped = dir.path() + "/flipped.bin";
  WriteLlmc(flipped, tokens, 100);
  {
    std::fstream f(flipped, std::ios::binary | std::ios::in | std::ios::out);
    f.seekp(1);
    f.put(static_cast<char>(0xd8 ^ 0x04));  // 20240520 = 0x0134d888: one bit of byte 1 (0xd8) flipped
  }
  Status st = ImportTokens({flipped}, dir.path() + "/o1", o);
  EXPECT_EQ(st.code(), Status::Code::kDataLoss) << st.ToString();
  EXPECT_NE(st.message().find("starts like an llm.c token shard whose header is damaged"), std::string::npos)
      << st.ToString();
  EXPECT_FALSE(std::filesystem::exists(dir.path() + "/o1/manifest.pb"));

  // The magic gone entirely, version and count intact (they fit the file's size).
  const std::string zeroed = dir.path() + "/zeroed.bin";
  WriteLlmc(zeroed, tokens, 100);
  {
    std::fstream f(zeroed, std::ios::binary | std::ios::in | std::ios::out);
    f.seekp(0);
    f.write("\0\0\0\0", 4);
  }
  EXPECT_EQ(ImportTokens({zeroed}, dir.path() + "/o2", o).code(), Status::Code::kDataLoss);
  o.format = "raw";  // the user's word: raw tokens
  EXPECT_TRUE(ImportTokens({zeroed}, dir.path() + "/o3", o).ok());
}

}  // namespace
}  // namespace dtrain::data
