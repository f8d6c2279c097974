#include "launcher/child_set.h"

#include <poll.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <utility>

#include "launcher/exit_codes.h"

namespace dtrain::launcher {
namespace {

using Clock = StopEscalation::Clock;

constexpr auto kPollInterval = std::chrono::milliseconds(100);
// How long the pipes may stay open after every child is reaped and its leftovers are killed.
constexpr auto kDrainTime = std::chrono::seconds(2);

}  // namespace

ChildSet::ChildSet(std::vector<SessionChild> children, std::chrono::seconds grace) : escalation_(grace) {
  for (SessionChild& c : children) children_.push_back({c, false});
}

bool ChildSet::all_reaped() const {
  return std::all_of(children_.begin(), children_.end(), [](const Child& c) { return c.reaped; });
}

bool ChildSet::any_pipe_open() const {
  return std::any_of(children_.begin(), children_.end(),
                     [](const Child& c) { return c.process.out_fd >= 0 || c.process.err_fd >= 0; });
}

void ChildSet::SignalAlive(int sig) {
  for (Child& c : children_) {
    if (c.reaped) continue;
    kill(c.process.pid, sig);
    SignalSession(c.process.pid, sig);  // what the child started, too
  }
}

void ChildSet::ReadOutput(ChildSetPolicy* policy, SupervisorScope* scope) {
  std::vector<pollfd> fds;
  std::vector<std::pair<size_t, int>> owners;  // (child, 0 stdout | 1 stderr)
  for (size_t i = 0; i < children_.size(); ++i) {
    for (int s = 0; s < 2; ++s) {
      const int fd = s == 0 ? children_[i].process.out_fd : children_[i].process.err_fd;
      if (fd < 0) continue;
      fds.push_back({fd, POLLIN, 0});
      owners.emplace_back(i, s);
    }
  }
  fds.push_back({scope->signal_fd(), POLLIN, 0});
  auto wait = std::chrono::duration_cast<std::chrono::milliseconds>(kPollInterval);
  if (escalation_.deadline() != Clock::time_point::max() && !all_reaped()) {
    wait = std::min(wait, std::chrono::duration_cast<std::chrono::milliseconds>(escalation_.deadline() - Clock::now()));
  }
  poll(fds.data(), fds.size(), std::max<int>(0, static_cast<int>(wait.count())));
  for (size_t k = 0; k < owners.size(); ++k) {
    if ((fds[k].revents & (POLLIN | POLLHUP | POLLERR)) == 0) continue;
    SessionChild& p = children_[owners[k].first].process;
    int& fd = owners[k].second == 0 ? p.out_fd : p.err_fd;
    char buf[65536];
    const ssize_t n = read(fd, buf, sizeof(buf));
    if (n > 0) {
      policy->OnOutput(owners[k].first, owners[k].second == 1, buf, static_cast<size_t>(n));
    } else if (n == 0 || (errno != EINTR && errno != EAGAIN)) {
      close(fd);
      fd = -1;
    }
  }
}

void ChildSet::Reap(ChildSetPolicy* policy) {
  for (size_t i = 0; i < children_.size(); ++i) {
    Child& c = children_[i];
    if (c.reaped) continue;
    int status = 0;
    const pid_t r = waitpid(c.process.pid, &status, WNOHANG);
    if (r != c.process.pid && !(r < 0 && errno == ECHILD)) continue;
    c.reaped = true;
    const bool waited = r == c.process.pid;
    // The child (mpirun waits for its ranks; a worker for what it ran) is gone, so whatever of its session still
    // runs is a leftover; it may hold the pipes open. Data already in the pipes stays readable.
    SweepOrphans(c.process.pid);
    policy->OnExit(i, waited ? ExitCodeOfWaitStatus(status) : kExitFailure,
                   waited && WIFSIGNALED(status) ? WTERMSIG(status) : 0, this);
  }
}

void ChildSet::CloseAllPipes() {
  for (Child& c : children_) {
    for (int* fd : {&c.process.out_fd, &c.process.err_fd}) {
      if (*fd >= 0) close(*fd);
      *fd = -1;
    }
  }
}

void ChildSet::Run(SupervisorScope* scope, ChildSetPolicy* policy) {
  auto all_reaped_at = Clock::time_point::max();
  while (all_reaped_at == Clock::time_point::max() || any_pipe_open()) {
    ReadOutput(policy, scope);
    unsigned char sig = 0;
    while (read(scope->signal_fd(), &sig, 1) == 1) policy->OnSignal(sig, this);
    Reap(policy);
    policy->OnRound(this);
    const auto now = Clock::now();
    const bool all = all_reaped();
    if (!all) {
      if (const auto entered = escalation_.Due(now)) policy->Escalate(*entered, this);
    } else if (all_reaped_at == Clock::time_point::max()) {
      all_reaped_at = now;
    } else if (now - all_reaped_at > kDrainTime) {
      CloseAllPipes();
    }
  }
  for (const Child& c : children_) SweepOrphans(c.process.pid);  // anything that closed its pipes and lived on
}

}  // namespace dtrain::launcher
