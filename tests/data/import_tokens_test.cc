// ImportTokens: nanoGPT raw uint16 files and llm.c .bin shards (GPT-2's uint16 and Llama 3's uint32 headers) become
// TOKENS datasets, record by record; unknown headers, truncated shards and out-of-vocabulary tokens are refused.

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

// An llm.c shard as dev/data/data_common.py write_datafile writes it: 256 int32 (magic, version, count, zeros),
// then the tokens; `T` is the token type (uint16_t for GPT-2's header, uint32_t for Llama 3's).
template <typename T>
void WriteLlmcAs(const std::string& path, const std::vector<T>& tokens, int32_t magic, int32_t version,
                 int32_t count_in_header) {
  int32_t header[256] = {magic, version, count_in_header};
  std::ofstream out(path, std::ios::binary);
  out.write(reinterpret_cast<const char*>(header), sizeof(header));
  out.write(reinterpret_cast<const char*>(tokens.data()), tokens.size() * sizeof(T));
}

void WriteLlmc(const std::string& path, const std::vector<uint16_t>& tokens, int32_t count_in_header) {
  WriteLlmcAs<uint16_t>(path, tokens, 20240520, 1, count_in_header);
}

void WriteLlama3(const std::string& path, const std::vector<uint32_t>& tokens) {
  WriteLlmcAs<uint32_t>(path, tokens, 20240801, 7, static_cast<int32_t>(tokens.size()));
}

