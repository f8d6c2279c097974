#include "launcher/supervisor.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "core/check.h"
#include "core/logging.h"
#include "launcher/child_set.h"
#include "launcher/exit_codes.h"

extern char** environ;

namespace dtrain::launcher {
namespace {

using Clock = std::chrono::steady_clock;

constexpr int kSignals[] = {SIGINT, SIGTERM, SIGUSR1, SIGPIPE};
// The byte SupervisorScope::RequestStop() writes to the self-pipe (no signal has number 0).
constexpr unsigned char kStopRequest = 0;

// The write end of the self-pipe. The only mutable global of the launcher: a signal handler has
// no other way to reach the supervising loop.
int g_signal_pipe_write = -1;

void OnSignal(int sig) {
  const int saved = errno;
  const unsigned char byte = static_cast<unsigned char>(sig);
  if (write(g_signal_pipe_write, &byte, 1) < 0) {
    // Pipe full: signals are already pending, the loop will act on those.
  }
  errno = saved;
}

const char* SignalName(int sig) {
  switch (sig) {
    case SIGINT:
      return "SIGINT";
    case SIGTERM:
      return "SIGTERM";
    case SIGUSR1:
      return "SIGUSR1";
    default:
      return strsignal(sig);
  }
}

Status Errno(const std::string& what) { return Status::Internal(what + ": " + std::strerror(errno)); }

std::string ReadFileText(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

struct Orphan {
  pid_t pid;
  bool zombie;
};

// Direct children of this process in session `sid`: the job's processes re-parented to the
// launcher (subreaper), including zombies (mpirun does not always reap the ranks it killed).
std::vector<Orphan> OrphansOfSession(pid_t sid) {
  std::vector<Orphan> out;
  DIR* dir = opendir("/proc");
  if (dir == nullptr) return out;
  const pid_t self = getpid();
  while (dirent* e = readdir(dir)) {
    if (e->d_name[0] < '0' || e->d_name[0] > '9') continue;
    std::ifstream in(std::string("/proc/") + e->d_name + "/stat");
    std::string stat;
    if (!std::getline(in, stat)) continue;
    const auto paren = stat.rfind(')');  // the command name may contain spaces
    if (paren == std::string::npos) continue;
    char state = 0;
    int ppid = 0, pgrp = 0, session = 0;
    if (std::sscanf(stat.c_str() + paren + 1, " %c %d %d %d", &state, &ppid, &pgrp, &session) != 4) continue;
    if (ppid == self && session == sid) out.push_back({static_cast<pid_t>(std::atoi(e->d_name)), state == 'Z'});
  }
  closedir(dir);
  return out;
}

}  // namespace

// Sends `sig` to processes of session `sid` on this node except its leader (mpirun): the local ranks
// (ranks_only: their rank-exec parents, which pass it on). Delivers SIGUSR1 even where the process manager does not
// forward it (seen: Open MPI 4.1.6 on Ubuntu 24.04 did not, 4.1.4 on Debian 12 did); a rank that
// also gets mpirun's copy sees the signal twice, which its handler (a flag) does not mind.

int SignalSession(pid_t sid, int sig, bool ranks_only) {
  struct Proc {
    pid_t pid;
    pid_t ppid;
    bool rank_exec;
  };
  std::vector<Proc> procs;
  DIR* dir = opendir("/proc");
  if (dir == nullptr) return 0;
  while (dirent* e = readdir(dir)) {
    if (e->d_name[0] < '0' || e->d_name[0] > '9') continue;
    const pid_t pid = static_cast<pid_t>(std::atoi(e->d_name));
    std::ifstream in(std::string("/proc/") + e->d_name + "/stat");
    std::string stat;
    if (pid == sid || !std::getline(in, stat)) continue;
    const auto paren = stat.rfind(')');
    if (paren == std::string::npos) continue;
    char state = 0;
    int ppid = 0, pgrp = 0, session = 0;
    if (std::sscanf(stat.c_str() + paren + 1, " %c %d %d %d", &state, &ppid, &pgrp, &session) != 4) continue;
    if (session != sid || state == 'Z') continue;
    // argv[1] == "rank-exec": a rank's own parent (launcher/rank_exec.h).
    const std::string cmdline = ReadFileText("/proc/" + std::string(e->d_name) + "/cmdline");
    const auto first = cmdline.find('\0');
    const bool rank_exec =
        first != std::string::npos && cmdline.compare(first + 1, 10, std::string("rank-exec\0", 10)) == 0;
    procs.push_back({pid, static_cast<pid_t>(ppid), rank_exec});
  }
  closedir(dir);
  // ranks_only: the rank-exec processes and everything below them (the ranks and what they started), never
  // Open MPI's daemons or launch agents: an orted started on this machine (a namespace host) dies of SIGUSR1.
  std::vector<pid_t> chosen;
  for (const Proc& p : procs) {
    if (!ranks_only || p.rank_exec) chosen.push_back(p.pid);
  }
  for (size_t grew = 1; ranks_only && grew > 0;) {
    grew = 0;
    for (const Proc& p : procs) {
      const bool in = std::find(chosen.begin(), chosen.end(), p.pid) != chosen.end();
      if (!in && std::find(chosen.begin(), chosen.end(), p.ppid) != chosen.end()) {
        chosen.push_back(p.pid);
        ++grew;
      }
    }
  }
  int n = 0;
  for (const pid_t pid : chosen) n += kill(pid, sig) == 0 ? 1 : 0;
  return n;
}

// SIGKILLs and reaps every leftover of the job; repeats because a killed process's own children
// are re-parented to us in turn.
void SweepOrphans(pid_t sid) {
  for (int round = 0; round < 100; ++round) {
    const std::vector<Orphan> orphans = OrphansOfSession(sid);
    if (orphans.empty()) return;
    for (const Orphan& o : orphans) {
      if (o.zombie) continue;
      std::string comm;
      std::ifstream in("/proc/" + std::to_string(o.pid) + "/comm");
      std::getline(in, comm);
      DT_LOG_WARN(kLauncher, "killing leftover process {} ({}) of the job", o.pid, comm);
      kill(o.pid, SIGKILL);
    }
    for (const Orphan& o : orphans) waitpid(o.pid, nullptr, 0);
  }
}

Status SpawnSession(const std::vector<std::string>& args,
                    const std::vector<std::pair<std::string, std::string>>& env_set, int parent_death_signal,
                    SessionChild* child, bool hold_sigusr1) {
  // Everything the child needs is built before fork: only async-signal-safe calls after it.
  std::vector<std::string> env_strings;
  for (char** e = environ; e != nullptr && *e != nullptr; ++e) {
    const std::string kv(*e);
    bool overridden = false;
    for (const auto& set : env_set) overridden = overridden || kv.rfind(set.first + "=", 0) == 0;
    if (!overridden) env_strings.push_back(kv);
  }
  for (const auto& set : env_set) env_strings.push_back(set.first + "=" + set.second);
  std::vector<char*> envp, argv;
  for (auto& s : env_strings) envp.push_back(s.data());
  envp.push_back(nullptr);
  std::vector<std::string> arg_strings = args;
  for (auto& s : arg_strings) argv.push_back(s.data());
  argv.push_back(nullptr);
  const std::string exec_error = "dtrain launch: cannot execute " + args[0] + "\n";

  int out_pipe[2], err_pipe[2];
  if (pipe2(out_pipe, O_CLOEXEC) != 0) return Errno("pipe");
  if (pipe2(err_pipe, O_CLOEXEC) != 0) {
    close(out_pipe[0]);
    close(out_pipe[1]);
    return Errno("pipe");
  }
  const int devnull = open("/dev/null", O_RDONLY | O_CLOEXEC);
  const pid_t parent = getpid();
  const pid_t pid = fork();
  if (pid == 0) {
    setsid();
    prctl(PR_SET_PDEATHSIG, parent_death_signal);
    if (getppid() != parent) _exit(ExitCodeForSignal(parent_death_signal));  // the launcher died already
    sigset_t mask;
    sigemptyset(&mask);
    if (hold_sigusr1) sigaddset(&mask, SIGUSR1);
    sigprocmask(SIG_SETMASK, &mask, nullptr);
    signal(SIGPIPE, SIG_DFL);  // an ignored signal stays ignored across exec
    if (devnull >= 0) dup2(devnull, STDIN_FILENO);
    dup2(out_pipe[1], STDOUT_FILENO);
    dup2(err_pipe[1], STDERR_FILENO);
    execvpe(argv[0], argv.data(), envp.data());
    if (write(STDERR_FILENO, exec_error.data(), exec_error.size()) < 0) _exit(127);
    _exit(127);
  }
  const int fork_errno = errno;
  if (devnull >= 0) close(devnull);
  close(out_pipe[1]);
  close(err_pipe[1]);
  if (pid < 0) {
    close(out_pipe[0]);
    close(err_pipe[0]);
    errno = fork_errno;
    return Errno("fork");
  }
  child->pid = pid;
  child->out_fd = out_pipe[0];
  child->err_fd = err_pipe[0];
  return Status::OK();
}

int ExitCodeOfWaitStatus(int wait_status) {
  if (WIFEXITED(wait_status)) return WEXITSTATUS(wait_status);
  if (WIFSIGNALED(wait_status)) return ExitCodeForSignal(WTERMSIG(wait_status));
  return kExitFailure;
}

// --- SupervisorScope ---------------------------------------------------------------------------

Status SupervisorScope::Create(std::unique_ptr<SupervisorScope>* out) {
  if (g_signal_pipe_write >= 0) return Status::FailedPrecondition("a SupervisorScope is already active");
  std::unique_ptr<SupervisorScope> scope(new SupervisorScope());
  if (pipe2(scope->pipe_, O_CLOEXEC | O_NONBLOCK) != 0) return Errno("pipe");
  prctl(PR_GET_CHILD_SUBREAPER, &scope->old_subreaper_);
  if (prctl(PR_SET_CHILD_SUBREAPER, 1) != 0) return Errno("prctl(PR_SET_CHILD_SUBREAPER)");
  g_signal_pipe_write = scope->pipe_[1];
  for (int i = 0; i < kNumSignals; ++i) {
    struct sigaction sa = {};
    sa.sa_handler = kSignals[i] == SIGPIPE ? SIG_IGN : OnSignal;
    sa.sa_flags = SA_RESTART;
    sigemptyset(&sa.sa_mask);
    sigaction(kSignals[i], &sa, &scope->old_actions_[i]);
  }
  scope->installed_ = true;
  *out = std::move(scope);
  return Status::OK();
}

void SupervisorScope::RequestStop() {
  stop_requested_ = true;
  const unsigned char byte = kStopRequest;
  if (write(pipe_[1], &byte, 1) < 0) {
    // The pipe is full of unread signal bytes: the loop is behind anyway and will see them.
  }
}

SupervisorScope::~SupervisorScope() {
  if (installed_) {
    for (int i = 0; i < kNumSignals; ++i) sigaction(kSignals[i], &old_actions_[i], nullptr);
    prctl(PR_SET_CHILD_SUBREAPER, old_subreaper_);
    g_signal_pipe_write = -1;
  }
  for (int fd : pipe_) {
    if (fd >= 0) close(fd);
  }
}

// --- RunAttempt --------------------------------------------------------------------------------

namespace {

// The process manager's attempt on the child-set loop: one child (mpirun/srun), its output to the router, the
// launcher's signals handled as in steps 3-4 of supervisor.h.
class ManagerAttempt : public ChildSetPolicy {
 public:
  ManagerAttempt(const LaunchCommand& cmd, int grace_seconds, SupervisorScope* scope, OutputRouter* router,
                 AttemptResult* result)
      : cmd_(cmd), grace_seconds_(grace_seconds), scope_(scope), router_(router), result_(result) {}

