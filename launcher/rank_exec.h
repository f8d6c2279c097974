#pragma once
// `dtrain rank-exec PROGRAM [ARGS...]`: what mpirun starts for each rank under `dtrain launch`.
//
// Why: the launcher names the rank that failed first from mpirun's closing report ("Process name:
// [[J,1],R] / Exit code: C"), and Open MPI 4.1 leaves that report out when the job's state changes
// under it while the other ranks are torn down (seen about once in ten runs on a loaded 2-core
// machine). The rank's own supervisor knows its end for certain, so it says so.
//
// Contract:
//   - Runs PROGRAM as a child (execvp, same environment, same process group) and waits for it. PROGRAM starts
//     with SIGUSR1 blocked (on top of the mask mpirun gave): a checkpoint request sent while the worker starts
//     stays pending until its handler is in (runtime/checkpoint/preemption.h InstallEarly unblocks it), where it
//     used to end the worker by SIGUSR1's default action, which an elastic launch took for a lost host.
//   - SIGTERM, SIGINT, SIGHUP, SIGQUIT, SIGUSR1 and SIGUSR2 received meanwhile are passed on to the
//     child. mpirun signals a rank's whole process group and the launcher every process of the job,
//     so PROGRAM may get such a signal twice; dtrain's handlers only set a flag (runtime/checkpoint/preemption.h).
//   - When PROGRAM ends other than with exit code 0, writes one line to stderr, which mpirun's
//     --tag-output gives the rank: kRankExitPrefix + RankExit::Describe() + " at " + the Unix time it ended
//     (microseconds), e.g. "dtrain rank-exec: exit code 5 at 1764716400.123456", "dtrain rank-exec: signal 9
//     (Killed) at 1764716400.125000". The launcher names the rank that ended first by that time as the root
//     cause (launcher/output_router.h).
//   - Then ends the same way: the same exit code, or the same signal (without a second core dump),
//     so mpirun and the exit-code contract (launcher/exit_codes.h) see what they saw before.
//   - PROGRAM that cannot be started: a line naming it and the errno text, then exit code 127.
//   - The child gets SIGKILL if rank-exec itself dies (PR_SET_PDEATHSIG): no rank outlives its slot.
// srun needs none of this: slurmstepd reports every task's end itself.

#include <string>
#include <vector>

namespace dtrain::launcher {

constexpr char kRankExitPrefix[] = "dtrain rank-exec: ";

// Runs `args` (PROGRAM first) as described above; returns only the exit code to end with (a
// signal death is re-raised before returning).
int RunRankExec(const std::vector<std::string>& args);

}  // namespace dtrain::launcher
