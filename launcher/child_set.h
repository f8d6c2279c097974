#pragma once
// ChildSet: the one loop that watches the children of an attempt of `dtrain launch` — mpirun/srun (one child,
// launcher/supervisor.h RunAttempt) or this node's workers (one per rank, launcher/node_workers.h RunNodeAttempt).
//
// Each round (at most kPollInterval apart, sooner when the stop escalation is due):
//  1. output: whatever a child wrote to its stdout/stderr pipe goes to ChildSetPolicy::OnOutput;
//  2. signals: each byte of SupervisorScope's self-pipe (a signal number, or 0 for RequestStop) to OnSignal;
//  3. exits: each child that ended is reaped, every leftover of its session killed and reaped (SweepOrphans),
//     then OnExit;
//  4. OnRound (a failure report seen, another node's stop);
//  5. the stop escalation (launcher/stop_escalation.h), while a child still runs: when its deadline passes,
//     Escalate(kTerminating) then Escalate(kKilled) — the policy sends the SIGTERM/SIGKILL;
//  6. once every child is reaped, pipes still open kDrainTime later (held by something that escaped) are closed.
// Run returns when every child is reaped and every pipe closed, after a last sweep of each child's session.
// The policy decides what each event means; the loop owns the processes' lifecycle. Not thread-safe: the
// supervising thread runs it (other threads reach it only through SupervisorScope::RequestStop).

#include <chrono>
#include <vector>

#include "launcher/stop_escalation.h"
#include "launcher/supervisor.h"

namespace dtrain::launcher {

class ChildSet;

// What an attempt makes of the loop's events. Called from ChildSet::Run only.
class ChildSetPolicy {
 public:
  virtual ~ChildSetPolicy() = default;
  // Bytes child `i` wrote to its stdout (from_stderr false) or stderr.
  virtual void OnOutput(size_t i, bool from_stderr, const char* data, size_t size) = 0;
  // One byte of the self-pipe: a signal the launcher received, or SupervisorScope's stop request (0).
  virtual void OnSignal(int sig, ChildSet* set) = 0;
  // Child `i` was reaped: `exit_code` as a shell reports it (kExitFailure when it was gone already), `term_signal`
  // the signal that ended it (0: it exited).
  virtual void OnExit(size_t i, int exit_code, int term_signal, ChildSet* set) = 0;
  // Once per round, after the signals and exits.
  virtual void OnRound(ChildSet* /*set*/) {}
  // The escalation entered `state` (kTerminating: SIGTERM due; kKilled: SIGKILL due) while a child still runs.
  virtual void Escalate(StopEscalation::State state, ChildSet* set) = 0;
};

class ChildSet {
 public:
  // Takes the started children (their pipes are closed by Run); `grace` paces the stop escalation.
  ChildSet(std::vector<SessionChild> children, std::chrono::seconds grace);
  ChildSet(const ChildSet&) = delete;
  ChildSet& operator=(const ChildSet&) = delete;

  // The loop above, to its end.
  void Run(SupervisorScope* scope, ChildSetPolicy* policy);

  size_t size() const { return children_.size(); }
  pid_t pid(size_t i) const { return children_[i].process.pid; }
  bool reaped(size_t i) const { return children_[i].reaped; }
  bool all_reaped() const;
  StopEscalation* escalation() { return &escalation_; }
  // `sig` to every child not yet reaped and to what it started (its session).
  void SignalAlive(int sig);

 private:
  struct Child {
    SessionChild process;
    bool reaped = false;
  };
  bool any_pipe_open() const;
  void ReadOutput(ChildSetPolicy* policy, SupervisorScope* scope);
  void Reap(ChildSetPolicy* policy);
  void CloseAllPipes();

  std::vector<Child> children_;
  StopEscalation escalation_;
};

}  // namespace dtrain::launcher
