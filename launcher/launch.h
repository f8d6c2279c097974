#pragma once
// `dtrain launch`: the process launcher and supervisor.
//
// Decision (docs/architecture.md, "Process model"): `dtrain launch` composes and supervises an
// `mpirun` command (Open MPI 4.1; on one node too), or `srun --mpi=pmix` inside a Slurm allocation
// (SLURM_JOB_ID set). dtrain does not grow its own process manager: Open MPI and Slurm start the
// processes on every host and give them one MPI world (used to share the ncclUniqueId and for the
// CPU path). What the launcher adds is torchrun-style flags, per-rank log handling, root-cause
// reporting, the restart loop and the preempted exit code.
//
// Workers are `WORKER train CONFIG [--set k=v ...]` where WORKER is this binary (/proc/self/exe),
// or $DTRAIN_WORKER_BIN (tests); under mpirun each runs below this binary's `rank-exec`
// (launcher/rank_exec.h), which reports how the rank ended. They learn their rank from
// OMPI_COMM_WORLD_* / SLURM_* and get MASTER_ADDR, MASTER_PORT, DTRAIN_RESTART_COUNT from the
// launcher (launcher/launch_command.h).
//
// One attempt = one mpirun run (launcher/supervisor.h: process tree, signals, cleanup), run by the launch backend
// (launcher/launch_backend.h) inside the restart loop (launcher/attempt_loop.h). When it
// fails, the launcher reports the root cause — the first failing rank as the process manager
// observed it (else as its rank-exec reported it), that rank's host, its exit code or signal,
// and its last 10 lines of output (launcher/output_router.h) — and then:
//   - exit code 75 (kExitPreempted) or 2 (kExitUsage): returned as is, never restarted;
//   - SIGINT/SIGTERM received by the launcher: no restart; returns 75 if the root cause exited
//     75, else 128+signal;
//   - otherwise, with attempts left (--max-restarts K), restarts the whole job with
//     DTRAIN_RESTART_COUNT=n (workers resume from their latest checkpoint);
//   - else returns the root-cause rank's code (128+S for a signal; the process manager's own code
//     when no rank was named).
// Exit codes: launcher/exit_codes.h.

#include <functional>
#include <string>
#include <vector>

#include "core/status.h"
#include "launcher/launch_command.h"
#include "launcher/launch_options.h"

namespace dtrain::launcher {

// The run's own check before any rank starts, made when the workers are this binary: the config and its data at
// the job's world size, the memory plan (launcher/cli/launch_check.h, over the training runtime; this library does
// not depend on it). OK, or every problem; sets *on_cuda (whether the ranks train on CUDA) and *memory_plan (the
// plan's description, "" when the model has none).
using PreStartCheck = std::function<Status(const LaunchOptions& opts, const LaunchEnv& env, const LaunchCommand& cmd,
                                           bool* on_cuda, std::string* memory_plan)>;

// Runs `dtrain launch` with parsed options; returns the process exit code. The launcher's own errors are one
// line on stderr and the code ExitCodeFor (launcher/exit_codes.h) gives every command's Status; a failed `check`
// (null: none) exits as `dtrain train` would on the same error.
int LaunchWith(const LaunchOptions& opts, const PreStartCheck& check);

// Parses the arguments after "launch" (launcher/launch_options.h), then as above; --help prints the
// help to stdout (exit 0), a parse error one `dtrain launch: error: ...` line to stderr (exit 2).
int RunLaunch(const std::vector<std::string>& args, const PreStartCheck& check);

}  // namespace dtrain::launcher