// Record r of a dataset of uint16 (T = uint16_t) or uint32 tokens.
template <typename T = uint16_t>
std::vector<T> Record(const Dataset& d, int64_t r, int64_t len) {
  std::vector<T> v(len);
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
  EXPECT_NE(st.message().find("big.bin: token 2 (byte offset 4) is 60000, not below --vocab-size 50257"),
            std::string::npos)
      << st.ToString();

  WriteLlmc(dir.path() + "/short.bin", {1, 2, 3}, 9);  // the header claims more tokens than the file holds
  st = ImportTokens({dir.path() + "/short.bin"}, dir.path() + "/o2", o);
  EXPECT_EQ(st.code(), Status::Code::kDataLoss);
  EXPECT_NE(st.message().find("llm.c header says 9 tokens of 2 bytes (1042 bytes in all) but the file has 1030 bytes"),
            std::string::npos)
      << st.ToString();

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

// llm.c's Llama 3 shards (magic 20240801, version 7) hold uint32 ids; they were taken for damaged GPT-2 headers, and
// --format raw then imported them as uint16 garbage. Here a Llama 3 and a GPT-2 shard make one stream, ids >= 2^16.
TEST(ImportTokens, Llama3ShardsAreReadAsUint32AndStoredWide) {
  TempDir dir;
  const std::vector<uint32_t> llama = {128000, 9906, 1917, 70000, 128255, 0, 65536, 12};
  WriteLlama3(dir.path() + "/llama.bin", llama);
  WriteLlmc(dir.path() + "/gpt2.bin", {50256, 1, 2, 3}, 4);
  ImportTokensOptions o;
  o.seq_len = 3;  // records of 4 tokens, stride 3
  o.vocab_size = 128256;
  int64_t dropped = -1;
  proto::DatasetManifest m;
  const Status st =
      ImportTokens({dir.path() + "/llama.bin", dir.path() + "/gpt2.bin"}, dir.path() + "/ds", o, &dropped, &m);
  ASSERT_TRUE(st.ok()) << st.ToString();
  // 12 tokens: records at 0, 3, 6 (ends at 9); tokens 10 and 11 are the tail.
  EXPECT_EQ(m.total_samples(), 3u);
  EXPECT_EQ(dropped, 2);
  EXPECT_EQ(m.schema().token_dtype(), proto::DatasetSchema::UINT32);
  EXPECT_EQ(m.schema().vocab_size(), 128256);
  std::unique_ptr<Dataset> d;
  ASSERT_TRUE(Dataset::Open(dir.path() + "/ds", /*verify_checksums=*/true, &d).ok());
  EXPECT_EQ(Record<uint32_t>(*d, 0, 4), (std::vector<uint32_t>{128000, 9906, 1917, 70000}));
  EXPECT_EQ(Record<uint32_t>(*d, 1, 4), (std::vector<uint32_t>{70000, 128255, 0, 65536}));
  EXPECT_EQ(Record<uint32_t>(*d, 2, 4), (std::vector<uint32_t>{65536, 12, 50256, 1}));  // across the two files

  // A Llama 3 shard whose ids all fit GPT-2's vocabulary still imports into uint16 records, values intact.
  WriteLlama3(dir.path() + "/small.bin", {7, 50000, 3, 4});
  o.vocab_size = 50257;
  ASSERT_TRUE(ImportTokens({dir.path() + "/small.bin"}, dir.path() + "/ds16", o, nullptr, &m).ok());
  EXPECT_EQ(m.schema().token_dtype(), proto::DatasetSchema::UINT16);
  ASSERT_TRUE(Dataset::Open(dir.path() + "/ds16", true, &d).ok());
  EXPECT_EQ(Record(*d, 0, 4), (std::vector<uint16_t>{7, 50000, 3, 4}));
}

TEST(ImportTokens, ALlama3TokenOutsideTheVocabularyIsNamedByOffsetAndValue) {
  TempDir dir;
  ImportTokensOptions o;
  o.seq_len = 2;
  o.vocab_size = 128256;
  WriteLlama3(dir.path() + "/l3.bin", {1, 2, 128255, 128256, 5});
  Status st = ImportTokens({dir.path() + "/l3.bin"}, dir.path() + "/o1", o);
  EXPECT_EQ(st.code(), Status::Code::kInvalidArgument);
  // Token 3 lies after the 1024-byte header and three 4-byte tokens.
  EXPECT_NE(st.message().find("l3.bin: token 3 (byte offset 1036) is 128256, not below --vocab-size 128256"),
            std::string::npos)
      << st.ToString();
  EXPECT_FALSE(std::filesystem::exists(dir.path() + "/o1/manifest.pb"));

  // GPT-2's default vocabulary on a Llama 3 shard: the message says which --vocab-size the shard wants.
  o.vocab_size = 50257;
  st = ImportTokens({dir.path() + "/l3.bin"}, dir.path() + "/o2", o);
  EXPECT_EQ(st.code(), Status::Code::kInvalidArgument);
  EXPECT_NE(st.message().find("token 2 (byte offset 1032) is 128255, not below --vocab-size 50257"), std::string::npos)
      << st.ToString();
  EXPECT_NE(st.message().find("--vocab-size 128256)"), std::string::npos) << st.ToString();
}

TEST(ImportTokens, AnUnknownLlmcHeaderIsRefusedNamingWhatItFoundAndWhatItKnows) {
  TempDir dir;
  ImportTokensOptions o;
  o.seq_len = 2;
  const std::string known =
      "known: magic 20240520 version 1 (GPT-2, uint16 tokens) and magic 20240801 version 7 (Llama 3, uint32 tokens)";
  const struct {
    int32_t magic, version;
    const char* format;
  } cases[] = {
      {20240801, 1, "auto"},  // Llama 3's magic, GPT-2's version
      {20240520, 2, "auto"},  // never written by llm.c (this import once read it as uint32)
      {20240520, 7, "auto"}, {20240801, 8, "llmc"},
      {12345678, 1, "llmc"},  // --format llmc on a file with no llm.c magic at all
  };
  for (const auto& c : cases) {
    const std::string path = dir.path() + "/v" + std::to_string(c.magic) + "_" + std::to_string(c.version) + ".bin";
    WriteLlmcAs<uint32_t>(path, {1, 2, 3, 4}, c.magic, c.version, 4);
    o.format = c.format;
    const Status st = ImportTokens({path}, dir.path() + "/out", o);
    EXPECT_EQ(st.code(), Status::Code::kInvalidArgument) << st.ToString();
    const std::string found =
        "magic " + std::to_string(c.magic) + ", version " + std::to_string(c.version) + ", 4 tokens";
    EXPECT_NE(st.message().find(path + ": not an llm.c token shard this import knows: its header has " + found),
              std::string::npos)
        << st.ToString();
    EXPECT_NE(st.message().find(known), std::string::npos) << st.ToString();
    EXPECT_FALSE(std::filesystem::exists(dir.path() + "/out/manifest.pb"));
  }
}

TEST(ImportTokens, ATruncatedLlmcShardIsRefused) {
  TempDir dir;
  ImportTokensOptions o;
  o.seq_len = 2;
  o.vocab_size = 128256;
  const std::string path = dir.path() + "/cut.bin";
  WriteLlama3(path, {1, 2, 3, 4, 5, 6});
  std::filesystem::resize_file(path, 1024 + 5 * 4 + 2);  // cut inside the last token
  Status st = ImportTokens({path}, dir.path() + "/o1", o);
  EXPECT_EQ(st.code(), Status::Code::kDataLoss) << st.ToString();
  EXPECT_NE(st.message().find("cut.bin: llm.c header says 6 tokens of 4 bytes (1048 bytes in all) but the file has "
                              "1046 bytes"),
            std::string::npos)
      << st.ToString();
  std::filesystem::resize_file(path, 1024 + 4 * 4);  // whole tokens, but fewer than the header counts
  EXPECT_EQ(ImportTokens({path}, dir.path() + "/o2", o).code(), Status::Code::kDataLoss);
  std::filesystem::resize_file(path, 600);  // cut inside the header: not raw tokens either
  st = ImportTokens({path}, dir.path() + "/o3", o);
  EXPECT_EQ(st.code(), Status::Code::kDataLoss) << st.ToString();
  EXPECT_NE(st.message().find("cut.bin: llm.c token shard cut short: 600 bytes, less than its 1024-byte header"),
            std::string::npos)
      << st.ToString();
  EXPECT_FALSE(std::filesystem::exists(dir.path() + "/o3/manifest.pb"));
}

// The command's side: a header it does not know is a usage error (exit 2) that names the file and the values.
TEST(ImportTokens, TheCommandExitsTwoOnAnUnknownHeader) {
  TempDir dir;
  const std::string path = dir.path() + "/v3.bin";
  WriteLlmcAs<uint32_t>(path, {1, 2, 3, 4}, 20240801, 3, 4);
  const auto r =
      testing::RunCommand(testing::DtrainBin() + " data import-tokens --seq-len 2 --out " + dir.path() + "/ds " + path);
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find(path + ": not an llm.c token shard this import knows: its header has magic 20240801, "
                                 "version 3, 4 tokens"),
            std::string::npos)
      << r.output;
}

}  // namespace
}  // namespace dtrain::data
