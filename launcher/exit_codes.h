#pragma once
// Process exit codes of dtrain — one contract for `dtrain train`, `dtrain launch` and the schedulers
// around them (see docs/architecture.md, "Exit codes").
//
//   0    done: training reached its end.
//   1    failure without a more specific code (an error Status in a worker or in the launcher).
//   2    usage or configuration error: bad flag, bad hostfile, bad config. Restarting cannot help, so
//        `dtrain launch --max-restarts` never restarts on it.
//   75   preempted: a preemption signal (SIGUSR1, e.g. Slurm `--signal=USR1@90`) was handled and a
//        checkpoint was saved; requeue the job with the same command to resume. Value of sysexits'
//        EX_TEMPFAIL. Passed through by the launcher WITHOUT restarting: the scheduler requeues.
//   128+S a worker (the root-cause rank) or the launcher itself was ended by signal S (137 = SIGKILL,
//        143 = SIGTERM), the shell convention.
//   other the root-cause rank's own exit code, passed through by `dtrain launch`.
//
// ExitCodeFor below is the one place a Status becomes one of these codes: every command of launcher/cli/cli.cc and
// every error of `dtrain launch` itself (launcher/attempt_outcome.h) go through it.

#include "core/status.h"

namespace dtrain::launcher {

constexpr int kExitOk = 0;
constexpr int kExitFailure = 1;
constexpr int kExitUsage = 2;
constexpr int kExitPreempted = 75;  // EX_TEMPFAIL: "preempted, checkpoint saved, requeue me"
constexpr int kExitSignalBase = 128;

// The exit code a shell reports for a process ended by `signal`.
constexpr int ExitCodeForSignal(int signal) { return kExitSignalBase + signal; }

// The exit code of a command that ended with `st`: 0 for OK; kExitUsage for bad input that a restart would not fix
// (InvalidArgument, NotFound, DataLoss); kExitPreempted for Preempted; else kExitFailure. Prints nothing.
int ExitCodeFor(const Status& st);

}  // namespace dtrain::launcher
