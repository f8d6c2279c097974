// CheckpointManager on s3:// against a real Ceph RGW (tests/testing/s3_server.h): a save whose multipart
// upload fails leaves no visible checkpoint, and a checkpoint of multi-part files restores byte-exact
// through parallel ranged GETs, with a size mismatch still caught.

#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "runtime/checkpoint/checkpoint.h"
#include "storage/s3_storage.h"
#include "tests/testing/s3_server.h"

namespace dtrain::runtime {
namespace {

using testing::CreateS3TestBucket;
using testing::S3TestOptions;
using testing::S3TestPattern;

const ::testing::Environment* const g_env =
    ::testing::AddGlobalTestEnvironment(new testing::S3ServerEnvironment);  // RGW, once for this binary

class S3CheckpointTest : public ::testing::Test {
 protected:
  void SetUp() override {
    DT_REQUIRE_S3_SERVER();
    ASSERT_TRUE(CreateS3TestBucket("dtrain-ckpt").ok());
    storage::StorageOptions opts = S3TestOptions(/*max_retries=*/1);
    opts.multipart_threshold = opts.part_size = 5u << 20;  // 5 MiB parts and ranges, 4 at a time
    opts.parallel_parts = 4;
    const std::string name = ::testing::UnitTest::GetInstance()->current_test_info()->name();
    std::unique_ptr<storage::Storage> store;
    ASSERT_TRUE(storage::Storage::Open("s3://dtrain-ckpt/" + name, opts, &store).ok());
    s3_ = static_cast<storage::S3Storage*>(store.get());
    mgr_ = std::make_unique<CheckpointManager>(std::move(store), CheckpointOptions());
    mgr_->set_run_id("run-a");
  }

  Status Save(int64_t step, const std::vector<std::pair<std::string, std::string>>& files) {
    proto::CheckpointManifest m;
    m.set_step(step);
    std::vector<CheckpointBlob> blobs;
    for (const auto& [name, bytes] : files) {
      blobs.push_back({name, bytes.data(), bytes.size(), static_cast<int64_t>(bytes.size() / 4)});
    }
    return mgr_->Save(m, blobs);
  }

  storage::S3Storage* s3_ = nullptr;  // owned by mgr_
  std::unique_ptr<CheckpointManager> mgr_;
};

TEST_F(S3CheckpointTest, FailedMultipartUploadLeavesNoVisibleCheckpoint) {
  ASSERT_TRUE(Save(1, {{"params.bin", S3TestPattern(4096, 1)}}).ok());
  s3_->set_failing_part_for_testing(2);
  const Status st =
      Save(2, {{"params.bin", S3TestPattern(4096, 2)}, {"exp_avg.bin", S3TestPattern((12u << 20) + 8, 3)}});
  ASSERT_EQ(st.code(), Status::Code::kIoError) << st.ToString();
  EXPECT_NE(st.message().find("step-00000002/exp_avg.bin (part 2/3)"), std::string::npos) << st.message();
  // No upload left behind, no exp_avg.bin object, no manifest: step 2 does not exist for any reader.
  std::vector<std::string> uploads;
  ASSERT_TRUE(s3_->ListMultipartUploads("", &uploads).ok());
  EXPECT_TRUE(uploads.empty()) << uploads.size() << " uploads left";
  std::string got;
  EXPECT_EQ(mgr_->store().Get("step-00000002/exp_avg.bin", &got).code(), Status::Code::kNotFound);
  std::vector<CheckpointEntry> entries;
  ASSERT_TRUE(mgr_->List(&entries).ok());
  for (const CheckpointEntry& e : entries) EXPECT_TRUE(e.step == 1 || !e.has_manifest) << e.dir;
  LoadedCheckpoint loaded;
  ASSERT_TRUE(mgr_->LoadLatest(&loaded).ok());
  EXPECT_EQ(loaded.manifest.step(), 1);
  ASSERT_TRUE(mgr_->store().Get("latest", &got).ok());
  EXPECT_EQ(got, "step-00000001\n");
}

TEST_F(S3CheckpointTest, MultipartFilesRestoreByteExactThroughRangedGets) {
  const std::vector<std::pair<std::string, std::string>> files = {{"params.bin", S3TestPattern((17u << 20) + 12, 4)},
                                                                  {"exp_avg.bin", S3TestPattern((11u << 20) + 4, 5)},
                                                                  {"exp_avg_sq.bin", S3TestPattern(4000, 6)}};
  ASSERT_TRUE(Save(7, files).ok());
  LoadedCheckpoint loaded;
  const Status st = mgr_->Load(7, &loaded);
  ASSERT_TRUE(st.ok()) << st.ToString();
  ASSERT_EQ(loaded.files.size(), files.size());
  for (const auto& [name, bytes] : files) {
    ASSERT_EQ(loaded.files[name].size(), bytes.size()) << name;
    EXPECT_TRUE(loaded.files[name] == bytes) << name;
  }
  // A file replaced by one of another size: the ranged reads see the object's real size, Load names both.
  const std::string shorter = S3TestPattern(6u << 20, 9);
  ASSERT_TRUE(mgr_->store().Put("step-00000007/exp_avg.bin", shorter.data(), shorter.size()).ok());
  const Status bad = mgr_->Load(7, &loaded);
  EXPECT_EQ(bad.code(), Status::Code::kDataLoss) << bad.ToString();
  EXPECT_NE(bad.message().find("step-00000007/exp_avg.bin: 6291456 bytes, the manifest says 11534340"),
            std::string::npos)
      << bad.message();
  EXPECT_TRUE(loaded.files.empty());
}

}  // namespace
}  // namespace dtrain::runtime
