// StopEscalation (launcher/stop_escalation.h): the named states and their deadlines, driven with explicit clock
// values (no sleeping).

#include "launcher/stop_escalation.h"

#include <gtest/gtest.h>

#include <chrono>

namespace dtrain::launcher {
namespace {

using State = StopEscalation::State;
using Clock = StopEscalation::Clock;
constexpr auto kGrace = std::chrono::seconds(5);

TEST(StopEscalationTest, NothingIsDueWhileRunning) {
  StopEscalation esc(kGrace);
  EXPECT_EQ(esc.state(), State::kRunning);
  EXPECT_EQ(esc.deadline(), Clock::time_point::max());
  EXPECT_FALSE(esc.Due(Clock::now() + std::chrono::hours(1)).has_value());
}

TEST(StopEscalationTest, InterruptThenTerminateAfterGraceThenKillAfterGraceMore) {
  const auto t0 = Clock::now();
  StopEscalation esc(kGrace);
  esc.Interrupt(t0);
  EXPECT_EQ(esc.state(), State::kInterrupted);
  EXPECT_EQ(esc.deadline(), t0 + kGrace);
  EXPECT_FALSE(esc.Due(t0 + kGrace - std::chrono::milliseconds(1)).has_value());
  EXPECT_EQ(esc.Due(t0 + kGrace), State::kTerminating);
  EXPECT_EQ(esc.deadline(), t0 + 2 * kGrace);
  EXPECT_FALSE(esc.Due(t0 + kGrace).has_value());  // each step is due once
  EXPECT_EQ(esc.Due(t0 + 2 * kGrace), State::kKilled);
  EXPECT_EQ(esc.deadline(), Clock::time_point::max());
  EXPECT_FALSE(esc.Due(t0 + std::chrono::hours(1)).has_value());
}

TEST(StopEscalationTest, ASecondInterruptKeepsTheFirstDeadline) {
  const auto t0 = Clock::now();
  StopEscalation esc(kGrace);
  esc.Interrupt(t0);
  esc.Interrupt(t0 + std::chrono::seconds(3));
  EXPECT_EQ(esc.deadline(), t0 + kGrace);
}

TEST(StopEscalationTest, KillNowMakesTheKillDueAtOnceFromAnyState) {
  const auto t0 = Clock::now();
  StopEscalation running(kGrace);
  running.KillNow(t0);
  EXPECT_EQ(running.state(), State::kTerminating);
  EXPECT_EQ(running.Due(t0), State::kKilled);

  StopEscalation interrupted(kGrace);
  interrupted.Interrupt(t0);
  interrupted.KillNow(t0 + std::chrono::seconds(1));
  EXPECT_EQ(interrupted.Due(t0 + std::chrono::seconds(1)), State::kKilled);
}

}  // namespace
}  // namespace dtrain::launcher
