#include "launcher/node_workers.h"

#include <poll.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <string>
#include <vector>

#include "core/logging.h"
#include "launcher/exit_codes.h"

namespace dtrain::launcher {
namespace {

using Clock = std::chrono::steady_clock;

constexpr auto kPollInterval = std::chrono::milliseconds(100);
constexpr auto kDrainTime = std::chrono::seconds(2);  // pipes a reaped worker's leftovers may hold open

struct Worker {
  int rank = 0;
  SessionChild child;
  bool reaped = false;
};

void SignalAlive(std::vector<Worker>* workers, int sig) {
  for (Worker& w : *workers) {
    if (w.reaped) continue;
    kill(w.child.pid, sig);
    SignalSession(w.child.pid, sig);  // what the worker started, too
  }
}

}  // namespace

Status RunNodeAttempt(const LaunchCommand& cmd, int grace_seconds, const std::string& hostname, SupervisorScope* scope,
                      OutputRouter* router, NodeLink* link, NodeAttemptResult* result) {
  *result = NodeAttemptResult();
  std::vector<Worker> workers(cmd.local_nproc);
  for (int i = 0; i < cmd.local_nproc; ++i) {
    Worker& w = workers[i];
    w.rank = cmd.first_rank + i;
    auto env = cmd.env_set;
    env.emplace_back("RANK", std::to_string(w.rank));
    env.emplace_back("LOCAL_RANK", std::to_string(i));
    const Status st = SpawnSession(cmd.argv, env, SIGKILL, &w.child);
    if (!st.ok()) {
      for (int j = 0; j < i; ++j) {
        kill(-workers[j].child.pid, SIGKILL);
        waitpid(workers[j].child.pid, nullptr, 0);
        SweepOrphans(workers[j].child.pid);
        close(workers[j].child.out_fd);
        close(workers[j].child.err_fd);
      }
      return st;
    }
  }
  const auto grace = std::chrono::seconds(grace_seconds);
  int stage = 0;  // 0 running; 1 SIGTERM at `deadline`; 2 SIGKILL at `deadline`; 3 done
  auto deadline = Clock::time_point::max();
  auto arm = [&] {
    if (stage == 0) {
      stage = 1;
      deadline = Clock::now() + grace;
    }
  };
  bool stopping = false;  // a failure (local or remote) has been acted on
  auto all_reaped_at = Clock::time_point::max();
  auto open_fds = [&] {
    return std::any_of(workers.begin(), workers.end(),
                       [](const Worker& w) { return w.child.out_fd >= 0 || w.child.err_fd >= 0; });
  };
  while (all_reaped_at == Clock::time_point::max() || open_fds()) {
    // --- output
    std::vector<pollfd> fds;
    std::vector<std::pair<Worker*, int>> owners;  // (worker, 0 stdout | 1 stderr)
    for (Worker& w : workers) {
      for (int s = 0; s < 2; ++s) {
        const int fd = s == 0 ? w.child.out_fd : w.child.err_fd;
        if (fd < 0) continue;
        fds.push_back({fd, POLLIN, 0});
        owners.emplace_back(&w, s);
      }
    }
    fds.push_back({scope->signal_fd(), POLLIN, 0});
    auto wait = kPollInterval;
    if (deadline != Clock::time_point::max()) {
      wait = std::min(wait, std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()));
    }
    poll(fds.data(), fds.size(), std::max<int>(0, static_cast<int>(wait.count())));
    for (size_t i = 0; i < owners.size(); ++i) {
      if ((fds[i].revents & (POLLIN | POLLHUP | POLLERR)) == 0) continue;
      Worker* w = owners[i].first;
      int& fd = owners[i].second == 0 ? w->child.out_fd : w->child.err_fd;
      char buf[65536];
      const ssize_t n = read(fd, buf, sizeof(buf));
      if (n > 0) {
        router->FeedRank(w->rank, owners[i].second == 1, buf, static_cast<size_t>(n));
      } else if (n == 0 || (errno != EINTR && errno != EAGAIN)) {
        close(fd);
        fd = -1;
      }
    }

    // --- signals to the launcher
    unsigned char sig = 0;
    while (read(scope->signal_fd(), &sig, 1) == 1) {
      if (sig == SIGUSR1) {
        SignalAlive(&workers, SIGUSR1);
        DT_LOG_WARN(kLauncher, "SIGUSR1: forwarded to this node's workers");
      } else if (result->stop_signal == 0) {
        result->stop_signal = sig;
        SignalAlive(&workers, SIGTERM);
        DT_LOG_WARN(kLauncher, "{}: SIGTERM to this node's workers (they may checkpoint and exit 75); killed in {} s",
                    strsignal(sig), 2 * grace_seconds);
        arm();
      } else {
        DT_LOG_WARN(kLauncher, "second {}: killing this node's workers now", strsignal(sig));
        stage = 2;
        deadline = Clock::now();
      }
    }

    // --- workers that ended
    for (Worker& w : workers) {
      if (w.reaped) continue;
      int status = 0;
      const pid_t r = waitpid(w.child.pid, &status, WNOHANG);
      if (r != w.child.pid && !(r < 0 && errno == ECHILD)) continue;
      w.reaped = true;
      const int code = r == w.child.pid ? ExitCodeOfWaitStatus(status) : kExitFailure;
      SweepOrphans(w.child.pid);
      if (code == 0 || stopping) continue;
      stopping = true;
      RankExit& cause = result->cause;
      cause.rank = w.rank;
      cause.host = hostname;
      if (r == w.child.pid && WIFSIGNALED(status)) {
        cause.signal = WTERMSIG(status);
      } else {
        cause.exit_code = code;
      }
      result->exit_code = code;
      if (link != nullptr) {
        link->ReportFailure(code, "rank " + std::to_string(w.rank) + " on host " + hostname + " (node " +
                                      std::to_string(cmd.node_rank) + ") failed first: " + cause.Describe());
      }
      if (code != kExitPreempted) SignalAlive(&workers, SIGTERM);
      arm();
    }

    // --- another node's stop
    NodeStop remote;
    if (!stopping && link != nullptr && link->stopped(&remote)) {
      stopping = true;
      result->remote = remote;
      result->exit_code = remote.exit_code;
      if (remote.exit_code != kExitPreempted) SignalAlive(&workers, SIGTERM);
      arm();
    }

    // --- escalation
    const auto now = Clock::now();
    if (now >= deadline && stage == 1) {
      DT_LOG_WARN(kLauncher, "workers still running {} s after the failure/signal: SIGTERM", grace_seconds);
      SignalAlive(&workers, SIGTERM);
      stage = 2;
      deadline = now + grace;
    } else if (now >= deadline && stage == 2) {
      DT_LOG_WARN(kLauncher, "workers still running: SIGKILL");
      SignalAlive(&workers, SIGKILL);
      stage = 3;
      deadline = Clock::time_point::max();
    }

    const bool all = std::all_of(workers.begin(), workers.end(), [](const Worker& w) { return w.reaped; });
    if (all && all_reaped_at == Clock::time_point::max()) all_reaped_at = now;
    if (all && now - all_reaped_at > kDrainTime) {
      for (Worker& w : workers) {
        for (int* fd : {&w.child.out_fd, &w.child.err_fd}) {
          if (*fd >= 0) close(*fd);
          *fd = -1;
        }
      }
    }
  }
  for (Worker& w : workers) SweepOrphans(w.child.pid);
  router->Finish();
  if (result->exit_code == 0 && link != nullptr) link->ReportDone();
  return Status::OK();
}

}  // namespace dtrain::launcher
