#pragma once
// DistEnv: who this worker is in the job, read from the environment its launcher set.
//
// Sources, first match wins:
//   "torchrun" RANK, WORLD_SIZE (both required once either is set), LOCAL_RANK, LOCAL_WORLD_SIZE,
//              NODE_RANK, MASTER_ADDR, MASTER_PORT — what `dtrain launch` and torchrun export.
//              Missing LOCAL_RANK / LOCAL_WORLD_SIZE / NODE_RANK mean one node (RANK, WORLD_SIZE, 0).
//   "ompi"     OMPI_COMM_WORLD_RANK/SIZE/LOCAL_RANK/LOCAL_SIZE (mpirun). Open MPI has no node-index
//              variable (OMPI_COMM_WORLD_NODE_RANK is a per-node process rank across jobs, not a node
//              number), so node_rank = NODE_RANK if set, else rank / local_world_size (by-slot
//              mapping, Open MPI's default).
//   "slurm"    SLURM_PROCID, SLURM_NTASKS, SLURM_LOCALID, SLURM_NODEID (srun); local_world_size from
//              SLURM_STEP_TASKS_PER_NODE or SLURM_TASKS_PER_NODE ("4(x2),3" form, indexed by node), else
//              SLURM_NTASKS_PER_NODE. Only a task of a job step (SLURM_STEP_ID set) is one: the batch
//              script of `sbatch -n N` also holds SLURM_PROCID=0 and SLURM_NTASKS=N (but no
//              SLURM_STEP_ID), and a worker started there directly would wait for N-1 peers that never
//              come; with N > 1 that is InvalidArgument saying to start workers with srun or `dtrain
//              launch`, with N = 1 it is "single". Maps without SLURM_JOB_ID are taken as tasks.
//   "single"   none of the above: rank 0 of 1.
// For every source: MASTER_ADDR (default "127.0.0.1"), MASTER_PORT (default 29500) and
// DTRAIN_RESTART_COUNT (default 0, the launcher's restart number) and SLURM_RESTART_COUNT (default 0,
// how often Slurm requeued the job) are read when set.
//
// Malformed or inconsistent values (RANK=abc, RANK >= WORLD_SIZE, negatives, a port outside
// 1..65535) give InvalidArgument naming the variable and its value. Pure functions; thread-safe.

#include <map>
#include <string>

#include "core/status.h"

namespace dtrain::comm {

struct DistEnv {
  int rank = 0;
  int world_size = 1;
  int local_rank = 0;
  int local_world_size = 1;
  int node_rank = 0;
  std::string master_addr = "127.0.0.1";
  int master_port = 29500;
  int restart_count = 0;          // DTRAIN_RESTART_COUNT: restarts by `dtrain launch` within this job run
  int requeue_count = 0;          // SLURM_RESTART_COUNT: requeues of the Slurm job (each starts the launcher afresh)
  bool launched = false;          // DTRAIN_RESTART_COUNT is set: `dtrain launch` started this worker
  bool slurm_job = false;         // SLURM_JOB_ID is set: this worker runs inside a Slurm job
  std::string source = "single";  // "torchrun" | "ompi" | "slurm" | "single"
};

// From this process's environment (environ).
Status DetectDistEnv(DistEnv* out);
// From an explicit variable map (for tests and for the launcher composing a child's environment).
Status DetectDistEnvFrom(const std::map<std::string, std::string>& env, DistEnv* out);

}  // namespace dtrain::comm
