#pragma once
// Preemption: SIGTERM and SIGUSR1 (Slurm `--signal=USR1@90`, a spot-termination notice forwarded by
// `dtrain launch`) ask the worker to checkpoint and exit with the "preempted, requeue me" code 75.
//
// The signal handler only stores the signal number in a lock-free atomic (async-signal-safe); the
// trainer polls Requested() at every step boundary and the ranks agree on it with a one-element MAX
// all-reduce (runtime/train/trainer.cc), so every rank stops after the same step, rank 0 saves, and all
// exit 75. The flag is process-wide by nature (signals are): the one piece of global state in the
// runtime, set only by the handler and by Raise() (tests, a metadata watcher).

namespace dtrain::runtime {

class Preemption {
 public:
  // Installs the handlers for SIGTERM and SIGUSR1 (idempotent). Restores nothing: the worker keeps
  // them until it exits.
  static void InstallHandlers();
  // The signal received (SIGTERM, SIGUSR1, or the value given to Raise()), 0 when none.
  static int Requested();
  static void Raise(int signal);
  static void Clear();  // for tests
};

}  // namespace dtrain::runtime
