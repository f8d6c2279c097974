// End-to-end tests of checkpoints on S3 through the real binary (CPU, Fashion-MNIST CI config) against
// a real Ceph RGW on loopback, started once for this binary by scripts/s3_test_server.sh (skipped, with
// the reason, when the ceph packages are not installed). Credentials reach the child only through
// AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY, as in production.

#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "storage/s3_storage.h"
#include "tests/testing/s3_server.h"
#include "tests/testing/safetensors_diff.h"
#include "tests/testing/subprocess.h"

namespace dtrain::testing {
namespace {

const std::string kData = ::dtrain::testing::kFashionMnistDir;
const std::string kCiConfig = std::string(DT_SOURCE_DIR) + "/configs/fashion_mnist_mlp_ci.yaml";
const std::string kBucket = "dtrain-ckpt";
// 6 steps, a checkpoint every 3. The 784 -> 2048 -> 1024 -> 10 MLP has 3.71M parameters: params.bin and
// the two AdamW moments are 14.2 MiB each, so with multipart from 8 MiB in 5 MiB parts each of them
// uploads in 3 parts (5 + 5 + 4.2 MiB).
const std::string kArgs =
    " --set train.device=cpu --set train.eval=false --set train.log_every=1 --set train.max_steps=6"
    " --set schedule.warmup_steps=2 --set checkpoint.every_steps=3 --set model.mlp.hidden=[2048,1024]"
    " --set storage.multipart_threshold_mb=8 --set storage.part_size_mb=5";
constexpr uint64_t kPartSize = 5ull << 20;

const ::testing::Environment* const g_env =
    ::testing::AddGlobalTestEnvironment(new S3ServerEnvironment);  // RGW, once for this binary

storage::StorageOptions Options() {
  storage::StorageOptions o;
  o.endpoint = S3Server().endpoint;
  o.access_key = S3Server().access;
  o.secret_key = S3Server().secret;
  o.region = "us-east-1";
  o.max_retries = 2;
  return o;
}

// ---- helpers --------------------------------------------------------------------------------

// Lines of `text` that contain both `a` and `b`.
size_t Count(const std::string& text, const std::string& a, const std::string& b) {
  std::stringstream ss(text);
  std::string line;
  size_t n = 0;
  while (std::getline(ss, line)) n += line.find(a) != std::string::npos && line.find(b) != std::string::npos;
  return n;
}

// The line of `output` that reports the run's error ("" when none).
std::string ErrorLine(const std::string& output) {
  const size_t p = output.find("dtrain: error: ");
  return p == std::string::npos ? "" : output.substr(p, output.find('\n', p) - p);
}

class S3CheckpointE2E : public ::testing::Test {
 protected:
  void SetUp() override {
    DT_SKIP_WITHOUT_FASHION_MNIST();
    DT_REQUIRE_S3_SERVER();
    std::unique_ptr<storage::Storage> root;
    ASSERT_TRUE(storage::Storage::Open("s3://" + kBucket, Options(), &root).ok());
    const Status st = dynamic_cast<storage::S3Storage&>(*root).CreateBucket();  // OK when it exists
    ASSERT_TRUE(st.ok()) << st.ToString();
  }

