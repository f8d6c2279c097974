#pragma once
// StopEscalation: how a supervised attempt stops its children once something asked it to, as named states with
// deadlines. One per attempt; the child-set loop (launcher/child_set.h) drives it for the mpirun/srun attempt
// (launcher/supervisor.h) and for the per-node workers (launcher/node_workers.h) alike.
//
//   kRunning      nothing asked the children to stop yet.
//   kInterrupted  they were asked (the launcher's SIGINT/SIGTERM forwarded, the process manager's failure report,
//                 a failing worker, a stop request); at deadline = then + grace they get SIGTERM: kTerminating.
//   kTerminating  SIGTERM sent; at deadline = then + grace they get SIGKILL: kKilled. A second SIGINT/SIGTERM to the
//                 launcher enters this state with the deadline now (SIGKILL at once).
//   kKilled       SIGKILL sent; nothing is due any more.
// Not thread-safe: the supervising thread owns it.

#include <chrono>
#include <optional>

namespace dtrain::launcher {

class StopEscalation {
 public:
  using Clock = std::chrono::steady_clock;
  enum class State { kRunning, kInterrupted, kTerminating, kKilled };

  explicit StopEscalation(Clock::duration grace) : grace_(grace) {}

  State state() const { return state_; }
  // When the next step is due; Clock::time_point::max() when none is.
  Clock::time_point deadline() const { return deadline_; }

  // kRunning -> kInterrupted, the SIGTERM due a grace period from `now`. No effect in any other state.
  void Interrupt(Clock::time_point now);
  // From any state -> kTerminating with the deadline `now`: the SIGKILL is due at once.
  void KillNow(Clock::time_point now);
  // When the deadline has passed at `now`: enters the next state and returns it (kTerminating: send SIGTERM now;
  // kKilled: send SIGKILL now). Else nullopt.
  std::optional<State> Due(Clock::time_point now);

 private:
  Clock::duration grace_;
  State state_ = State::kRunning;
  Clock::time_point deadline_ = Clock::time_point::max();
};

}  // namespace dtrain::launcher
