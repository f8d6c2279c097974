#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "data/dataset.h"
#include "data/manifest.h"
#include "data/shard_reader.h"
#include "data/shard_writer.h"
#include "tests/data/data_fixture.h"
#include "tests/data/idx_fixture.h"

namespace dtrain::data {
namespace {

using fixture::FlipByte;
using fixture::TempDir;
using fixture::WriteImageDataset;

bool Contains(const Status& st, const std::string& s) { return st.message().find(s) != std::string::npos; }

TEST(ShardTest, WriterReaderRoundTripWithVariableRecords) {
  TempDir dir;
  const std::string path = dir.File("a.dts");
  ShardWriter w(path);
  std::vector<std::string> recs = {"", "x", std::string(1000, 'q'), "hello shard"};
  for (const auto& r : recs) ASSERT_TRUE(w.Add(r.data(), r.size()).ok());
  proto::ShardEntry e;
  ASSERT_TRUE(w.Finish(&e).ok());
  EXPECT_EQ(e.file(), "a.dts");
  EXPECT_EQ(e.num_samples(), 4u);
  EXPECT_EQ(e.bytes(), 32u + 16u * 4 + 1 + 1000 + 11);  // header + table + payload
  uint32_t crc;
  uint64_t bytes;
  ASSERT_TRUE(FileCrc32c(path, &crc, &bytes).ok());
  EXPECT_EQ(crc, e.crc32c());
  EXPECT_EQ(bytes, e.bytes());

  std::unique_ptr<ShardReader> r;
  ASSERT_TRUE(ShardReader::Open(path, &r).ok());
  ASSERT_EQ(r->num_records(), 4);
  for (int i = 3; i >= 0; --i) {  // random access, any order
    std::vector<uint8_t> got;
    ASSERT_TRUE(r->Read(i, &got).ok());
    EXPECT_EQ(std::string(got.begin(), got.end()), recs[i]);
  }
  std::vector<uint8_t> got;
  EXPECT_EQ(r->Read(4, &got).code(), Status::Code::kInvalidArgument);
}

TEST(ShardTest, DatasetRollsShardsAndReadsByGlobalIndex) {
  TempDir dir;
  WriteImageDataset(dir.path(), 23, 3, 4, /*per_shard=*/10);
  std::unique_ptr<Dataset> ds;
  ASSERT_TRUE(Dataset::Open(dir.path(), /*verify_checksums=*/true, &ds).ok());
  EXPECT_EQ(ds->size(), 23);
  ASSERT_EQ(ds->manifest().shards_size(), 3);
  EXPECT_EQ(ds->manifest().shards(2).num_samples(), 3u);
  EXPECT_EQ(ds->record_bytes(), 4u + 12u);
  std::vector<uint8_t> rec(ds->record_bytes());
  for (int64_t i : {0, 9, 10, 19, 20, 22}) {
    ASSERT_TRUE(ds->Read(i, rec.data()).ok());
    EXPECT_EQ(rec[0], i % 10) << i;
    EXPECT_EQ(rec[4 + 5], (i + 5) % 251) << i;
  }
  EXPECT_NE(ds->Describe().find("samples 23"), std::string::npos);
}

TEST(ShardTest, MissingShardIsNotFoundNamingTheFile) {
  TempDir dir;
  WriteImageDataset(dir.path(), 20, 2, 2, 10);
  std::filesystem::remove(dir.File("shard-00001.dts"));
  std::unique_ptr<Dataset> ds;
  const Status st = Dataset::Open(dir.path(), false, &ds);
  EXPECT_EQ(st.code(), Status::Code::kNotFound) << st.ToString();
  EXPECT_TRUE(Contains(st, dir.File("shard-00001.dts"))) << st.ToString();
}

TEST(ShardTest, TruncatedShardIsDataLossNamingTheFile) {
  TempDir dir;
  WriteImageDataset(dir.path(), 20, 2, 2, 10);
  const std::string path = dir.File("shard-00000.dts");
  std::filesystem::resize_file(path, std::filesystem::file_size(path) - 3);
  std::unique_ptr<Dataset> ds;
  Status st = Dataset::Open(dir.path(), false, &ds);
  EXPECT_EQ(st.code(), Status::Code::kDataLoss) << st.ToString();
  EXPECT_TRUE(Contains(st, path) && Contains(st, "truncated")) << st.ToString();
  std::filesystem::resize_file(path, 20);  // shorter than the header
  std::unique_ptr<ShardReader> r;
  st = ShardReader::Open(path, &r);
  EXPECT_EQ(st.code(), Status::Code::kDataLoss);
  EXPECT_TRUE(Contains(st, path) && Contains(st, "truncated")) << st.ToString();
}

TEST(ShardTest, FlippedByteFailsRecordCrcAndVerifyNamingTheFile) {
  TempDir dir;
  WriteImageDataset(dir.path(), 20, 2, 2, 10);
  const std::string path = dir.File("shard-00001.dts");
  FlipByte(path, 32 + 16 * 10 + 8 * 3 + 5);  // a pixel of record 3 (records of 8 bytes)
  std::unique_ptr<Dataset> ds;
  ASSERT_TRUE(Dataset::Open(dir.path(), false, &ds).ok());  // sizes still match
  std::vector<uint8_t> rec(ds->record_bytes());
  EXPECT_TRUE(ds->Read(12, rec.data()).ok());  // record 2 of shard 1 is intact
  Status st = ds->Read(13, rec.data());
  EXPECT_EQ(st.code(), Status::Code::kDataLoss);
  EXPECT_TRUE(Contains(st, path) && Contains(st, "checksum mismatch in record 3")) << st.ToString();
  std::vector<std::string> report;
  st = ds->Verify(&report);
  EXPECT_EQ(st.code(), Status::Code::kDataLoss);
  EXPECT_TRUE(Contains(st, path) && Contains(st, "checksum mismatch")) << st.ToString();
  ASSERT_EQ(report.size(), 2u);
  EXPECT_NE(report[0].find(": ok"), std::string::npos);
  EXPECT_EQ(Dataset::Open(dir.path(), /*verify_checksums=*/true, &ds).code(), Status::Code::kDataLoss);
}

TEST(ShardTest, CorruptHeaderWrongMagicAndNewerVersionNameTheFile) {
  TempDir dir;
  WriteImageDataset(dir.path(), 10, 2, 2, 10);
  const std::string path = dir.File("shard-00000.dts");
  std::unique_ptr<ShardReader> r;
  FlipByte(path, 40);  // inside the offset table: the header CRC catches it
  Status st = ShardReader::Open(path, &r);
  EXPECT_TRUE(st.code() == Status::Code::kDataLoss && Contains(st, path) && Contains(st, "header checksum"))
      << st.ToString();
  FlipByte(path, 40);
  ASSERT_TRUE(ShardReader::Open(path, &r).ok());
  FlipByte(path, 8);  // version 1 -> 0x41: newer than this build
  st = ShardReader::Open(path, &r);
  EXPECT_TRUE(st.code() == Status::Code::kDataLoss && Contains(st, path) && Contains(st, "version 65"))
      << st.ToString();
  FlipByte(path, 8);
  FlipByte(path, 0);  // "DTSHARD1" -> "\x04TSHARD1"
  st = ShardReader::Open(path, &r);
  EXPECT_TRUE(st.code() == Status::Code::kDataLoss && Contains(st, path) && Contains(st, "magic")) << st.ToString();
}

TEST(ShardTest, ManifestOfAnotherFormatOrNewerVersionIsRejected) {
  TempDir dir;
  WriteImageDataset(dir.path(), 10, 2, 2, 10);
  proto::DatasetManifest m;
  ASSERT_TRUE(ReadManifest(dir.path(), &m).ok());
  std::unique_ptr<Dataset> ds;
  m.set_format_version(kManifestVersion + 1);
  ASSERT_TRUE(WriteManifest(dir.path(), m).ok());
  Status st = Dataset::Open(dir.path(), false, &ds);
  EXPECT_TRUE(st.code() == Status::Code::kDataLoss && Contains(st, ManifestPath(dir.path())) &&
              Contains(st, "version 2"))
      << st.ToString();
  m.set_format_version(kManifestVersion);
  m.set_magic("something.else");
  ASSERT_TRUE(WriteManifest(dir.path(), m).ok());
  st = Dataset::Open(dir.path(), false, &ds);
  EXPECT_TRUE(st.code() == Status::Code::kDataLoss && Contains(st, "magic")) << st.ToString();
  fixture::WriteFile(ManifestPath(dir.path()), {0xFF, 0xFF, 0xFF, 0x01});  // not a protobuf
  st = Dataset::Open(dir.path(), false, &ds);
  EXPECT_TRUE(st.code() == Status::Code::kDataLoss && Contains(st, ManifestPath(dir.path()))) << st.ToString();
  st = Dataset::Open(dir.File("nope"), false, &ds);
  EXPECT_EQ(st.code(), Status::Code::kNotFound);
}

// Regression (fuzz/dataset_fuzzer): a manifest whose normalization is NaN or infinite is refused, naming it.
TEST(ShardTest, ManifestWithNonFiniteNormalizationIsRejected) {
  TempDir dir;
  WriteImageDataset(dir.path(), 10, 2, 2, 10);
  proto::DatasetManifest m;
  ASSERT_TRUE(ReadManifest(dir.path(), &m).ok());
  std::unique_ptr<Dataset> ds;
  for (float mean : {std::nanf(""), 0.5f}) {
    for (float stdev : {0.25f, std::numeric_limits<float>::infinity()}) {
      if (std::isfinite(mean) && std::isfinite(stdev)) continue;
      m.mutable_schema()->set_pixel_mean(mean);
      m.mutable_schema()->set_pixel_std(stdev);
      ASSERT_TRUE(WriteManifest(dir.path(), m).ok());
      const Status st = Dataset::Open(dir.path(), false, &ds);
      EXPECT_TRUE(st.code() == Status::Code::kDataLoss && Contains(st, ManifestPath(dir.path())) &&
                  Contains(st, "pixel_mean and pixel_std must be finite"))
          << st.ToString();
    }
  }
}

// Was: `data verify` passed a token dataset holding tokens beyond its vocabulary (sizes and CRCs match what was
// written). Verify with check_tokens names the shard, record, token and vocab_size.
TEST(ShardTest, VerifyFindsTokensBeyondTheVocabulary) {
  TempDir dir;
  proto::DatasetSchema schema;
  schema.set_kind(proto::DatasetSchema::TOKENS);
  schema.add_dims(4);
  schema.set_token_dtype(proto::DatasetSchema::UINT16);
  schema.set_vocab_size(100);
  std::unique_ptr<DatasetWriter> w;
  ASSERT_TRUE(DatasetWriter::Create(dir.path(), schema, 2, &w).ok());
  const uint16_t records[3][4] = {{1, 2, 3, 4}, {5, 6, 7, 8}, {9, 10, 300, 11}};  // 300 >= vocab 100
  for (const auto& r : records) ASSERT_TRUE(w->Add(r, sizeof(r)).ok());
  ASSERT_TRUE(w->Finish("test").ok());
  std::unique_ptr<Dataset> ds;
  ASSERT_TRUE(Dataset::Open(dir.path(), /*verify_checksums=*/true, &ds).ok());  // sizes and CRCs are right
  std::vector<std::string> report;
  const Status st = ds->Verify(&report, /*check_tokens=*/true);
  EXPECT_EQ(st.code(), Status::Code::kDataLoss);
  EXPECT_TRUE(Contains(st,
                       "shard-00001.dts: record 0 holds token 300 at position 2, not below the manifest's "
                       "vocab_size 100"))
      << st.ToString();
  ASSERT_EQ(report.size(), 2u);
  EXPECT_NE(report[0].find(": ok"), std::string::npos) << report[0];
}

}  // namespace
}  // namespace dtrain::data
