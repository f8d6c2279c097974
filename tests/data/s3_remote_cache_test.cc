// Remote datasets (data/remote_cache.h) against a real S3 server (Ceph RGW on loopback): a dataset
// uploaded shard by shard is fetched with range GETs, verified, reused from the cache, re-fetched when
// a cached shard is damaged, refused when larger than the cache limit, and evicts older datasets.

#include "data/remote_cache.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "data/dataset.h"
#include "data/manifest.h"
#include "data/shard_writer.h"
#include "storage/s3_storage.h"
#include "tests/testing/s3_server.h"

namespace dtrain::data {
namespace {

namespace fs = std::filesystem;
using testing::S3Server;

const ::testing::Environment* const g_env =
    ::testing::AddGlobalTestEnvironment(new testing::S3ServerEnvironment);

storage::StorageOptions Opts() {
  storage::StorageOptions o;
  o.endpoint = S3Server().endpoint;
  o.access_key = S3Server().access;
  o.secret_key = S3Server().secret;
  o.region = "us-east-1";
  return o;
}

// A token dataset of `shards` shards x `per_shard` records of 65 uint16 tokens, written locally and
// uploaded below s3://dtrain-data/<name>.
void MakeRemoteDataset(const std::string& name, int shards, int per_shard, const std::string& local) {
  proto::DatasetSchema schema;
  schema.set_kind(proto::DatasetSchema::TOKENS);
  schema.add_dims(65);
  schema.set_token_dtype(proto::DatasetSchema::UINT16);
  schema.set_vocab_size(256);
  std::unique_ptr<DatasetWriter> w;
  ASSERT_TRUE(DatasetWriter::Create(local, schema, per_shard, &w).ok());
  std::vector<uint16_t> rec(65);
  for (int i = 0; i < shards * per_shard; ++i) {
    for (int t = 0; t < 65; ++t) rec[t] = static_cast<uint16_t>((i * 7 + t) % 256);
    ASSERT_TRUE(w->Add(rec.data(), rec.size() * 2).ok());
  }
  ASSERT_TRUE(w->Finish("test").ok());
  std::unique_ptr<storage::Storage> root, store;
  ASSERT_TRUE(storage::Storage::Open("s3://dtrain-data", Opts(), &root).ok());
  (void)static_cast<storage::S3Storage*>(root.get())->CreateBucket();  // exists after the first test
  ASSERT_TRUE(storage::Storage::Open("s3://dtrain-data/" + name, Opts(), &store).ok());
  for (const auto& e : fs::directory_iterator(local)) {
    std::ifstream in(e.path(), std::ios::binary);
    const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    ASSERT_TRUE(store->Put(e.path().filename().string(), bytes.data(), bytes.size()).ok());
  }
}

class RemoteCacheTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!S3Server().skip_reason.empty()) GTEST_SKIP() << S3Server().skip_reason;
    opts_.cache_dir = tmp_.path() + "/cache";
    opts_.storage = Opts();
    opts_.range_bytes = 1000;  // several range GETs per shard
    opts_.threads = 3;
  }
  testing::TempDir tmp_;
  RemoteCacheOptions opts_;
};

TEST_F(RemoteCacheTest, FetchesWithRangeGetsThenReusesTheCache) {
  MakeRemoteDataset("fetch", 3, 40, tmp_.path() + "/src");
  std::string dir;
  FetchStats s1;
  ASSERT_TRUE(FetchDataset("s3://dtrain-data/fetch", opts_, &dir, &s1).ok());
  EXPECT_EQ(s1.shards_downloaded, 3);
  EXPECT_EQ(s1.shards_reused, 0);
  // Each shard is 40 records x 130 bytes + header: at least 6 ranges of 1000 bytes.
  EXPECT_GE(s1.range_requests, 3 * 6);
  std::unique_ptr<Dataset> ds;
  ASSERT_TRUE(Dataset::Open(dir, /*verify_checksums=*/true, &ds).ok());
  ASSERT_EQ(ds->size(), 120);
  std::vector<uint16_t> rec(65);
  ASSERT_TRUE(ds->Read(77, rec.data()).ok());
  EXPECT_EQ(rec[0], (77 * 7) % 256);
  EXPECT_EQ(rec[64], (77 * 7 + 64) % 256);

  FetchStats s2;
  std::string dir2;
  ASSERT_TRUE(FetchDataset("s3://dtrain-data/fetch", opts_, &dir2, &s2).ok());
  EXPECT_EQ(dir2, dir);
  EXPECT_EQ(s2.shards_downloaded, 0);
  EXPECT_EQ(s2.shards_reused, 3);
  EXPECT_EQ(s2.range_requests, 0);
}

TEST_F(RemoteCacheTest, DamagedCachedShardIsFetchedAgain) {
  MakeRemoteDataset("damaged", 2, 30, tmp_.path() + "/src");
  std::string dir;
  ASSERT_TRUE(FetchDataset("s3://dtrain-data/damaged", opts_, &dir).ok());
  proto::DatasetManifest m;
  ASSERT_TRUE(ReadManifest(dir, &m).ok());
  const std::string shard = dir + "/" + m.shards(1).file();
  fs::resize_file(shard, 100);  // truncated, e.g. by a full disk
  FetchStats s;
  ASSERT_TRUE(FetchDataset("s3://dtrain-data/damaged", opts_, &dir, &s).ok());
  EXPECT_EQ(s.shards_downloaded, 1);
  EXPECT_EQ(s.shards_reused, 1);
  std::unique_ptr<Dataset> ds;
  EXPECT_TRUE(Dataset::Open(dir, /*verify_checksums=*/true, &ds).ok());
}

TEST_F(RemoteCacheTest, LimitRefusesTooBigAndEvictsLeastRecentlyUsed) {
  MakeRemoteDataset("a", 2, 40, tmp_.path() + "/a");
  MakeRemoteDataset("b", 2, 40, tmp_.path() + "/b");
  std::string da, db;
  opts_.limit_bytes = 1000;  // smaller than either dataset (~10.6 KB)
  Status st = FetchDataset("s3://dtrain-data/a", opts_, &da);
  EXPECT_EQ(st.code(), Status::Code::kFailedPrecondition);
  EXPECT_NE(st.message().find("data.cache_limit_mb"), std::string::npos) << st.message();
  opts_.limit_bytes = 15000;  // one dataset fits, not two
  ASSERT_TRUE(FetchDataset("s3://dtrain-data/a", opts_, &da).ok());
  FetchStats s;
  ASSERT_TRUE(FetchDataset("s3://dtrain-data/b", opts_, &db, &s).ok());
  EXPECT_EQ(s.shards_evicted, 1);  // dataset a's directory
  EXPECT_FALSE(fs::exists(da));
  EXPECT_TRUE(fs::exists(db + "/manifest.pb"));
}

TEST_F(RemoteCacheTest, MissingDatasetNamesTheUrl) {
  std::string dir;
  Status st = FetchDataset("s3://dtrain-data/nothing-here", opts_, &dir);
  EXPECT_EQ(st.code(), Status::Code::kNotFound);
  EXPECT_NE(st.message().find("s3://dtrain-data/nothing-here/manifest.pb"), std::string::npos) << st.message();
}

}  // namespace
}  // namespace dtrain::data
