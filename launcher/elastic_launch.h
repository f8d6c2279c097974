#pragma once
// The elastic launch over a host list (`dtrain launch --nnodes MIN:MAX --hosts|--hostfile ...`): a restart policy
// (launcher/restart_policy.h) for the one attempt loop (launcher/attempt_loop.h) with the mpirun backend
// (launcher/launch_backend.h): one mpirun per attempt, each on the current host set, the batch re-planned for its
// world size (launcher/elastic_plan.h), the hosts watched while it runs (launcher/host_watch.h).
//
// How an attempt ends, and what comes next:
//   done       every rank exited 0: the launcher exits 0.
//   lost_host  a host stopped answering for the heartbeat bound (launcher/host_watch.h; the attempt is stopped), or
//              the root-cause rank was killed by a signal, or mpirun lost its daemon on the host, or the attempt failed
//              and a host of it no longer answers the probe: the host is dropped and the job restarts on the survivors
//              from the newest checkpoint.
//   notice     the job checkpointed and exited 75 because a host's spot watcher saw a termination notice (that
//              host's rank wrote kSpotNoticeLine, launcher/output_router.h): the host is dropped, the job restarts
//              on the survivors from the checkpoint just saved.
//   grow       a dropped or new host answers again (host_watch.h asked for the coordinated checkpoint, exit 75): the
//              job restarts on the larger set.
//   failure    anything else: counted against --max-restarts; restarted on the same hosts while restarts are left.
//   stopped    SIGINT/SIGTERM to the launcher, or a usage error, or exit 75 nobody here asked for: passed through.
// A failure, a stop on a usage error and a lost host found after a failure are followed by the failure report (the
// root-cause rank and its last lines; for a lost host after the line naming it).
// lost_host, notice and grow do not count against --max-restarts; when fewer than MIN hosts are left the job stops
// (exit 1), or with --wait-for-hosts S waits up to S s for dropped hosts to answer again (--nnodes N:N with a long
// wait: the restart-everything-on-the-same-hosts baseline of examples/spot/replay_trace.sh).
//
// Record: each attempt's end is appended to <run.dir>/elastic.jsonl on the launcher's machine (the run directory
// of the config; the same as rank 0's when the launcher runs on the first host or run.dir is shared), one JSON line
// (launcher/attempt_log.h); noticed = when the launcher learned what ended the attempt (the heartbeat bound passed,
// the grow request, else the attempt's end). `dtrain report` reads it.
//
// Under Slurm (no --hosts/--hostfile, backend srun or auto inside an allocation) the host set is the allocation's
// nodes instead: launcher/slurm_elastic.h.

#include "launcher/launch_command.h"
#include "launcher/launch_options.h"

namespace dtrain::launcher {

// Runs the elastic job to its end; returns the launcher's exit code.
int SuperviseElastic(const LaunchOptions& opts, const LaunchEnv& env);

}  // namespace dtrain::launcher
