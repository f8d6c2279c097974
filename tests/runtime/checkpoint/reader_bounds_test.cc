// Readers bound every size and offset they read from a file before using it (docs/faults.md,
// "Security"): crafted dataset manifests, shard headers and tables, safetensors headers and checkpoint
// manifests that claim more than the file holds are DataLoss naming the file — never an allocation of
// the claimed size, an out-of-bounds copy or a key outside the checkpoint directory.

#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "core/crc32c.h"
#include "core/sealed_bytes.h"
#include "data/manifest.h"
#include "data/shard_format.h"
#include "data/shard_reader.h"
#include "runtime/checkpoint/checkpoint.h"
#include "runtime/checkpoint/safetensors.h"
#include "tests/data/data_fixture.h"
#include "tests/testing/subprocess.h"

namespace dtrain::runtime {
namespace {

using testing::ReadFile;
using testing::TempDir;
using testing::WriteFile;

bool Has(const Status& st, const std::string& text) { return st.message().find(text) != std::string::npos; }

// ---- dataset manifest -----------------------------------------------------------------------

TEST(ReaderBounds, DatasetManifestShardSizesMustMatchTheirRecordCounts) {
  TempDir dir;
  data::fixture::WriteImageDataset(dir.path(), 20, 2, 2, 10);  // records of 4 + 2*2 = 8 bytes
  proto::DatasetManifest good;
  ASSERT_TRUE(data::ReadManifest(dir.path(), &good).ok());
  ASSERT_EQ(good.shards(0).bytes(), 32u + 10 * (16 + 8));  // the invariant the check relies on
  const std::string path = data::ManifestPath(dir.path());
  auto check = [&](const proto::DatasetManifest& m, const std::string& want) {
    ASSERT_TRUE(data::WriteManifest(dir.path(), m).ok());
    proto::DatasetManifest out;
    const Status st = data::ReadManifest(dir.path(), &out);
    EXPECT_EQ(st.code(), Status::Code::kDataLoss) << st.ToString();
    EXPECT_TRUE(Has(st, path + ": " + want)) << st.ToString();
  };
  proto::DatasetManifest m = good;
  m.mutable_shards(0)->set_num_samples(uint64_t{1} << 61);  // what a loader would size tables by
  m.set_total_samples(m.shards(0).num_samples() + 10);
  check(m, "shard 'shard-00000.dts': 2305843009213693952 records of 8 bytes cannot make the 272 bytes");
  m = good;
  m.mutable_shards(1)->set_bytes(uint64_t{1} << 62);  // what a remote cache would download
  check(m, "shard 'shard-00001.dts': 10 records of 8 bytes cannot make the 4611686018427387904 bytes");
  // Consistent shards whose counts add up past 2^64.
  m = good;
  m.clear_shards();
  const uint64_t n = uint64_t{1} << 57;
  for (int i = 0; i < 130; ++i) {
    proto::ShardEntry* s = m.add_shards();
    s->set_file("s" + std::to_string(i));
    s->set_num_samples(n);
    s->set_bytes(32 + n * 24);
  }
  check(m, "the shards' sample counts overflow 64 bits");
}

// ---- shard header and table -----------------------------------------------------------------

// Rewrites the header CRC of the shard in `bytes` (so a crafted table passes it and reaches the bounds check).
void FixHeaderCrc(std::string* bytes) {
  auto* h = reinterpret_cast<uint8_t*>(bytes->data());
  const uint64_t n = data::shard::Get64(h + 16);
  uint32_t crc = Crc32c(h, 12);
  crc = Crc32cExtend(crc, h + 16, data::shard::kHeaderBytes - 16 + n * data::shard::kEntryBytes);
  data::shard::Put32(h + 12, crc);
}

TEST(ReaderBounds, ShardCountsOffsetsAndLengthsAreBoundedByTheFileSize) {
  TempDir dir;
  data::fixture::WriteImageDataset(dir.path(), 4, 2, 2, 4);
  const std::string path = dir.path() + "/shard-00000.dts";
  const std::string good = ReadFile(path);
  ASSERT_EQ(good.size(), 32u + 4 * (16 + 8));
  std::unique_ptr<data::ShardReader> r;
  auto open = [&](std::string bytes) {
    WriteFile(path, bytes);
    return data::ShardReader::Open(path, &r);
  };
  // A record count far beyond the file: refused before the table is allocated.
  std::string b = good;
  data::shard::Put64(reinterpret_cast<uint8_t*>(b.data()) + 16, uint64_t{1} << 60);
  Status st = open(b);
  EXPECT_EQ(st.code(), Status::Code::kDataLoss);
  EXPECT_TRUE(Has(st, path + ": truncated or corrupt: header claims 1152921504606846976 records")) << st.ToString();
  // Table entries (with a valid header CRC) pointing past the end, wrapping around, or too long.
  const struct {
    uint64_t offset;
    uint32_t length;
  } entries[] = {{good.size(), 1}, {~uint64_t{0} - 3, 8}, {96, 0xffffffffu}, {0, 8}};
  for (const auto& e : entries) {
    b = good;
    auto* t = reinterpret_cast<uint8_t*>(b.data()) + 32 + 16;  // record 1
    data::shard::Put64(t, e.offset);
    data::shard::Put32(t + 8, e.length);
    FixHeaderCrc(&b);
    st = open(b);
    EXPECT_EQ(st.code(), Status::Code::kDataLoss) << e.offset;
    EXPECT_TRUE(Has(st, path + ": truncated or corrupt: record 1 at [")) << st.ToString();
  }
}

// ---- safetensors header ---------------------------------------------------------------------

std::string Safetensors(const std::string& header, size_t data_bytes) {
  std::string out(8, '\0');
  uint64_t len = header.size();
  std::memcpy(out.data(), &len, 8);
  return out + header + std::string(data_bytes, '\0');
}

TEST(ReaderBounds, SafetensorsOffsetsAndShapesAreBoundedByTheData) {
  TempDir dir;
  const std::string path = dir.path() + "/w.safetensors";
  const std::pair<std::string, std::string> bad[] = {
      // offsets past the 16 data bytes
      {R"({"w":{"dtype":"F32","shape":[8],"data_offsets":[0,32]}})", "offsets do not match"},
      // a shape of 2^40 x 2^40 elements (would overflow the element count)
      {R"({"w":{"dtype":"F32","shape":[1099511627776,1099511627776],"data_offsets":[0,16]}})", "malformed"},
      // offsets inverted
      {R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[16,8]}})", "offsets do not match"},
      // offsets whose span disagrees with the shape (would copy 16 bytes from an 8-byte span)
      {R"({"w":{"dtype":"F32","shape":[4],"data_offsets":[8,16]}})", "offsets do not match"},
      // a 19-digit offset (beyond int64, within uint64: read exactly, then found outside the data)
      {R"({"w":{"dtype":"F32","shape":[1],"data_offsets":[9999999999999999999,4]}})", "offsets do not match"},
      // a 20-digit offset (beyond uint64: not an integer offset at all)
      {R"({"w":{"dtype":"F32","shape":[1],"data_offsets":[99999999999999999999,4]}})", "malformed"},
      // a negative or fractional offset
      {R"({"w":{"dtype":"F32","shape":[1],"data_offsets":[-4,0]}})", "malformed"},
      {R"({"w":{"dtype":"F32","shape":[1],"data_offsets":[0.5,4]}})", "malformed"},
  };
  for (const auto& [header, why] : bad) {
    WriteFile(path, Safetensors(header, 16));
    std::vector<NamedTensor> out;
    const Status st = ReadSafetensors(path, &out);
    EXPECT_EQ(st.code(), Status::Code::kDataLoss) << header;
    EXPECT_TRUE(Has(st, path) && Has(st, why)) << header << " -> " << st.ToString();
  }
  WriteFile(path, Safetensors(R"({"w":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}})", 16));
  std::vector<NamedTensor> out;
  ASSERT_TRUE(ReadSafetensors(path, &out).ok());
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].data.size(), 4u);
}