  // The environment of a child: the credentials (secret as given) and nothing else S3-related.
  std::string Env(const std::string& secret) const {
    return "env -u AWS_ENDPOINT_URL -u AWS_ENDPOINT_URL_S3 -u AWS_SESSION_TOKEN AWS_ACCESS_KEY_ID=" +
           S3Server().access + " AWS_SECRET_ACCESS_KEY=" + secret + " ";
  }
  // `dtrain train` of the CI config with checkpoints in s3://kBucket/<prefix>.
  std::string Train(const std::string& prefix, const std::string& run_dir) const {
    return DtrainBin() + " train " + kCiConfig + kArgs + " --set checkpoint.url=s3://" + kBucket + "/" + prefix +
           " --set storage.endpoint=" + S3Server().endpoint + " --set run.dir=" + run_dir;
  }
};

// 6 steps uninterrupted vs. a failure at step 5 (after the save of step 3 to S3) and a second run that
// resumes from S3: the same parameters bit for bit. The 16 MiB files went up in multipart uploads, none
// is left open, and `dtrain ckpt list/verify` read the checkpoints from S3.
TEST_F(S3CheckpointE2E, ResumeFromS3AfterAFailureIsBitExact) {
  TempDir dir;
  const std::string d = dir.path();
  const auto t0 = std::chrono::steady_clock::now();
  ProcessResult full = RunCommand(DtrainBin() + " train " + kCiConfig + kArgs +
                                  " --set checkpoint.enabled=false --set run.dir=" + d + "/full");
  ASSERT_EQ(full.exit_code, 0) << full.output;
  const std::string secret = S3Server().secret;
  ProcessResult failed = RunCommand("DTRAIN_FAULT=step=5,action=error " + Env(secret) + Train("run1", d + "/run"));
  ASSERT_EQ(failed.exit_code, 1) << failed.output;
  EXPECT_NE(failed.output.find("injected fault"), std::string::npos) << failed.output;
  ProcessResult resumed = RunCommand(Env(secret) + Train("run1", d + "/run"));
  ASSERT_EQ(resumed.exit_code, 0) << resumed.output;
  EXPECT_NE(resumed.output.find("resumed from s3://" + kBucket + "/run1/step-00000003: step 3"), std::string::npos)
      << resumed.output;
  EXPECT_EQ(MaxSafetensorsDiff(d + "/full/final.safetensors", d + "/run/final.safetensors"), 0.0);
  std::printf("3 training runs in %.1f s\n",
              std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  // No output of any run shows the secret.
  for (const ProcessResult* r : {&failed, &resumed}) EXPECT_EQ(r->output.find(secret), std::string::npos);

  // Multipart: three files bigger than two parts (so they went up in 3 parts), none left open.
  std::unique_ptr<storage::Storage> store;
  ASSERT_TRUE(storage::Storage::Open("s3://" + kBucket + "/run1", Options(), &store).ok());
  std::vector<storage::ObjectInfo> objects;
  ASSERT_TRUE(store->List("step-00000006/", &objects).ok());
  int big = 0;
  for (const storage::ObjectInfo& o : objects) big += o.size > 2 * kPartSize ? 1 : 0;
  EXPECT_EQ(big, 3) << "params.bin and the two AdamW moments";
  std::vector<std::string> open_uploads;
  ASSERT_TRUE(dynamic_cast<storage::S3Storage&>(*store).ListMultipartUploads("", &open_uploads).ok());
  EXPECT_TRUE(open_uploads.empty()) << open_uploads.size() << " multipart uploads left open";
  // RGW's access log: the 3 files of step 3 went up in parts 1, 2, 3 each (9 part PUTs), none in a 4th.
  const std::string rgw_log = ReadFile(S3Server().dir + "/log/client.rgw.local.log");
  const std::string step3 = "\"PUT /" + kBucket + "/run1/step-00000003/";
  EXPECT_EQ(Count(rgw_log, step3, "?partNumber="), 9u);
  EXPECT_EQ(Count(rgw_log, step3, "?partNumber=3&"), 3u);
  EXPECT_EQ(Count(rgw_log, step3, "?partNumber=4&"), 0u);

  // `dtrain ckpt` takes the endpoint from AWS_ENDPOINT_URL.
  const std::string ckpt = Env(secret) + "AWS_ENDPOINT_URL=" + S3Server().endpoint + " " + DtrainBin() + " ckpt ";
  ProcessResult list = RunCommand(ckpt + "list s3://" + kBucket + "/run1");
  ASSERT_EQ(list.exit_code, 0) << list.output;
  EXPECT_NE(list.output.find("step-00000003 "), std::string::npos) << list.output;
  EXPECT_NE(list.output.find("step-00000006 "), std::string::npos) << list.output;
  EXPECT_NE(list.output.find("<- latest"), std::string::npos) << list.output;
  ProcessResult verify = RunCommand(ckpt + "verify s3://" + kBucket + "/run1");
  EXPECT_EQ(verify.exit_code, 0) << verify.output;
  EXPECT_NE(verify.output.find("step-00000003  OK"), std::string::npos) << verify.output;
  EXPECT_NE(verify.output.find("step-00000006  OK"), std::string::npos) << verify.output;
  ProcessResult exp = RunCommand(ckpt + "export s3://" + kBucket + "/run1 --out " + d + "/w.safetensors");
  ASSERT_EQ(exp.exit_code, 0) << exp.output;
  EXPECT_EQ(MaxSafetensorsDiff(d + "/full/final.safetensors", d + "/w.safetensors"), 0.0);
}

// A wrong secret: the run stops at once (403 is not retried) with an error naming the checkpoint URL
// and S3's error code, and neither secret appears anywhere in the output.
TEST_F(S3CheckpointE2E, WrongSecretFailsFastNamingTheUrlWithoutLeakingIt) {
  TempDir dir;
  const std::string wrong = "WRONGsecret0123456789abcdefWRONG";
  const auto t0 = std::chrono::steady_clock::now();
  ProcessResult r = RunCommand(Env(wrong) + Train("run2", dir.path() + "/run"));
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::printf("%.2f s: %s\n", s, ErrorLine(r.output).c_str());
  EXPECT_EQ(r.exit_code, 2) << r.output;  // a configuration error, as a bad config key is
  EXPECT_LT(s, 10.0) << r.output;
  EXPECT_NE(r.output.find("s3://" + kBucket + "/run2"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("SignatureDoesNotMatch — check AWS_SECRET_ACCESS_KEY"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("endpoint " + S3Server().endpoint + " (storage.endpoint)"), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find(wrong), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find(S3Server().secret), std::string::npos) << r.output;
}

// The mistake under a launcher that restarts failures: `dtrain launch --max-restarts 2` of 2 ranks with a wrong
// secret makes one attempt and exits 2 (rank 0's preflight is refused; rank 1 learns it through the preflight's
// all-reduce and fails as a configuration error too), naming the variable to fix. Restarting would only send the
// same secret again.
TEST_F(S3CheckpointE2E, WrongSecretUnderMaxRestartsIsOneAttemptAndExit2) {
  TempDir dir;
  const std::string wrong = "WRONGsecret0123456789abcdefWRONG";
  const std::string launch =
      DtrainBin() + " launch --nproc-per-node 2 --max-restarts 2 " + kCiConfig + kArgs + " --set checkpoint.url=s3://" +
      kBucket + "/run4 --set storage.endpoint=" + S3Server().endpoint + " --set run.dir=" + dir.path() + "/run";
  const ProcessResult r = RunCommand(Env(wrong) + launch);
  std::printf("%s\n", ErrorLine(r.output).c_str());
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("(attempt 1 of 3)"), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("attempt 2 of 3"), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("restarting the job"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("usage/config error (exit 2): not restarting"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("S3 rejected the credentials for s3://" + kBucket +
                          "/run4: SignatureDoesNotMatch — check "
                          "AWS_SECRET_ACCESS_KEY"),
            std::string::npos)
      << r.output;
  EXPECT_EQ(r.output.find(wrong), std::string::npos) << r.output;
}

// The storage server goes away while training runs (RGW stopped once the checkpoint of step 3 is
// complete): the next save fails after the storage layer's retries (connection refused, jittered backoff
// until storage.retry_budget_s, 3 s here, is spent) and, as runtime/checkpoint/checkpoint_writer.h documents for
// asynchronous saves, the error surfaces at the save after it: the run exits non-zero with an IoError naming the URL
// and the endpoint. Stops the server: keep this test last in the file.
TEST_F(S3CheckpointE2E, ServerGoneDuringTrainingFailsTheRunNamingTheEndpoint) {
  TempDir dir;
  std::unique_ptr<storage::Storage> store;
  ASSERT_TRUE(storage::Storage::Open("s3://" + kBucket + "/run3", Options(), &store).ok());
  ProcessResult r;
  std::thread child([&] {
    r = RunCommand(Env(S3Server().secret) + Train("run3", dir.path() + "/run") +
                   " --set train.max_steps=15 --set storage.retry_budget_s=3");
  });
  const auto t0 = std::chrono::steady_clock::now();
  storage::ObjectInfo info;
  bool saved = false;
  while (!saved && std::chrono::steady_clock::now() - t0 < std::chrono::seconds(60)) {
    saved = store->Head("step-00000003/manifest.pb", &info).ok();
    if (!saved) std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  const ProcessResult stop = StopS3Server();
  child.join();
  ASSERT_TRUE(saved) << "no checkpoint of step 3 within 60 s:\n" << r.output;
  EXPECT_EQ(stop.exit_code, 0) << stop.output;
  std::printf("%s\n", ErrorLine(r.output).c_str());
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_NE(r.output.find("IoError: rank 0: the previous checkpoint save failed: checkpoint step "), std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find(" to s3://" + kBucket + "/run3: s3://" + kBucket + "/run3/step-0000000"), std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("cannot reach S3 endpoint " + S3Server().endpoint), std::string::npos) << r.output;
  // Retried (a warning per retry) until the retry budget ran out, not given up at once.
  EXPECT_NE(r.output.find(" attempts in "), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("; stopped by retry budget: max_retries 20, retry budget "), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("; retry 1 of at most 20 in "), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("done: 15 steps"), std::string::npos) << r.output;
}

}  // namespace
}  // namespace dtrain::testing
