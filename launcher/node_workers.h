#pragma once
// RunNodeAttempt: one attempt of a per-node start (`dtrain launch --node-rank R`): this node's workers, started
// and watched by the launcher itself — no mpirun, ssh or Slurm (the workers bootstrap over TCP,
// comm/tcp_bootstrap.h).
//
// What it does, in order:
//  1. Starts cmd.local_nproc workers, each `cmd.argv` in a session of its own with cmd.env_set plus
//     RANK = cmd.first_rank + i and LOCAL_RANK = i, stdout/stderr into pipes fed to the router per rank
//     (OutputRouter::FeedRank); a worker gets SIGKILL if the launcher dies (no supervisor would be left).
//  2. The first worker that ends other than with 0 is the root cause: `link` tells the other nodes
//     (NodeLink::ReportFailure), and unless it exited 75 (preempted: the others are saving and exiting 75 too)
//     the other local workers get SIGTERM at once.
//  3. A stop from another node (NodeLink::stopped) does the same to every local worker; the attempt then ends
//     with the code that stop carries.
//  4. Signals to the launcher (SupervisorScope): SIGUSR1 is passed to every worker; SIGTERM and SIGINT are passed
//     on as SIGTERM (dtrain workers checkpoint and exit 75); a second one kills at once.
//  5. After 2-4, workers still running after grace_seconds get SIGTERM again, after grace more SIGKILL;
//     whatever a worker started is swept when it is reaped (launcher/supervisor.h).
//  6. All workers ended with 0: NodeLink::ReportDone.
// The loop that watches the workers is ChildSet (launcher/child_set.h), with the stop escalation of
// launcher/stop_escalation.h; the restarts are the attempt loop's (launcher/attempt_loop.h, the per-node backend of
// launcher/launch_backend.h).

#include "core/status.h"
#include "launcher/launch_command.h"
#include "launcher/node_link.h"
#include "launcher/output_router.h"
#include "launcher/supervisor.h"

namespace dtrain::launcher {

struct NodeAttemptResult {
  int exit_code = 0;    // 0; else the root cause's code: a local worker's, or the remote stop's
  int stop_signal = 0;  // SIGINT/SIGTERM received by the launcher, else 0
  RankExit cause;       // the first local worker that failed (rank -1: none)
  NodeStop remote;      // node >= 0 when another node's stop (or its loss) ended the attempt first
};

// Steps 1-6 above. `link` may be null (one node). Returns non-OK only when a worker could not be started
// (fork/pipe failure; the ones already started are killed); an exec failure is that worker's exit code 127.
Status RunNodeAttempt(const LaunchCommand& cmd, int grace_seconds, const std::string& hostname, SupervisorScope* scope,
                      OutputRouter* router, NodeLink* link, NodeAttemptResult* result);

}  // namespace dtrain::launcher
