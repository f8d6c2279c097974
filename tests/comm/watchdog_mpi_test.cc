// Watchdog between real processes: `mpiexec -n 2 comm_watchdog_mpi_test`.
//
// A rank that never enters a collective must be named: rank 1 skips an all-reduce that rank 0 is
// blocked in; rank 0's watchdog fires within timeout + 1 s, names the section, itself and rank 1,
// aborts the communicator and calls on_fatal. The test never hangs: on_fatal only records, and the
// late rank enters the all-reduce after the deadline, which releases the blocked one (an MPI
// collective cannot be interrupted from inside the process; in a worker on_fatal ends the process).
//
// MPI runs at MPI_THREAD_MULTIPLE here (this file's own environment), as arrival tracking needs.
#include <gtest/gtest.h>
#include <mpi.h>

#include <chrono>
#include <mutex>
#include <thread>

#include "comm/bootstrap.h"
#include "comm/communicator.h"
#include "comm/watchdog.h"
#include "core/logging.h"

namespace dtrain::comm {
namespace {

using Clock = std::chrono::steady_clock;

int g_provided = MPI_THREAD_SINGLE;

class ThreadMultipleMpiEnvironment : public ::testing::Environment {
 public:
  void SetUp() override {
    ASSERT_EQ(MPI_Init_thread(nullptr, nullptr, MPI_THREAD_MULTIPLE, &g_provided), MPI_SUCCESS);
    Status st = MpiSession::Init(nullptr, nullptr, &session_);  // adopts the running MPI
    ASSERT_TRUE(st.ok()) << st.ToString();
    log::Init(session_->rank());
  }
  void TearDown() override {
    session_.reset();
    MPI_Finalize();
  }

 private:
  std::unique_ptr<MpiSession> session_;
};

[[maybe_unused]] ::testing::Environment* const g_env =
    ::testing::AddGlobalTestEnvironment(new ThreadMultipleMpiEnvironment());

void Sleep(double s) { std::this_thread::sleep_for(std::chrono::duration<double>(s)); }

class WatchdogMpiTest : public ::testing::Test {
 protected:
  void SetUp() override {
    // Same decision on every rank: MPI's thread level and the world size are global.
    if (g_provided < MPI_THREAD_MULTIPLE) GTEST_SKIP() << "MPI does not provide MPI_THREAD_MULTIPLE";
    Status st = CreateCommunicator(Backend::kMpi, CommOptions{}, &comm_);
    ASSERT_TRUE(st.ok()) << st.ToString();
    r_ = comm_->rank();
    n_ = comm_->world_size();
    if (n_ < 2) GTEST_SKIP() << "needs 2 ranks, have " << n_;
  }
  void TearDown() override { MPI_Barrier(MPI_COMM_WORLD); }  // line the ranks up for the next test

  // Collective (arrival tracking dups MPI_COMM_WORLD).
  std::unique_ptr<Watchdog> Make(double timeout_s) {
    WatchdogOptions o;
    o.timeout_s = timeout_s;
    o.poll_interval_s = 0.05;
    std::unique_ptr<Watchdog> wd;
    Status st = Watchdog::Create(
        {comm_.get()}, o,
        [this](const Status& s) {
          std::lock_guard<std::mutex> lock(mu_);
          ++fatal_calls_;
          fatal_ = s;
          fatal_at_ = Clock::now();
        },
        &wd);
    EXPECT_TRUE(st.ok()) << st.ToString();
    return wd;
  }

  // In-place sum of (rank + 1) over one f64: n(n+1)/2 on every rank.
  Status SumOfRankPlusOne(double* out) {
    *out = r_ + 1;
    Tensor t = Tensor::Wrap(out, {1}, DType::kF64, DeviceType::kCPU);
    return comm_->AllReduce(&t, ReduceOp::kSum, nullptr);
  }

  int FatalCalls() {
    std::lock_guard<std::mutex> lock(mu_);
    return fatal_calls_;
  }

