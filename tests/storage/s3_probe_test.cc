// ProbeStorage, the storage preflight, against a real Ceph RGW on loopback (one server for this binary,
// which ctest runs whole as an s3_* test): a good bucket, a missing bucket, a wrong secret, an unknown
// access key (both InvalidArgument: configuration errors, exit 2, never restarted). The file:// cases are in
// probe_test.cc.

#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "core/check.h"
#include "storage/probe.h"
#include "storage/s3_storage.h"
#include "tests/testing/s3_server.h"

namespace dtrain::storage {
namespace {

using testing::CreateS3TestBucket;
using testing::S3Server;
using testing::S3TestOptions;

const ::testing::Environment* const g_env =
    ::testing::AddGlobalTestEnvironment(new testing::S3ServerEnvironment);  // RGW, once for this binary

std::vector<ObjectInfo> ListAll(Storage* s) {
  std::vector<ObjectInfo> all;
  EXPECT_TRUE(s->List("", &all).ok());
  return all;
}

class ProbeS3Test : public ::testing::Test {
 protected:
  void SetUp() override {
    DT_REQUIRE_S3_SERVER();
    opts_ = S3TestOptions(/*max_retries=*/2);
    ASSERT_TRUE(CreateS3TestBucket("dtrain-probe").ok());
  }
  Status Probe(const std::string& url, const std::string& prefix = "") {
    std::unique_ptr<Storage> s;
    DT_RETURN_IF_ERROR(Storage::Open(url, opts_, &s));
    return ProbeStorage(s.get(), prefix);
  }
  StorageOptions opts_;
};

TEST_F(ProbeS3Test, GoodBucketPassesAndLeavesNothingBehind) {
  const Status st = Probe("s3://dtrain-probe/good", "run1/");
  ASSERT_TRUE(st.ok()) << st.ToString();
  std::unique_ptr<Storage> s;
  ASSERT_TRUE(Storage::Open("s3://dtrain-probe/good", opts_, &s).ok());
  EXPECT_TRUE(ListAll(s.get()).empty());
}

TEST_F(ProbeS3Test, MissingBucketIsNotFoundNamingIt) {
  const Status st = Probe("s3://dtrain-no-such-bucket/x");
  EXPECT_EQ(st.code(), Status::Code::kNotFound) << st.ToString();
  EXPECT_NE(st.message().find("storage preflight of s3://dtrain-no-such-bucket/x: cannot list '': "), std::string::npos)
      << st.message();
  EXPECT_NE(st.message().find("bucket 'dtrain-no-such-bucket' does not exist at " + opts_.endpoint), std::string::npos)
      << st.message();
}

TEST_F(ProbeS3Test, WrongSecretIsRejectedCredentialsNeverPrinted) {
  opts_.secret_key = "wrong-secret-never-printed-42";
  const Status st = Probe("s3://dtrain-probe/good");
  EXPECT_EQ(st.code(), Status::Code::kInvalidArgument) << st.ToString();  // a config error: exit 2
  EXPECT_NE(st.message().find("S3 rejected the credentials for s3://dtrain-probe/good: SignatureDoesNotMatch — check "
                              "AWS_SECRET_ACCESS_KEY"),
            std::string::npos)
      << st.message();
  EXPECT_EQ(st.message().find("wrong-secret-never-printed-42"), std::string::npos);
  EXPECT_EQ(st.message().find(S3Server().secret), std::string::npos);
}

TEST_F(ProbeS3Test, UnknownAccessKeyIsRejected) {
  opts_.access_key = "AKIDNOSUCHUSER000000";
  const Status st = Probe("s3://dtrain-probe/good");
  EXPECT_EQ(st.code(), Status::Code::kInvalidArgument) << st.ToString();  // a config error: exit 2
  EXPECT_NE(st.message().find("InvalidAccessKeyId — check AWS_ACCESS_KEY_ID"), std::string::npos) << st.message();
}

}  // namespace
}  // namespace dtrain::storage
