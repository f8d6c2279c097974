#pragma once
// A real S3 server for tests: Ceph RGW on loopback, started once per test binary by
// scripts/s3_test_server.sh and stopped at exit. Register it at namespace scope of the test file:
//   const ::testing::Environment* const g_env = ::testing::AddGlobalTestEnvironment(new S3ServerEnvironment);
// and in each test (or fixture SetUp): DT_REQUIRE_S3_SERVER();
// Skips (exit 77 of the script) say which binary and Debian packages are missing.

#include <gtest/gtest.h>

#include <cstddef>
#include <cstdint>
#include <string>

#include "core/status.h"
#include "storage/storage.h"
#include "tests/testing/subprocess.h"

namespace dtrain::testing {

struct S3ServerInfo {
  std::string endpoint, access, secret, skip_reason;
  std::string dir;       // the server's data/log directory (log/client.rgw.local.log is the access log)
  bool stopped = false;  // StopS3Server() ran: later tests of this process cannot use it
};

// The running server of this binary (valid between the environment's SetUp and TearDown).
const S3ServerInfo& S3Server();

// Stops the server before the binary ends (for a test of a server that goes away); the environment's
// TearDown then has nothing to stop. Returns the script's result.
ProcessResult StopS3Server();

// Options that reach the running server: its endpoint and keys, region us-east-1, `max_retries` retries.
storage::StorageOptions S3TestOptions(int max_retries = 5);
// Creates `bucket` on the running server (OK when it exists already).
Status CreateS3TestBucket(const std::string& bucket);
// n pseudo-random bytes (xorshift32 from `seed`) for object bodies: the same seed gives the same bytes.
std::string S3TestPattern(size_t n, uint32_t seed);

class S3ServerEnvironment : public ::testing::Environment {
 public:
  void SetUp() override;
  void TearDown() override;

 private:
  TempDir dir_;
};

// In a test body or fixture SetUp: skip when the server's packages are missing, fail when it did not
// start or an earlier test stopped it.
#define DT_REQUIRE_S3_SERVER()                                                                                         \
  do {                                                                                                                 \
    if (!::dtrain::testing::S3Server().skip_reason.empty()) GTEST_SKIP() << ::dtrain::testing::S3Server().skip_reason; \
    ASSERT_FALSE(::dtrain::testing::S3Server().endpoint.empty()) << "the S3 server did not start";                     \
    ASSERT_FALSE(::dtrain::testing::S3Server().stopped) << "an earlier test stopped the S3 server";                    \
  } while (0)

}  // namespace dtrain::testing
