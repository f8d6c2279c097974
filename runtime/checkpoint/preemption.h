#pragma once
// Preemption: SIGTERM and SIGUSR1 (Slurm `--signal=USR1@90`, a spot-termination notice forwarded by
// `dtrain launch`, the elastic launcher's grow request) ask the worker to checkpoint and exit with the
// "preempted, requeue me" code 75. So does SIGINT: Ctrl-C on `dtrain train` started by hand (`dtrain launch` answers
// its own SIGINT by stopping the job, launcher/supervisor.h; its workers run in sessions of their own, away from the
// terminal's Ctrl-C).
//
// A second SIGINT while a stop is under way (still in the step, or saving) ends the process at once by SIGINT (exit
// 130), as a second SIGINT/SIGTERM to `dtrain launch` kills its workers at once (launcher/stop_escalation.h). That
// cannot corrupt a checkpoint: a save writes its manifest last and moves `latest` after it (runtime/checkpoint/
// checkpoint.h), so the interrupted save is no checkpoint and the one before it stays the newest. A repeated SIGTERM
// or SIGUSR1 only asks again: schedulers (Slurm's KillWait, the launcher's grace period) send SIGTERM more than once
// and follow with SIGKILL when they mean it, and the save should have that time.
//
// The signal handler only stores the signal number in a lock-free atomic (async-signal-safe); the
// trainer polls Requested() at every step boundary and the ranks agree on it with a one-element MAX
// all-reduce (runtime/train/trainer.cc), so every rank stops after the same step, rank 0 saves, and all
// exit 75. The flag is process-wide by nature (signals are): the one piece of global state in the
// runtime, set only by the handler and by Raise() (tests, a metadata watcher).
//
// Two installs, because a worker's start (MPI wire-up, the device, the data, the store's preflight) can take
// seconds under load and the launcher may ask for a checkpoint during it:
//   1. InstallEarly(), first thing in the worker (runtime/train/worker.cc RunWorker): SIGUSR1 only. A checkpoint
//      request during the start is remembered and acted on at the first step boundary; it no longer kills the
//      worker (which the elastic launcher would count as a lost host). SIGTERM keeps its default action: a worker
//      stopped before it has trained a step has nothing to save, and a teardown after a peer's failure must not
//      wait on a rank still blocked in its start-up (waiting for that peer).
//      A run without checkpoints never reads the flag: it calls UndoEarly() once its config is known.
//      The worker's parent closes the window before it: `dtrain rank-exec` (mpirun) and the per-node launcher start
//      the worker with SIGUSR1 blocked, so a request that arrives while it execs, links and parses its config stays
//      pending; InstallEarly unblocks SIGUSR1 once its handler is in, and the pending request lands there.
//   2. InstallHandlers(), once the checkpoint store is open (runtime/train/checkpoint_coordinator.cc): SIGTERM,
//      SIGUSR1 and SIGINT. Before it, SIGINT and SIGTERM keep their default action (nothing to save yet).

namespace dtrain::runtime {

class Preemption {
 public:
  // Installs the handler for SIGUSR1, then unblocks SIGUSR1 in the calling thread (step 1 above; idempotent).
  // Call it from the main thread.
  static void InstallEarly();
  // Undoes InstallEarly for a run that will never read the flag: SIGUSR1 gets its default action back, and one
  // that arrived since InstallEarly is delivered again (raise), so the process ends by it as it would have
  // without InstallEarly. Call it before InstallHandlers, from the main thread.
  static void UndoEarly();
  // Installs the handlers for SIGTERM, SIGUSR1 and SIGINT (idempotent). Restores nothing: the worker keeps
  // them until it exits.
  static void InstallHandlers();
  // The signal received (SIGTERM, SIGUSR1, SIGINT, or the value given to Raise()), 0 when none.
  static int Requested();
  static void Raise(int signal);
  static void Clear();  // for tests
};

}  // namespace dtrain::runtime
