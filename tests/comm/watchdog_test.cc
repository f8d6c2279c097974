// Watchdog in one process, against a fake communicator: arming and disarming within the timeout
// never fires; a section held past the timeout fires once, within timeout + 1 s, naming it; an
// asynchronous communicator error fires even while disarmed. The multi-rank case (a peer that never
// enters a collective) is in watchdog_mpi_test.cc.
#include "comm/watchdog.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <mutex>
#include <thread>

namespace dtrain::comm {
namespace {

using Clock = std::chrono::steady_clock;

double Since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }
void Sleep(double s) { std::this_thread::sleep_for(std::chrono::duration<double>(s)); }

// Counts aborts; CheckAsyncError returns whatever the test injects.
class FakeComm final : public Communicator {
 public:
  Status AllReduce(Tensor*, ReduceOp, cudaStream_t) override { return Status::OK(); }
  Status ReduceScatter(const Tensor&, Tensor*, ReduceOp, cudaStream_t) override { return Status::OK(); }
  Status AllGather(const Tensor&, Tensor*, cudaStream_t) override { return Status::OK(); }
  Status Broadcast(Tensor*, int, cudaStream_t) override { return Status::OK(); }
  Status Barrier() override { return Status::OK(); }
  Status Abort() override {
    ++aborts;
    return Status::OK();
  }
  Status CheckAsyncError() override {
    std::lock_guard<std::mutex> lock(mu);
    return async_error;
  }
  int rank() const override { return 3; }
  int world_size() const override { return 8; }
  Backend backend() const override { return Backend::kNccl; }

  void Inject(Status st) {
    std::lock_guard<std::mutex> lock(mu);
    async_error = std::move(st);
  }

  std::atomic<int> aborts{0};
  std::mutex mu;
  Status async_error;
};

// Records on_fatal calls and when they happened.
struct FatalLog {
  void Record(const Status& st) {
    std::lock_guard<std::mutex> lock(mu);
    ++calls;
    last = st;
    at = Clock::now();
  }
  int Calls() {
    std::lock_guard<std::mutex> lock(mu);
    return calls;
  }
  // Waits up to `limit_s` for the first call.
  bool WaitForCall(double limit_s) {
    const auto t0 = Clock::now();
    while (Calls() == 0 && Since(t0) < limit_s) Sleep(0.005);
    return Calls() > 0;
  }
  std::mutex mu;
  int calls = 0;
  Status last;
  Clock::time_point at;
};

class WatchdogTest : public ::testing::Test {
 protected:
  std::unique_ptr<Watchdog> Make(double timeout_s, std::vector<Communicator*> comms = {}) {
    if (comms.empty()) comms = {&comm_};
    WatchdogOptions o;
    o.timeout_s = timeout_s;
    o.poll_interval_s = 0.02;
    std::unique_ptr<Watchdog> wd;
    Status st = Watchdog::Create(
        comms, o, [this](const Status& s) { fatal_.Record(s); }, &wd);
    EXPECT_TRUE(st.ok()) << st.ToString();
    return wd;
  }