  void OnOutput(size_t /*i*/, bool from_stderr, const char* data, size_t size) override {
    router_->Feed(from_stderr, data, size);
  }

  void OnSignal(int sig, ChildSet* set) override {
    if (set->reaped(0)) return;
    const pid_t pid = set->pid(0);
    StopEscalation* esc = set->escalation();
    if (sig == kStopRequest) {
      if (scope_->ConsumeStopRequest() && result_->stop_signal == 0) {
        result_->stop_requested = true;
        kill(pid, SIGTERM);
        esc->Interrupt(Clock::now());
      }
    } else if (sig == SIGUSR1) {
      // No grace timer: the ranks decide (checkpoint, then exit 75); the job may take its time.
      kill(pid, SIGUSR1);
      const int local = SignalSession(pid, SIGUSR1, /*ranks_only=*/true);
      DT_LOG_WARN(kLauncher, "SIGUSR1: forwarded to every rank ({}, and directly to {} local rank processes)",
                  cmd_.argv[0], local);
    } else if (result_->stop_signal == 0) {
      // SIGTERM (schedulers, spot shutdowns) and SIGINT (Ctrl-C) give the ranks the grace period to
      // checkpoint and exit 75 themselves (local ranks get SIGTERM directly, remote ones SIGUSR1 through
      // mpirun), then stop the job (step 4). SIGTERM to mpirun instead would be forwarded and followed by
      // its own SIGKILL within about a second: a rank still in an eval or a save lost the checkpoint.
      result_->stop_signal = sig;
      const int local = SignalSession(pid, SIGTERM, /*ranks_only=*/true);
      kill(pid, SIGUSR1);
      DT_LOG_WARN(kLauncher,
                  "{}: every rank may checkpoint and exit ({} local rank processes signalled); "
                  "the job is stopped if it still runs in {} s (a second {} stops it now)",
                  SignalName(sig), local, grace_seconds_, SignalName(sig));
      esc->Interrupt(Clock::now());
    } else {
      DT_LOG_WARN(kLauncher, "second {}: killing the job now", SignalName(sig));
      esc->KillNow(Clock::now());
    }
  }

