#include "tests/testing/s3_server.h"

#include <chrono>
#include <cstdio>
#include <memory>

#include "core/check.h"
#include "storage/s3_storage.h"

namespace dtrain::testing {
namespace {

S3ServerInfo g_info;
bool g_started = false;

const std::string kScript = std::string(DT_SOURCE_DIR) + "/scripts/s3_test_server.sh";

std::string EnvValue(const std::string& env_text, const std::string& name) {
  const size_t p = env_text.find(name + "=");
  if (p == std::string::npos) return "";
  const size_t b = p + name.size() + 1;
  return env_text.substr(b, env_text.find('\n', b) - b);
}

}  // namespace

const S3ServerInfo& S3Server() { return g_info; }

ProcessResult StopS3Server() {
  g_info.stopped = true;
  if (!g_started) {
    ProcessResult none;
    none.exit_code = 0;
    none.output = "the S3 server is not running";
    return none;
  }
  g_started = false;
  return RunCommand(kScript + " stop " + g_info.dir);
}

void S3ServerEnvironment::SetUp() {
  g_info = S3ServerInfo();
  g_info.dir = dir_.path() + "/rgw";
  const auto t0 = std::chrono::steady_clock::now();
  const ProcessResult r = RunCommand(kScript + " start " + g_info.dir);
  if (r.exit_code == 77) {
    g_info.skip_reason = "no S3 test server: " + r.output;  // names the missing binary and the packages
    return;
  }
  ASSERT_EQ(r.exit_code, 0) << "s3_test_server.sh start failed:\n" << r.output;
  const std::string env = ReadFile(g_info.dir + "/env");
  g_info.endpoint = EnvValue(env, "S3_TEST_ENDPOINT");
  g_info.access = EnvValue(env, "S3_TEST_ACCESS_KEY");
  g_info.secret = EnvValue(env, "S3_TEST_SECRET_KEY");
  g_started = true;
  std::printf("RGW up at %s in %.1f s\n", g_info.endpoint.c_str(),
              std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
}

void S3ServerEnvironment::TearDown() {
  if (!g_started) return;
  const ProcessResult r = StopS3Server();
  EXPECT_EQ(r.exit_code, 0) << r.output;
}

storage::StorageOptions S3TestOptions(int max_retries) {
  storage::StorageOptions o;
  o.endpoint = S3Server().endpoint;
  o.access_key = S3Server().access;
  o.secret_key = S3Server().secret;
  o.region = "us-east-1";
  o.max_retries = max_retries;
  return o;
}

Status CreateS3TestBucket(const std::string& bucket) {
  std::unique_ptr<storage::Storage> root;
  DT_RETURN_IF_ERROR(storage::Storage::Open("s3://" + bucket, S3TestOptions(), &root));
  return static_cast<storage::S3Storage*>(root.get())->CreateBucket();
}

std::string S3TestPattern(size_t n, uint32_t seed) {
  std::string s(n, '\0');
  uint32_t x = seed * 2654435761u + 1;
  for (size_t i = 0; i < n; ++i) {
    x ^= x << 13;
    x ^= x >> 17;
    x ^= x << 5;
    s[i] = static_cast<char>(x);
  }
  return s;
}

}  // namespace dtrain::testing