// ---- checkpoint manifest --------------------------------------------------------------------

TEST(ReaderBounds, CheckpointManifestNamesAndParamSlicesStayInsideTheCheckpoint) {
  TempDir dir;
  std::unique_ptr<CheckpointManager> m;
  ASSERT_TRUE(CheckpointManager::Open(dir.path(), storage::StorageOptions{}, CheckpointOptions{}, &m).ok());
  const float params[4] = {1, 2, 3, 4};
  proto::CheckpointManifest base;
  base.set_step(10);
  proto::ParamSlice* p = base.add_params();
  p->set_name("w");
  p->add_shape(4);
  p->set_offset(0);
  p->set_numel(4);
  ASSERT_TRUE(m->Save(base, {{"params.bin", params, 16, 4}}).ok());
  std::string bytes;
  ASSERT_TRUE(m->store().Get("step-00000010/manifest.pb", &bytes).ok());
  proto::CheckpointManifest saved;
  ASSERT_TRUE(saved.ParseFromString(bytes.substr(kSealHeaderBytes)));  // sealed: core/sealed_bytes.h
  LoadedCheckpoint ck;
  const Status loaded = m->Load(10, &ck);
  ASSERT_TRUE(loaded.ok()) << loaded.ToString();
  auto load = [&](const proto::CheckpointManifest& crafted) {
    const std::string b = Seal(crafted.SerializeAsString());
    EXPECT_TRUE(m->store().Put("step-00000010/manifest.pb", b.data(), b.size()).ok());
    return m->Load(10, &ck);
  };
  const struct {
    int64_t offset, numel;
  } slices[] = {{2, 4}, {-1, 1}, {0, -4}, {INT64_MAX, INT64_MAX}, {INT64_MAX - 1, 2}};
  for (const auto& s : slices) {
    proto::CheckpointManifest c = saved;
    c.mutable_params(0)->set_offset(s.offset);
    c.mutable_params(0)->set_numel(s.numel);
    const Status st = load(c);
    EXPECT_EQ(st.code(), Status::Code::kDataLoss) << s.offset << " " << s.numel;
    EXPECT_TRUE(Has(st, "step-00000010/manifest.pb: parameter 'w' (offset " + std::to_string(s.offset)))
        << st.ToString();
    EXPECT_TRUE(Has(st, "lies outside params.bin (4 values)")) << st.ToString();
  }
  for (const char* name : {"../../etc/passwd", "..", "", "a/b"}) {
    proto::CheckpointManifest c = saved;
    c.mutable_files(0)->set_name(name);
    const Status st = load(c);
    EXPECT_EQ(st.code(), Status::Code::kDataLoss) << name;
    EXPECT_TRUE(Has(st, std::string("file name '") + name + "' is not a plain file name")) << st.ToString();
  }
  // A manifest that claims a huge file: the file is read at its real size and the mismatch reported.
  proto::CheckpointManifest c = saved;
  c.mutable_files(0)->set_size(uint64_t{1} << 60);
  const Status st = load(c);
  EXPECT_EQ(st.code(), Status::Code::kDataLoss);
  EXPECT_TRUE(Has(st, "step-00000010/params.bin: 16 bytes, the manifest says 1152921504606846976")) << st.ToString();
}

}  // namespace
}  // namespace dtrain::runtime
