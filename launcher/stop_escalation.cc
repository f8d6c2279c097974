#include "launcher/stop_escalation.h"

namespace dtrain::launcher {

void StopEscalation::Interrupt(Clock::time_point now) {
  if (state_ != State::kRunning) return;
  state_ = State::kInterrupted;
  deadline_ = now + grace_;
}

void StopEscalation::KillNow(Clock::time_point now) {
  state_ = State::kTerminating;
  deadline_ = now;
}

std::optional<StopEscalation::State> StopEscalation::Due(Clock::time_point now) {
  if (now < deadline_) return std::nullopt;
  switch (state_) {
    case State::kInterrupted:
      state_ = State::kTerminating;
      deadline_ = now + grace_;
      return state_;
    case State::kTerminating:
      state_ = State::kKilled;
      deadline_ = Clock::time_point::max();
      return state_;
    default:
      return std::nullopt;  // kRunning and kKilled have no deadline
  }
}

}  // namespace dtrain::launcher
