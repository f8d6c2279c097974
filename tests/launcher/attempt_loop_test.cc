// RunWithRestarts (launcher/attempt_loop.h): the one restart loop driven by a fake backend (scripted attempt ends,
// no processes) and a fake restart policy (scripted kinds, else the basic classification): which ends are counted
// against --max-restarts, which stop the job, and with which exit code.

#include "launcher/attempt_loop.h"

#include <gtest/gtest.h>

#include <csignal>
#include <string>
#include <utility>
#include <vector>

#include "launcher/exit_codes.h"

namespace dtrain::launcher {
namespace {

// Ends each attempt as scripted (attempt i: ends_[i]); records the plans it was given.
class FakeBackend : public LaunchBackend {
 public:
  explicit FakeBackend(std::vector<AttemptEnd> ends) : ends_(std::move(ends)) {}
  Status RunAttempt(const AttemptPlan& plan, SupervisorScope* /*scope*/, AttemptEnd* end) override {
    attempts.push_back(plan.attempt);
    if (plan.attempt >= static_cast<int>(ends_.size())) return Status::Internal("attempt beyond the script");
    *end = ends_[plan.attempt];
    return Status::OK();
  }
  std::vector<int> attempts;

 private:
  std::vector<AttemptEnd> ends_;
};

// Classifies attempt i as kinds_[i] when given (a host event), else as every policy starts (BasicKind).
class FakePolicy : public RestartPolicy {
 public:
  explicit FakePolicy(std::vector<AttemptKind> kinds = {}) : kinds_(std::move(kinds)) {}
  int Plan(int attempt, int failures, AttemptPlan* plan) override {
    failures_seen.push_back(failures);
    if (attempt == stop_at) return kExitFailure;  // e.g. fewer than MIN hosts left
    plan->title = "attempt " + std::to_string(attempt + 1);
    return -1;
  }
  AttemptVerdict Classify(const AttemptPlan& plan, const AttemptEnd& end) override {
    AttemptVerdict v;
    v.kind = plan.attempt < static_cast<int>(kinds_.size()) ? kinds_[plan.attempt] : BasicKind(end);
    return v;
  }
  void Apply(const AttemptPlan& /*plan*/, const AttemptEnd& /*end*/, const AttemptVerdict& verdict) override {
    applied.push_back(verdict.kind);
  }
  std::vector<int> failures_seen;  // the `failures` argument of each Plan call
  std::vector<AttemptKind> applied;
  int stop_at = -1;

