// One job per file:// checkpoint root, through the real binary: two jobs with different run dirs and the same
// checkpoint.url used to both run (the second resumed from the first's in-flight checkpoint and both wrote the same
// step directories). Now, while another process holds the root, a job is refused (exit 2) naming the holder's pid
// before any step; once it is released, the job runs and its clean end leaves no lock file in the root.

#include <gtest/gtest.h>
#include <unistd.h>

#include <memory>
#include <string>

#include "runtime/checkpoint/store_owner.h"
#include "tests/testing/subprocess.h"

namespace dtrain::testing {
namespace {

const std::string kCiConfig = std::string(DT_SOURCE_DIR) + "/configs/fashion_mnist_mlp_ci.yaml";

TEST(CkptStoreOwnerE2E, ASecondJobOnOneFileRootIsRefusedNamingTheFirst) {
  DT_SKIP_WITHOUT_FASHION_MNIST();
  TempDir dir;
  const std::string root = dir.path() + "/shared-ckpt";
  const std::string url = "file://" + root;
  std::unique_ptr<storage::Storage> store;
  ASSERT_TRUE(storage::Storage::Open(url, {}, &store).ok());
  std::unique_ptr<runtime::StoreOwner> first_job;  // this process stands for the first job
  ASSERT_TRUE(runtime::StoreOwner::Acquire(store.get(), {}, &first_job).ok());

  const std::string train =
      DtrainBin() + " train " + kCiConfig + " --set train.device=cpu --set train.eval=false --set train.max_steps=3" +
      " --set schedule.warmup_steps=2 --set checkpoint.url=" + url + " --set run.dir=" + dir.path() + "/second-run";
  ProcessResult refused = RunCommand(train);
  EXPECT_EQ(refused.exit_code, 2) << refused.output;
  EXPECT_NE(refused.output.find("checkpoint.url " + url + " is in use by another dtrain job"), std::string::npos)
      << refused.output;
  EXPECT_NE(refused.output.find("pid=" + std::to_string(getpid())), std::string::npos) << refused.output;
  EXPECT_EQ(refused.output.find("step 1/"), std::string::npos) << refused.output;
  // A refused start writes nothing: its new run.dir (made for the run's lock) is gone again.
  EXPECT_NE(access((dir.path() + "/second-run").c_str(), F_OK), 0) << "a refused start left its run.dir";

  first_job.reset();
  ProcessResult ran = RunCommand(train);
  ASSERT_EQ(ran.exit_code, 0) << ran.output;
  EXPECT_NE(access((root + "/" + runtime::StoreOwner::kKey).c_str(), F_OK), 0);
}

}  // namespace
}  // namespace dtrain::testing
