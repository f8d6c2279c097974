#pragma once
// MPI setup for *_mpi_test.cc binaries (run by ctest as `mpiexec -n 2 <test>`).
//
// gtest_main provides main(), so MPI is started by a gtest Environment: include this header in
// exactly ONE .cc of a test binary and write `DT_REGISTER_MPI_TEST_ENVIRONMENT();` at namespace
// scope. MPI_Init runs in SetUp (once per process), MPI_Finalize in TearDown. Tests must create and
// destroy their communicators inside the test body.
//
// Skips must be decided the same way on every rank (world size, GPU count), or the ranks that do
// not skip wait forever in a collective. Prefer EXPECT_* for values after a collective, so that a
// failing rank still joins the next collective.

#include <gtest/gtest.h>

#include <memory>

#include "comm/bootstrap.h"
#include "core/logging.h"

namespace dtrain::testing {

class MpiTestEnvironment : public ::testing::Environment {
 public:
  void SetUp() override {
    Status st = comm::MpiSession::Init(nullptr, nullptr, &session_);
    ASSERT_TRUE(st.ok()) << st.ToString();
    log::Init(session_->rank());
    instance_ = this;
  }
  void TearDown() override {
    instance_ = nullptr;
    session_.reset();
  }
  static const comm::MpiSession& session() { return *instance_->session_; }

 private:
  static inline MpiTestEnvironment* instance_ = nullptr;
  std::unique_ptr<comm::MpiSession> session_;
};

}  // namespace dtrain::testing

#define DT_REGISTER_MPI_TEST_ENVIRONMENT()                                 \
  [[maybe_unused]] static ::testing::Environment* const dt_mpi_test_env_ = \
      ::testing::AddGlobalTestEnvironment(new ::dtrain::testing::MpiTestEnvironment())