 private:
  std::vector<AttemptKind> kinds_;
};

AttemptEnd Done() {
  AttemptEnd e;
  e.done = true;
  return e;
}

AttemptEnd Failed(int code, int stop_signal = 0) {
  AttemptEnd e;
  e.exit_code = code;
  e.stop_signal = stop_signal;
  e.who = "rank 1";
  return e;
}

TEST(AttemptLoopTest, EachFailureIsCountedAndRestartedWhileRestartsAreLeft) {
  FakeBackend backend({Failed(1), Failed(1), Done()});
  FakePolicy policy;
  EXPECT_EQ(RunWithRestarts(&backend, &policy, /*max_restarts=*/2), kExitOk);
  EXPECT_EQ(backend.attempts, (std::vector<int>{0, 1, 2}));
  EXPECT_EQ(policy.failures_seen, (std::vector<int>{0, 1, 2}));
  EXPECT_EQ(policy.applied,
            (std::vector<AttemptKind>{AttemptKind::kFailure, AttemptKind::kFailure, AttemptKind::kDone}));
}

TEST(AttemptLoopTest, MaxRestartsReachedEndsWithTheRootCauseCode) {
  FakeBackend backend({Failed(3), Failed(3), Failed(3), Done()});
  FakePolicy policy;
  EXPECT_EQ(RunWithRestarts(&backend, &policy, /*max_restarts=*/1), 3);
  EXPECT_EQ(backend.attempts, (std::vector<int>{0, 1}));  // one restart, then the failure's code
}

TEST(AttemptLoopTest, LostHostNoticeAndGrowAreNotCounted) {
  // Attempts 0-2 end by host events (their exit codes would be failures), attempt 3 fails: with no restarts
  // allowed, only that one ends the job.
  FakeBackend backend({Failed(1), Failed(75), Failed(75), Failed(4)});
  FakePolicy policy({AttemptKind::kLostHost, AttemptKind::kNotice, AttemptKind::kGrow});
  EXPECT_EQ(RunWithRestarts(&backend, &policy, /*max_restarts=*/0), 4);
  EXPECT_EQ(backend.attempts, (std::vector<int>{0, 1, 2, 3}));
  EXPECT_EQ(policy.failures_seen, (std::vector<int>{0, 0, 0, 0}));
}

TEST(AttemptLoopTest, FailuresAfterALostHostStillCountOnlyThemselves) {
  FakeBackend backend({Failed(1), Failed(1), Failed(1), Failed(1)});
  FakePolicy policy({AttemptKind::kFailure, AttemptKind::kLostHost, AttemptKind::kFailure});
  testing::internal::CaptureStderr();
  EXPECT_EQ(RunWithRestarts(&backend, &policy, /*max_restarts=*/2), 1);
  const std::string log = testing::internal::GetCapturedStderr();
  EXPECT_EQ(policy.failures_seen, (std::vector<int>{0, 1, 1, 2}));
  // The restart count is the failures', DTRAIN_RESTART_COUNT the next attempt's.
  EXPECT_NE(log.find("restarting the job (1 of 2 restarts, DTRAIN_RESTART_COUNT=1)"), std::string::npos) << log;
  EXPECT_NE(log.find("restarting the job (2 of 2 restarts, DTRAIN_RESTART_COUNT=3)"), std::string::npos) << log;
  EXPECT_EQ(backend.attempts.size(), 4u);  // failure, lost host, failure, failure (the third: no restarts left)
}

TEST(AttemptLoopTest, ASignalToTheLauncherStopsWithoutRestart) {
  FakeBackend backend({Failed(1, SIGTERM), Done()});
  FakePolicy policy;
  EXPECT_EQ(RunWithRestarts(&backend, &policy, /*max_restarts=*/5), ExitCodeForSignal(SIGTERM));
  EXPECT_EQ(backend.attempts.size(), 1u);
  EXPECT_EQ(policy.applied, (std::vector<AttemptKind>{AttemptKind::kStopped}));
}

TEST(AttemptLoopTest, RanksThatSavedOnASignalExitPreempted) {
  FakeBackend backend({Failed(kExitPreempted, SIGTERM), Done()});
  FakePolicy policy;
  EXPECT_EQ(RunWithRestarts(&backend, &policy, /*max_restarts=*/5), kExitPreempted);
  EXPECT_EQ(backend.attempts.size(), 1u);
}

TEST(AttemptLoopTest, AUsageConfigOrCredentialsErrorIsNeverRetried) {
  FakeBackend backend({Failed(kExitUsage), Done()});
  FakePolicy policy;
  EXPECT_EQ(RunWithRestarts(&backend, &policy, /*max_restarts=*/3), kExitUsage);
  EXPECT_EQ(backend.attempts.size(), 1u);
}

TEST(AttemptLoopTest, ThePolicyCanStopBeforeAnAttempt) {
  FakeBackend backend({Failed(1, 0), Failed(1, 0)});
  FakePolicy policy({AttemptKind::kLostHost});
  policy.stop_at = 1;  // fewer than MIN hosts left after the loss
  EXPECT_EQ(RunWithRestarts(&backend, &policy, /*max_restarts=*/3), kExitFailure);
  EXPECT_EQ(backend.attempts, (std::vector<int>{0}));
}

TEST(AttemptLoopTest, AnAttemptThatCannotRunIsTheLaunchersOwnError) {
  FakeBackend backend({});  // RunAttempt fails: Internal
  FakePolicy policy;
  EXPECT_EQ(RunWithRestarts(&backend, &policy, /*max_restarts=*/3), kExitFailure);
  EXPECT_EQ(backend.attempts.size(), 1u);
}

}  // namespace
}  // namespace dtrain::launcher