  std::unique_ptr<Communicator> comm_;
  int r_ = 0, n_ = 1;
  std::mutex mu_;
  int fatal_calls_ = 0;
  Status fatal_;
  Clock::time_point fatal_at_;
};

TEST_F(WatchdogMpiTest, ArmedMatchedCollectivesNeverFire) {
  auto wd = Make(1.0);
  ASSERT_TRUE(wd->tracking_arrivals());
  for (int i = 0; i < 20; ++i) {
    if (r_ == 1 && i % 2 == 1) Sleep(0.05);  // a slow rank, but well within the timeout
    WatchdogScope scope(wd.get(), "all-reduce " + std::to_string(i));
    double v = 0;
    ASSERT_TRUE(SumOfRankPlusOne(&v).ok());
    EXPECT_EQ(v, n_ * (n_ + 1) / 2.0) << i;
  }
  Sleep(0.3);
  EXPECT_FALSE(wd->fired());
  EXPECT_EQ(FatalCalls(), 0);
}

TEST_F(WatchdogMpiTest, RankZeroNamesThePeerThatSkippedACollective) {
  constexpr double kTimeout = 1.0;
  auto wd = Make(kTimeout);
  ASSERT_TRUE(wd->tracking_arrivals());
  {
    WatchdogScope scope(wd.get(), "warm-up all-reduce");  // section #1: everyone arrives
    double v = 0;
    ASSERT_TRUE(SumOfRankPlusOne(&v).ok());
  }
  if (r_ == 0) {
    const auto t0 = Clock::now();
    double v = 0;
    {
      WatchdogScope scope(wd.get(), "test all-reduce #2");
      EXPECT_TRUE(SumOfRankPlusOne(&v).ok());  // blocks until rank 1 comes, after the deadline
    }
    ASSERT_EQ(FatalCalls(), 1);
    std::lock_guard<std::mutex> lock(mu_);
    const double fired_after = std::chrono::duration<double>(fatal_at_ - t0).count();
    EXPECT_GE(fired_after, kTimeout);
    EXPECT_LE(fired_after, kTimeout + 1.0);
    EXPECT_EQ(fatal_.code(), Status::Code::kAborted);
    const std::string& m = fatal_.message();
    EXPECT_NE(m.find("'test all-reduce #2' did not complete within 1 s"), std::string::npos) << m;
    EXPECT_NE(m.find("rank 0 of 2"), std::string::npos) << m;
    EXPECT_NE(m.find("ranks that did not arrive: 1 ("), std::string::npos) << m;
    EXPECT_EQ(v, 3.0);  // the late rank still completed the collective
    // The watchdog aborted the communicator: later calls are refused.
    EXPECT_EQ(comm_->Barrier().code(), Status::Code::kAborted);
  } else {
    // Rank 1 neither arms nor enters section #2 until well past rank 0's deadline, then joins
    // (unarmed) so that rank 0's blocked MPI_Allreduce returns.
    Sleep(kTimeout + 2.0);
    double v = 0;
    EXPECT_TRUE(SumOfRankPlusOne(&v).ok());
    EXPECT_EQ(v, 3.0);
    EXPECT_EQ(FatalCalls(), 0);
  }
}

TEST_F(WatchdogMpiTest, OtherRanksSayTheyCannotNameTheMissingRank) {
  constexpr double kTimeout = 1.0;
  auto wd = Make(kTimeout);
  if (r_ == 1) {
    double v = 0;
    {
      WatchdogScope scope(wd.get(), "all-reduce that rank 0 is late for");
      EXPECT_TRUE(SumOfRankPlusOne(&v).ok());
    }
    ASSERT_EQ(FatalCalls(), 1);
    std::lock_guard<std::mutex> lock(mu_);
    const std::string& m = fatal_.message();
    EXPECT_NE(m.find("'all-reduce that rank 0 is late for' did not complete"), std::string::npos) << m;
    EXPECT_NE(m.find("rank 1 of 2"), std::string::npos) << m;
    EXPECT_NE(m.find("not known on this rank: rank 0 tracks arrivals"), std::string::npos) << m;
  } else {
    Sleep(kTimeout + 2.0);
    double v = 0;
    EXPECT_TRUE(SumOfRankPlusOne(&v).ok());
    EXPECT_EQ(FatalCalls(), 0);
  }
}

}  // namespace
}  // namespace dtrain::comm
