#include "launcher/rank_exec.h"

#include <signal.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

#include "core/clock.h"
#include "launcher/exit_codes.h"
#include "launcher/output_router.h"

namespace dtrain::launcher {
namespace {

constexpr int kPassedOn[] = {SIGTERM, SIGINT, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2};

// Ends this process by `sig`, as the child ended, without writing a core file of its own.
void DieBySignal(int sig) {
  const rlimit no_core = {0, 0};
  setrlimit(RLIMIT_CORE, &no_core);
  signal(sig, SIG_DFL);
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, sig);
  sigprocmask(SIG_UNBLOCK, &set, nullptr);
  raise(sig);
}

}  // namespace

int RunRankExec(const std::vector<std::string>& args) {
  if (args.empty()) {
    std::fprintf(stderr, "%susage: dtrain rank-exec PROGRAM [ARGS...]\n", kRankExitPrefix);
    return kExitUsage;
  }
  // The signals are blocked, not handled: sigwaitinfo() takes them one at a time below, and the
  // child restores the old mask before exec, so PROGRAM starts with what mpirun gave us plus SIGUSR1 blocked.
  sigset_t waited, old_mask;
  sigemptyset(&waited);
  for (const int s : kPassedOn) sigaddset(&waited, s);
  sigaddset(&waited, SIGCHLD);
  sigprocmask(SIG_BLOCK, &waited, &old_mask);
  signal(SIGCHLD, SIG_DFL);  // an inherited SIG_IGN would reap the child before waitpid could
  const pid_t self = getpid();
  const pid_t child = fork();
  if (child < 0) {
    std::fprintf(stderr, "%scannot fork for %s: %s\n", kRankExitPrefix, args[0].c_str(), std::strerror(errno));
    return kExitFailure;
  }
  if (child == 0) {
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != self) _exit(kExitFailure);  // rank-exec died before the line above
    // The worker starts with SIGUSR1 blocked: a checkpoint request that arrives before its handler is in stays
    // pending instead of killing it (runtime/checkpoint/preemption.h InstallEarly unblocks it).
    sigset_t worker_mask = old_mask;
    sigaddset(&worker_mask, SIGUSR1);
    sigprocmask(SIG_SETMASK, &worker_mask, nullptr);
    std::vector<char*> argv;
    for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    execvp(argv[0], argv.data());
    std::fprintf(stderr, "%scannot run %s: %s\n", kRankExitPrefix, argv[0], std::strerror(errno));
    _exit(127);
  }
  int status = 0;
  for (;;) {
    const int sig = sigwaitinfo(&waited, nullptr);
    if (sig < 0) continue;  // EINTR
    if (sig != SIGCHLD) {
      kill(child, sig);
    } else {
      const pid_t r = waitpid(child, &status, WNOHANG);
      if (r == child) break;
      if (r < 0 && errno != EINTR) {  // cannot happen with SIGCHLD at SIG_DFL; never spin on it
        std::fprintf(stderr, "%swaitpid: %s\n", kRankExitPrefix, std::strerror(errno));
        return kExitFailure;
      }
    }
  }
  const double ended_at = WallSeconds();  // the root cause is the rank that ended first by this time
  RankExit end;
  if (WIFSIGNALED(status)) {
    end.signal = WTERMSIG(status);
  } else {
    end.exit_code = WEXITSTATUS(status);
  }
  if (end.ProcessExitCode() != kExitOk) {
    std::fprintf(stderr, "%s%s at %.6f\n", kRankExitPrefix, end.Describe().c_str(), ended_at);
    std::fflush(stderr);
  }
  if (end.signal > 0) DieBySignal(end.signal);
  return end.ProcessExitCode();  // also when the signal's default action does not end a process
}

}  // namespace dtrain::launcher
