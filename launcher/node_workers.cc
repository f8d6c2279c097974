#include "launcher/node_workers.h"

#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <csignal>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "core/logging.h"
#include "launcher/child_set.h"
#include "launcher/exit_codes.h"

namespace dtrain::launcher {
namespace {

using Clock = StopEscalation::Clock;

// This node's workers on the child-set loop: child i is rank cmd.first_rank + i; steps 2-5 of node_workers.h.
class NodeAttempt : public ChildSetPolicy {
 public:
  NodeAttempt(const LaunchCommand& cmd, int grace_seconds, const std::string& hostname, OutputRouter* router,
              NodeLink* link, NodeAttemptResult* result)
      : cmd_(cmd), grace_seconds_(grace_seconds), hostname_(hostname), router_(router), link_(link), result_(result) {}

  void OnOutput(size_t i, bool from_stderr, const char* data, size_t size) override {
    router_->FeedRank(Rank(i), from_stderr, data, size);
  }

  void OnSignal(int sig, ChildSet* set) override {
    if (sig == SIGUSR1) {
      set->SignalAlive(SIGUSR1);
      DT_LOG_WARN(kLauncher, "SIGUSR1: forwarded to this node's workers");
    } else if (result_->stop_signal == 0) {
      result_->stop_signal = sig;
      set->SignalAlive(SIGTERM);
      DT_LOG_WARN(kLauncher, "{}: SIGTERM to this node's workers (they may checkpoint and exit 75); killed in {} s",
                  strsignal(sig), 2 * grace_seconds_);
      set->escalation()->Interrupt(Clock::now());
    } else {
      DT_LOG_WARN(kLauncher, "second {}: killing this node's workers now", strsignal(sig));
      set->escalation()->KillNow(Clock::now());
    }
  }

  // The first worker that ends other than with 0 is the root cause (step 2).
  void OnExit(size_t i, int exit_code, int term_signal, ChildSet* set) override {
    if (exit_code == 0 || stopping_) return;
    stopping_ = true;
    RankExit& cause = result_->cause;
    cause.rank = Rank(i);
    cause.host = hostname_;
    if (term_signal > 0) {
      cause.signal = term_signal;
    } else {
      cause.exit_code = exit_code;
    }
    result_->exit_code = exit_code;
    if (link_ != nullptr) {
      link_->ReportFailure(exit_code, "rank " + std::to_string(cause.rank) + " on host " + hostname_ + " (node " +
                                          std::to_string(cmd_.node_rank) + ") failed first: " + cause.Describe());
    }
    if (exit_code != kExitPreempted) set->SignalAlive(SIGTERM);
    set->escalation()->Interrupt(Clock::now());
  }

  // Another node's stop (step 3).
  void OnRound(ChildSet* set) override {
    NodeStop remote;
    if (stopping_ || link_ == nullptr || !link_->stopped(&remote)) return;
    stopping_ = true;
    result_->remote = remote;
    result_->exit_code = remote.exit_code;
    if (remote.exit_code != kExitPreempted) set->SignalAlive(SIGTERM);
    set->escalation()->Interrupt(Clock::now());
  }

  void Escalate(StopEscalation::State state, ChildSet* set) override {
    if (state == StopEscalation::State::kTerminating) {
      DT_LOG_WARN(kLauncher, "workers still running {} s after the failure/signal: SIGTERM", grace_seconds_);
      set->SignalAlive(SIGTERM);
    } else {
      DT_LOG_WARN(kLauncher, "workers still running: SIGKILL");
      set->SignalAlive(SIGKILL);
    }
  }

 private:
  int Rank(size_t i) const { return cmd_.first_rank + static_cast<int>(i); }

  const LaunchCommand& cmd_;
  const int grace_seconds_;
  const std::string& hostname_;
  OutputRouter* router_;
  NodeLink* link_;
  NodeAttemptResult* result_;
  bool stopping_ = false;  // a failure (local or remote) has been acted on
};

}  // namespace

Status RunNodeAttempt(const LaunchCommand& cmd, int grace_seconds, const std::string& hostname, SupervisorScope* scope,
                      OutputRouter* router, NodeLink* link, NodeAttemptResult* result) {
  *result = NodeAttemptResult();
  std::vector<SessionChild> workers(cmd.local_nproc);
  for (int i = 0; i < cmd.local_nproc; ++i) {
    auto env = cmd.env_set;
    env.emplace_back("RANK", std::to_string(cmd.first_rank + i));
    env.emplace_back("LOCAL_RANK", std::to_string(i));
    const Status st = SpawnSession(cmd.argv, env, SIGKILL, &workers[i], /*hold_sigusr1=*/true);
    if (!st.ok()) {
      for (int j = 0; j < i; ++j) {
        kill(-workers[j].pid, SIGKILL);
        waitpid(workers[j].pid, nullptr, 0);
        SweepOrphans(workers[j].pid);
        close(workers[j].out_fd);
        close(workers[j].err_fd);
      }
      return st;
    }
  }
  NodeAttempt policy(cmd, grace_seconds, hostname, router, link, result);
  ChildSet set(std::move(workers), std::chrono::seconds(grace_seconds));
  set.Run(scope, &policy);
  router->Finish();
  if (result->exit_code == 0 && link != nullptr) link->ReportDone();
  return Status::OK();
}

}  // namespace dtrain::launcher
