#pragma once
// Supervisor: runs one attempt of the process-manager command (mpirun or srun) and watches it, on the one child-set
// loop of the launcher (launcher/child_set.h; steps 4-5 below are its StopEscalation and its sweep).
//
// Process tree and cleanup, in order:
//  1. The launcher makes itself a child subreaper (PR_SET_CHILD_SUBREAPER, for the lifetime of a
//     SupervisorScope): a worker orphaned by a dying mpirun is re-parented to the launcher, not init.
//  2. mpirun runs in a new session (setsid; so its pgid and sid are its pid) with
//     PR_SET_PDEATHSIG=SIGTERM (if the launcher dies, mpirun still tears the job down), stdin from
//     /dev/null, stdout/stderr into pipes read by the OutputRouter.
//  3. Signals to the launcher (installed by SupervisorScope, restored after):
//     SIGUSR1 -> sent to mpirun, which forwards it to every rank (Open MPI 4.1.4 did; 4.1.6 on
//       Ubuntu 24.04 was seen not to), AND directly to every local rank of mpirun's session (its `dtrain rank-exec`
//       and below, never Open MPI's daemons, which a namespace host of this machine runs locally and SIGUSR1 would
//       kill), so local ranks get it either way (remote ranks depend on mpirun/srun forwarding). No grace timer: the
//       job keeps running so ranks can checkpoint and exit 75 themselves.
//     SIGTERM -> SIGTERM directly to the local ranks and SIGUSR1 through mpirun to all (the ranks
//       checkpoint and exit 75); if the job still runs after the grace period, step 4 stops it.
//       The launcher then returns 75 when the root-cause rank exited 75, else 128+15.
//     SIGINT -> SIGTERM to mpirun, which stops the job: SIGTERM to every rank, SIGKILL
//       about a second later (odls_base_sigkill_timeout); the ranks' exit codes are lost on this
//       path (mpirun exits 1), so the launcher returns 128+signal. A second SIGINT/SIGTERM skips
//       to the SIGKILL of step 4. For checkpoint-then-exit, send SIGUSR1.
//  4. When the failure report of the process manager is seen, or after SIGINT/SIGTERM, a
//     grace timer starts: if mpirun has not exited after grace seconds, SIGTERM to its process
//     group; after grace more, SIGKILL to it.
//  5. As soon as mpirun is reaped, any remaining descendant of this job — a direct child of the
//     launcher (re-parented) whose session id is mpirun's pid — gets SIGKILL and is reaped. So no
//     zombie and no orphan survives an attempt on the local node; remote orteds end their ranks
//     when mpirun's connection drops.

#include <signal.h>
#include <sys/types.h>

#include <atomic>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "core/status.h"
#include "launcher/launch_command.h"
#include "launcher/output_router.h"

namespace dtrain::launcher {

// Installs the signal handlers and the subreaper flag; restores both on destruction. One at a
// time per process (the handlers write to a process-wide pipe: signals are process-wide).
class SupervisorScope {
 public:
  static Status Create(std::unique_ptr<SupervisorScope>* out);
  ~SupervisorScope();
  SupervisorScope(const SupervisorScope&) = delete;
  SupervisorScope& operator=(const SupervisorScope&) = delete;

  int signal_fd() const { return pipe_[0]; }  // readable: one byte per signal received (0: RequestStop)
  // Asks the running attempt to stop, from any thread (the elastic launcher's host watch, when a host stopped
  // answering): RunAttempt stops the job as after SIGINT (SIGTERM to mpirun, then the grace escalation of step 4)
  // and sets AttemptResult::stop_requested instead of stop_signal.
  void RequestStop();
  // True once per RequestStop() since the last call (RunAttempt's; it clears a request left from before it starts).
  bool ConsumeStopRequest() { return stop_requested_.exchange(false); }

 private:
  SupervisorScope() = default;
  static constexpr int kNumSignals = 4;  // SIGINT, SIGTERM, SIGUSR1 caught; SIGPIPE ignored
  int pipe_[2] = {-1, -1};
  struct sigaction old_actions_[kNumSignals] = {};
  int old_subreaper_ = 0;
  bool installed_ = false;
  std::atomic<bool> stop_requested_{false};
};

struct AttemptResult {
  int exit_code = 0;            // the process manager's: its exit status, or 128+signal
  int stop_signal = 0;          // SIGINT/SIGTERM received by the launcher during the attempt, else 0
  bool escalated = false;       // the launcher had to SIGTERM/SIGKILL the process group
  bool stop_requested = false;  // SupervisorScope::RequestStop() stopped it
};

// Runs `cmd` to completion, feeding its output to `router`. Returns non-OK only when mpirun could
// not be started at all (fork/pipe failure); an exec failure is exit code 127.
Status RunAttempt(const LaunchCommand& cmd, int grace_seconds, SupervisorScope* scope, OutputRouter* router,
                  AttemptResult* result);

// --- Process helpers, shared with the per-node runner (launcher/node_workers.h) ---------------------

// A child started in a session of its own (its pid is its session and process group id), stdin from
// /dev/null, stdout/stderr into pipes (the caller closes the read ends).
struct SessionChild {
  pid_t pid = -1;
  int out_fd = -1;
  int err_fd = -1;
};
// Starts `args` (args[0] looked up in PATH) with this process's environment plus `env_set` (replacing
// variables of the same name); the child gets `parent_death_signal` if the launcher dies. Signal handlers are
// reset and the mask cleared in the child; with `hold_sigusr1` (a dtrain worker, started without rank-exec) the
// child starts with SIGUSR1 blocked, so a checkpoint request sent while it starts stays pending until its
// handler is in (runtime/checkpoint/preemption.h InstallEarly). An exec failure is the child's exit code 127.
Status SpawnSession(const std::vector<std::string>& args,
                    const std::vector<std::pair<std::string, std::string>>& env_set, int parent_death_signal,
                    SessionChild* child, bool hold_sigusr1 = false);
// Sends `sig` to every live process of session `sid` except its leader; with `ranks_only`, only to the ranks'
// `dtrain rank-exec` parents and their descendants, not to Open MPI's daemons. Returns how many got it.
int SignalSession(pid_t sid, int sig, bool ranks_only = false);
// SIGKILLs and reaps every process of session `sid` re-parented to this (subreaper) process.
void SweepOrphans(pid_t sid);
// Exit status of waitpid -> the shell's exit code (128+S for a signal).
int ExitCodeOfWaitStatus(int wait_status);

}  // namespace dtrain::launcher
