// One job per s3:// checkpoint root, through the real binary against a real Ceph RGW on loopback: a root whose
// owner object has a fresh heartbeat refuses a second job (exit 2, naming the holder) before any step; a stale
// one is taken over with a warning, as is a fresh one of this host whose pid is gone, and the job's clean end leaves
// no owner object behind.

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <memory>
#include <string>

#include "runtime/checkpoint/store_owner.h"
#include "tests/testing/s3_server.h"
#include "tests/testing/subprocess.h"

namespace dtrain::testing {
namespace {

const std::string kData = ::dtrain::testing::kFashionMnistDir;
const std::string kCiConfig = std::string(DT_SOURCE_DIR) + "/configs/fashion_mnist_mlp_ci.yaml";
const std::string kBucket = "dtrain-ckpt";

const ::testing::Environment* const g_env =
    ::testing::AddGlobalTestEnvironment(new S3ServerEnvironment);  // RGW, once for this binary

TEST(S3OwnerE2E, ALiveOwnerRefusesTheJobAndAStaleOneIsTakenOver) {
  DT_SKIP_WITHOUT_FASHION_MNIST();
  DT_REQUIRE_S3_SERVER();
  const storage::StorageOptions o = S3TestOptions();
  ASSERT_TRUE(CreateS3TestBucket(kBucket).ok());

  TempDir dir;
  const std::string url = "s3://" + kBucket + "/owner-" + dir.path().substr(dir.path().rfind('/') + 1);
  std::unique_ptr<storage::Storage> store;
  ASSERT_TRUE(storage::Storage::Open(url, o, &store).ok());
  const auto plant = [&](double age_s) {
    const double now = std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
    const std::string text =
        "token=other\nhost=otherhost\npid=4242\nstarted=1\nheartbeat=" + std::to_string(now - age_s) + "\n";
    ASSERT_TRUE(store->Put(runtime::StoreOwner::kKey, text.data(), text.size()).ok());
  };
  const std::string train =
      "env -u AWS_ENDPOINT_URL -u AWS_ENDPOINT_URL_S3 -u AWS_SESSION_TOKEN AWS_ACCESS_KEY_ID=" + S3Server().access +
      " AWS_SECRET_ACCESS_KEY=" + S3Server().secret + " " + DtrainBin() + " train " + kCiConfig +
      " --set train.device=cpu --set train.eval=false --set train.max_steps=3 --set schedule.warmup_steps=2" +
      " --set checkpoint.url=" + url + " --set storage.endpoint=" + S3Server().endpoint +
      " --set run.dir=" + dir.path() + "/run";

  plant(5);  // another job, alive 5 s ago
  ProcessResult live = RunCommand(train);
  EXPECT_EQ(live.exit_code, 2) << live.output;
  EXPECT_NE(live.output.find("is in use by another job: host otherhost pid 4242"), std::string::npos) << live.output;
  EXPECT_EQ(live.output.find("step 1/"), std::string::npos) << live.output;

  // A job of this host that died (an S3 outage) a moment ago: its pid is gone, so its fresh owner is taken over at
  // once (the rerun used to be refused for ttl_s as "in use").
  {
    const pid_t dead = fork();
    if (dead == 0) _exit(0);
    int status = 0;
    waitpid(dead, &status, 0);
    char host[256] = {};
    gethostname(host, sizeof(host) - 1);
    const double now = std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
    const std::string text = "token=crashed\nhost=" + std::string(host) + "\npid=" + std::to_string(dead) +
                             "\nstarted=1\nheartbeat=" + std::to_string(now - 2) + "\n";
    ASSERT_TRUE(store->Put(runtime::StoreOwner::kKey, text.data(), text.size()).ok());
    ProcessResult rerun = RunCommand(train);
    ASSERT_EQ(rerun.exit_code, 0) << rerun.output;
    EXPECT_NE(rerun.output.find("(that pid no longer exists on this host)"), std::string::npos) << rerun.output;
  }

  plant(1000);  // a job that died long ago
  ProcessResult stale = RunCommand(train);
  ASSERT_EQ(stale.exit_code, 0) << stale.output;
  EXPECT_NE(stale.output.find("took over " + url + "/.dtrain-owner from a job that stopped: host otherhost"),
            std::string::npos)
      << stale.output;
  std::string text;
  EXPECT_EQ(store->Get(runtime::StoreOwner::kKey, &text).code(), Status::Code::kNotFound) << text;
}

}  // namespace
}  // namespace dtrain::testing
