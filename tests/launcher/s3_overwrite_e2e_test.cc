// `resume: never` over checkpoints on S3, through the real binary against a real Ceph RGW on loopback
// (scripts/s3_test_server.sh; skipped with the reason when ceph is not installed): refused naming the
// newest; with checkpoint.overwrite the old step directories are deleted before the first step (an
// object store has no rename), and the new run's save is the only one left, named by `latest`.

#include <gtest/gtest.h>

#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "tests/testing/s3_server.h"
#include "tests/testing/subprocess.h"

namespace dtrain::testing {
namespace {

const std::string kData = ::dtrain::testing::kFashionMnistDir;
const std::string kCiConfig = std::string(DT_SOURCE_DIR) + "/configs/fashion_mnist_mlp_ci.yaml";
const std::string kBucket = "dtrain-ckpt";
const std::string kArgs =
    " --set train.device=cpu --set train.eval=false --set train.log_every=1 --set schedule.warmup_steps=2"
    " --set checkpoint.every_steps=3";

const ::testing::Environment* const g_env =
    ::testing::AddGlobalTestEnvironment(new S3ServerEnvironment);  // RGW, once for this binary

TEST(S3OverwriteE2E, ResumeNeverIsRefusedAndOverwriteDeletesTheOldCheckpointsFirst) {
  DT_SKIP_WITHOUT_FASHION_MNIST();
  DT_REQUIRE_S3_SERVER();
  const storage::StorageOptions o = S3TestOptions();
  ASSERT_TRUE(CreateS3TestBucket(kBucket).ok());

  TempDir dir;
  const std::string prefix = "overwrite-" + dir.path().substr(dir.path().rfind('/') + 1);
  const std::string url = "s3://" + kBucket + "/" + prefix;
  const std::string env =
      "env -u AWS_ENDPOINT_URL -u AWS_ENDPOINT_URL_S3 -u AWS_SESSION_TOKEN AWS_ACCESS_KEY_ID=" + S3Server().access +
      " AWS_SECRET_ACCESS_KEY=" + S3Server().secret + " ";
  const std::string train = env + DtrainBin() + " train " + kCiConfig + kArgs + " --set checkpoint.url=" + url +
                            " --set storage.endpoint=" + S3Server().endpoint + " --set run.dir=" + dir.path() + "/run";
  ProcessResult first = RunCommand(train + " --set train.max_steps=6");
  ASSERT_EQ(first.exit_code, 0) << first.output;

  ProcessResult never = RunCommand(train + " --resume never --set train.max_steps=3");
  EXPECT_EQ(never.exit_code, 2) << never.output;
  EXPECT_NE(never.output.find("checkpoint.resume=never, but " + url + " holds checkpoints (newest step-00000006)"),
            std::string::npos)
      << never.output;

  ProcessResult over = RunCommand(train + " --resume never --set checkpoint.overwrite=true --set train.max_steps=3");
  ASSERT_EQ(over.exit_code, 0) << over.output;
  EXPECT_NE(over.output.find("checkpoint.overwrite: deleted the 2 old step directories of " + url), std::string::npos)
      << over.output;
  std::unique_ptr<storage::Storage> store;
  ASSERT_TRUE(storage::Storage::Open(url, o, &store).ok());
  std::vector<storage::ObjectInfo> objects;
  ASSERT_TRUE(store->List("step-00000006/", &objects).ok());
  EXPECT_TRUE(objects.empty()) << objects.size() << " objects of the old step 6 left";
  std::string latest;
  ASSERT_TRUE(store->Get("latest", &latest).ok());
  EXPECT_EQ(latest, "step-00000003\n");
}

}  // namespace
}  // namespace dtrain::testing
