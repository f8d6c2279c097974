#pragma once
// The elastic launch inside a Slurm allocation (`dtrain launch --nnodes MIN:MAX` under sbatch/salloc, no
// --hosts/--hostfile, backend srun or auto): a restart policy (launcher/restart_policy.h) for the one attempt loop
// (launcher/attempt_loop.h) with the srun backend (launcher/launch_backend.h); one srun job step per attempt on the
// allocation's usable nodes, the batch re-planned for its world size exactly as over mpirun (launcher/elastic_plan.h:
// the global batch kept by gradient accumulation by default, the data position exact).
//
// What elasticity means here. Slurm owns the nodes: a job keeps the nodes it was given and can only lose them.
//   shrink  A node of the step is lost (its slurmd stops answering, or an admin or the cloud plugin sets it DOWN):
//           with the allocation's --no-kill Slurm keeps the job, ends the step ("srun: error: Node failure on n3")
//           and takes the node out of the job. The launcher then re-runs the step from the newest checkpoint on the
//           nodes the job still has (`srun --nodes=K --nodelist=...`), not counted against --max-restarts; with fewer
//           than MIN left it stops with exit 1. Without --no-kill Slurm ends the whole job instead (the launcher
//           with it): the batch script's requeue is then the only way on.
//   grow    Slurm gives no node back to a running job. A job that runs on fewer than MAX nodes gets its full size
//           again by requeueing: SIGUSR1 (`scancel --signal=USR1 --batch JOB`, or the time-limit signal) makes the
//           step checkpoint and exit 75, the launcher exits 75, and examples/slurm/train.sbatch requeues itself;
//           the next run starts on a fresh allocation of MAX nodes and resumes at the larger world size.
// An attempt that fails with every node still in the job is an ordinary failure (counted against --max-restarts).
//
// The allocation's nodes are read from Slurm itself (`squeue -j $SLURM_JOB_ID -o %N`, expanded by `scontrol show
// hostnames`) before each attempt. Per node, --nproc-per-node ranks (default: the allocation's SLURM_NTASKS_PER_NODE,
// else GPUs if any, else 2). Each attempt is recorded in <run.dir>/elastic.jsonl (launcher/attempt_log.h).

#include "launcher/launch_command.h"
#include "launcher/launch_options.h"

namespace dtrain::launcher {

// Runs the elastic job inside the allocation of SLURM_JOB_ID to its end; returns the launcher's exit code.
int SuperviseSlurmElastic(const LaunchOptions& opts, const LaunchEnv& env);

}  // namespace dtrain::launcher
