#pragma once
// A real S3 server for tests: Ceph RGW on loopback, started once per test binary by
// scripts/s3_test_server.sh and stopped at exit. Register it at namespace scope of the test file:
//   const ::testing::Environment* const g_env = ::testing::AddGlobalTestEnvironment(new S3ServerEnvironment);
// and in each test: `if (!S3Server().skip_reason.empty()) GTEST_SKIP() << S3Server().skip_reason;`.
// Skips (exit 77 of the script) say which binary and Debian packages are missing.

#include <gtest/gtest.h>

#include <string>

#include "tests/testing/subprocess.h"

namespace dtrain::testing {

struct S3ServerInfo {
  std::string endpoint, access, secret, skip_reason;
  std::string dir;  // the server's data/log directory (rgw.log holds the access log)
};

// The running server of this binary (valid between the environment's SetUp and TearDown).
const S3ServerInfo& S3Server();

class S3ServerEnvironment : public ::testing::Environment {
 public:
  void SetUp() override;
  void TearDown() override;

 private:
  TempDir dir_;
  bool started_ = false;
};

// The repository root (scripts/ lives there).
std::string RepoRoot();

}  // namespace dtrain::testing