  FakeComm comm_;
  FatalLog fatal_;
};

TEST_F(WatchdogTest, SectionsShorterThanTheTimeoutNeverFire) {
  // 12 sections of 0.1 s with a 0.3 s timeout: 1.2 s armed in total, never 0.3 s at a stretch.
  auto wd = Make(0.3);
  for (int i = 0; i < 12; ++i) {
    WatchdogScope scope(wd.get(), "all-reduce " + std::to_string(i));
    Sleep(0.1);
  }
  Sleep(0.5);  // disarmed: idle time never counts
  EXPECT_FALSE(wd->fired());
  EXPECT_EQ(fatal_.Calls(), 0);
  EXPECT_EQ(comm_.aborts.load(), 0);
  EXPECT_TRUE(wd->fatal_status().ok());
}

TEST_F(WatchdogTest, RearmingRestartsTheClock) {
  auto wd = Make(0.4);
  wd->Arm("first");
  Sleep(0.25);
  wd->Arm("second");  // 0.25 + 0.25 s armed in a row, but each section is shorter than 0.4 s
  Sleep(0.25);
  wd->Disarm();
  wd->Disarm();  // a second Disarm is a no-op
  Sleep(0.2);
  EXPECT_FALSE(wd->fired());
  EXPECT_EQ(fatal_.Calls(), 0);
}

TEST_F(WatchdogTest, HeldSectionFiresOnceWithinTimeoutPlusOneSecond) {
  constexpr double kTimeout = 0.5;
  FakeComm second;
  auto wd = Make(kTimeout, {&comm_, &second});
  const auto t0 = Clock::now();
  wd->Arm("step 7 gradient all-reduce");
  ASSERT_TRUE(fatal_.WaitForCall(kTimeout + 5));
  const double fired_after = std::chrono::duration<double>(fatal_.at - t0).count();
  EXPECT_GE(fired_after, kTimeout);
  EXPECT_LE(fired_after, kTimeout + 1.0);
  Sleep(0.3);  // no second call
  EXPECT_EQ(fatal_.Calls(), 1);
  EXPECT_TRUE(wd->fired());
  // Every watched communicator is aborted, once.
  EXPECT_EQ(comm_.aborts.load(), 1);
  EXPECT_EQ(second.aborts.load(), 1);
  const Status st = wd->fatal_status();
  EXPECT_EQ(st.code(), Status::Code::kAborted);
  const std::string& m = st.message();
  EXPECT_NE(m.find("'step 7 gradient all-reduce' did not complete within 0.5 s"), std::string::npos) << m;
  EXPECT_NE(m.find("rank 3 of 8"), std::string::npos) << m;
  // No MPI here: the message says honestly that the missing ranks are not known.
  EXPECT_NE(m.find("which ranks did not arrive is not known"), std::string::npos) << m;
  wd->Disarm();
}

TEST_F(WatchdogTest, AsyncErrorFiresWhileDisarmed) {
  auto wd = Make(100);
  Sleep(0.1);
  EXPECT_EQ(fatal_.Calls(), 0);
  comm_.Inject(Status::Unavailable("NCCL asynchronous error: remote process exited (peer rank 5)"));
  const auto t0 = Clock::now();
  ASSERT_TRUE(fatal_.WaitForCall(5));
  EXPECT_LE(std::chrono::duration<double>(fatal_.at - t0).count(), 1.0);
  const Status st = wd->fatal_status();
  EXPECT_EQ(st.code(), Status::Code::kUnavailable);
  EXPECT_NE(st.message().find("peer rank 5"), std::string::npos) << st.message();
  EXPECT_NE(st.message().find("rank 3 of 8"), std::string::npos) << st.message();
  EXPECT_NE(st.message().find("between collectives"), std::string::npos) << st.message();
  EXPECT_EQ(comm_.aborts.load(), 1);
}

TEST_F(WatchdogTest, OwnersAbortIsNotAnError) {
  // After the owner aborted a communicator itself (to release peers after an error it is about to
  // return), CheckAsyncError says kAborted; the watchdog must not race the owner's report.
  auto wd = Make(100);
  comm_.Inject(Status::Aborted("NCCL communicator was aborted"));
  Sleep(0.3);
  EXPECT_FALSE(wd->fired());
  EXPECT_EQ(fatal_.Calls(), 0);
}

TEST_F(WatchdogTest, DestructionWhileArmedIsClean) {
  auto wd = Make(100);
  wd->Arm("never disarmed");
  const auto t0 = Clock::now();
  wd.reset();  // joins the thread promptly (the poll wait is interruptible)
  EXPECT_LT(Since(t0), 1.0);
  EXPECT_EQ(fatal_.Calls(), 0);
}

TEST(WatchdogCreate, RejectsBadArguments) {
  FakeComm c;
  std::unique_ptr<Watchdog> wd;
  auto noop = [](const Status&) {};
  WatchdogOptions o;
  EXPECT_EQ(Watchdog::Create({}, o, noop, &wd).code(), Status::Code::kInvalidArgument);
  EXPECT_EQ(Watchdog::Create({nullptr}, o, noop, &wd).code(), Status::Code::kInvalidArgument);
  EXPECT_EQ(Watchdog::Create({&c}, o, nullptr, &wd).code(), Status::Code::kInvalidArgument);
  o.timeout_s = 0;
  EXPECT_EQ(Watchdog::Create({&c}, o, noop, &wd).code(), Status::Code::kInvalidArgument);
  o.timeout_s = 1;
  o.poll_interval_s = -1;
  EXPECT_EQ(Watchdog::Create({&c}, o, noop, &wd).code(), Status::Code::kInvalidArgument);
  EXPECT_EQ(wd, nullptr);
}

}  // namespace
}  // namespace dtrain::comm