  void OnExit(size_t /*i*/, int exit_code, int /*term_signal*/, ChildSet* /*set*/) override {
    result_->exit_code = exit_code;
  }

  void OnRound(ChildSet* set) override {
    if (router_->failure_seen()) set->escalation()->Interrupt(Clock::now());
  }

  void Escalate(StopEscalation::State state, ChildSet* set) override {
    if (state == StopEscalation::State::kTerminating) {
      DT_LOG_WARN(kLauncher, "{} did not exit {}s after the failure/signal: SIGTERM to its process group", cmd_.argv[0],
                  grace_seconds_);
      kill(-set->pid(0), SIGTERM);
    } else {
      DT_LOG_WARN(kLauncher, "{} still running: SIGKILL to its process group", cmd_.argv[0]);
      kill(-set->pid(0), SIGKILL);
    }
    result_->escalated = true;
  }

 private:
  const LaunchCommand& cmd_;
  const int grace_seconds_;
  SupervisorScope* scope_;
  OutputRouter* router_;
  AttemptResult* result_;
};

}  // namespace

Status RunAttempt(const LaunchCommand& cmd, int grace_seconds, SupervisorScope* scope, OutputRouter* router,
                  AttemptResult* result) {
  *result = AttemptResult();
  (void)scope->ConsumeStopRequest();  // one left from an attempt that ended on its own is not for this one
  SessionChild child;
  DT_RETURN_IF_ERROR(SpawnSession(cmd.argv, cmd.env_set, SIGTERM, &child));
  ManagerAttempt policy(cmd, grace_seconds, scope, router, result);
  ChildSet set({child}, std::chrono::seconds(grace_seconds));
  set.Run(scope, &policy);
  router->Finish();
  return Status::OK();
}

}  // namespace dtrain::launcher
