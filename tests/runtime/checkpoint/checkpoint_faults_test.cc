// The preemption flag (signal handler -> atomic) and the fault-injection keys used by the checkpoint
// tests (kill_in_ckpt, attempt=).

#include <gtest/gtest.h>
#include <signal.h>
#include <stdlib.h>

#include <chrono>
#include <thread>

#include "runtime/checkpoint/fault_injection.h"
#include "runtime/checkpoint/preemption.h"

namespace dtrain::runtime {
namespace {

TEST(Preemption, SignalsSetTheFlagAndDoNotEndTheProcess) {
  Preemption::Clear();
  Preemption::InstallHandlers();
  EXPECT_EQ(Preemption::Requested(), 0);
  ASSERT_EQ(raise(SIGUSR1), 0);  // delivered synchronously to this thread
  EXPECT_EQ(Preemption::Requested(), SIGUSR1);
  ASSERT_EQ(raise(SIGTERM), 0);
  EXPECT_EQ(Preemption::Requested(), SIGTERM);
  Preemption::Clear();
  EXPECT_EQ(Preemption::Requested(), 0);
}

TEST(FaultInjection, KillInCheckpointIsParsedAndInertAtStepBoundaries) {
  FaultInjector f;
  ASSERT_TRUE(FaultInjector::Parse("step=20,action=kill_in_ckpt", &f).ok());
  EXPECT_TRUE(f.enabled());
  EXPECT_TRUE(f.AtStep(0, 20).ok());             // not a step fault
  EXPECT_TRUE(f.AtCheckpointWrite(0, 10).ok());  // another checkpoint: no effect
  EXPECT_EQ(FaultInjector::Parse("step=2,action=explode", &f).code(), Status::Code::kInvalidArgument);
}

TEST(FaultInjection, PauseSleepsAtItsStepUntilAPreemptionSignalOrItsSeconds) {
  FaultInjector f;
  ASSERT_TRUE(FaultInjector::Parse("rank=1,step=4,action=pause,seconds=0", &f).ok());
  EXPECT_TRUE(f.AtStep(1, 4).ok());  // 0 s: returns at once
  ASSERT_TRUE(FaultInjector::Parse("step=4,action=pause,seconds=30", &f).ok());
  EXPECT_TRUE(f.AtStep(0, 3).ok());  // another step: no pause
  Preemption::Clear();
  Preemption::InstallHandlers();
  std::thread signaller([] {
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    Preemption::Raise(SIGUSR1);
  });
  const auto start = std::chrono::steady_clock::now();
  EXPECT_TRUE(f.AtStep(0, 4).ok());
  const double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  signaller.join();
  EXPECT_GE(waited, 0.19);
  EXPECT_LT(waited, 10.0) << "the signal ends the pause, not its 30 s";
  Preemption::Clear();
  EXPECT_EQ(FaultInjector::Parse("step=4,action=hang,seconds=3", &f).code(), Status::Code::kInvalidArgument);
  EXPECT_EQ(FaultInjector::Parse("step=4,action=pause,seconds=-1", &f).code(), Status::Code::kInvalidArgument);
}

TEST(FaultInjection, AttemptKeySelectsTheLaunchAttempt) {
  FaultInjector f;
  setenv("DTRAIN_FAULT", "step=3,attempt=0,action=error", 1);
  ASSERT_TRUE(FaultInjector::FromEnv(0, &f).ok());
  EXPECT_EQ(f.AtStep(0, 3).code(), Status::Code::kInternal);  // first attempt
  ASSERT_TRUE(FaultInjector::FromEnv(1, &f).ok());
  EXPECT_FALSE(f.enabled());
  EXPECT_TRUE(f.AtStep(0, 3).ok());  // the restarted attempt runs clean
  unsetenv("DTRAIN_FAULT");
}

}  // namespace
}  // namespace dtrain::runtime
