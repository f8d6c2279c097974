#pragma once
// Turns LaunchOptions into the exact process-manager command `dtrain launch` runs.
//
// mpirun (Open MPI 4.1; also for one node):
//   mpirun -np T --host a:4,b:4 --map-by slot --bind-to none --tag-output
//          -x MASTER_ADDR -x MASTER_PORT -x DTRAIN_RESTART_COUNT [-x NCCL_* -x DTRAIN_* ...]
//          [--mpirun-arg ...] DTRAIN rank-exec WORKER train CONFIG [--set k=v ...]
//   - DTRAIN (this binary) rank-exec runs each rank and writes one tagged line when it ends other
//     than with 0: the launcher's record of which rank failed first when mpirun's own report is
//     missing (launcher/rank_exec.h).
//   - Placement is always passed as --host with explicit slot counts (a hostfile is parsed and
//     validated here, so --nnodes/--nproc-per-node apply to it too). With explicit slots and
//     --map-by slot, rank r runs on the host whose slot range holds r: that is how the launcher
//     names the host of a failing rank that mpirun reports without one. One node: --host localhost:N.
//   - No --oversubscribe: the explicit slot counts already allow N processes per host whatever the
//     core count; add it with `--mpirun-arg --oversubscribe` (CI sets OMPI_MCA_rmaps_base_oversubscribe).
//   - --bind-to none: each worker picks its GPU (and CPU affinity) itself by local rank.
//   - --tag-output: every line arrives as "[job,rank]<stdout>:text", the per-line rank the output
//     router relies on.
//   - As root (uid 0), OMPI_ALLOW_RUN_AS_ROOT=1 and OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 are added to
//     mpirun's environment (unless already set): containers on GPU clouds commonly run as root.
// srun (Slurm; when SLURM_JOB_ID is set under --backend auto):
//   srun --mpi=pmix --label --unbuffered --kill-on-bad-exit=1 [--nodes=N] [--nodelist=a,b]
//        [--ntasks-per-node=N --ntasks=T] [--mpirun-arg ...] WORKER train CONFIG [--set ...]
//   --nodelist only from LaunchOptions::srun_nodelist (the elastic launcher's surviving nodes; with an explicit
//   per-node count the placement is then known: those nodes in that order, N ranks each).
//   Counts not given on the command line come from the allocation; with --nproc-per-node,
//   --ntasks is its product with --nnodes or else the allocation's SLURM_JOB_NUM_NODES (srun ignores
//   a --ntasks-per-node that disagrees with the allocation's task count). srun exports the whole
//   environment, so no -x list is needed.
// Per-node start (--node-rank R --nnodes N --master-addr H [--master-port P]; backend kNode): no process
//   manager; argv is `WORKER train CONFIG [--set ...]`, which the launcher starts --nproc-per-node times on this
//   node itself (launcher/node_workers.h) with RANK = R*nproc + i and LOCAL_RANK = i added per worker to
//   env_set's MASTER_ADDR=H, MASTER_PORT=P, WORLD_SIZE=N*nproc, LOCAL_WORLD_SIZE=nproc, NODE_RANK=R (every node
//   must give the same --nproc-per-node). Placement: N hosts "node-K", this one named by its hostname.
// Environment added for the workers (printed by --dry-run in front of the command): MASTER_ADDR
// (first host; the local host under srun; kept when already set), MASTER_PORT (kept or 29500),
// DTRAIN_RESTART_COUNT (0 on the first attempt, n on the n-th restart).

#include <string>
#include <utility>
#include <vector>

#include "core/status.h"
#include "launcher/hostfile.h"
#include "launcher/launch_options.h"

namespace dtrain::launcher {

// Facts about the machine and environment the command depends on; gathered by
// ProbeLaunchEnv, or written by tests.
struct LaunchEnv {
  int gpu_count = 0;
  int cpu_count = 0;  // CPU cores this process may run on (its affinity mask)
  bool is_root = false;
  bool in_slurm = false;                                  // SLURM_JOB_ID is set
  std::string hostname;                                   // short name of this host
  std::string self_bin;                                   // this binary (/proc/self/exe): runs rank-exec
  std::string worker_bin;                                 // DTRAIN_WORKER_BIN, else self_bin
  std::vector<std::pair<std::string, std::string>> vars;  // the launcher's environment
};

// Fills `out` from this process (CUDA device count, CPU cores, uid, env).
Status ProbeLaunchEnv(LaunchEnv* out);

// Where ranks run: hosts in rank order, each with its process count. Empty under srun when the
// allocation decides the counts.
struct Placement {
  std::vector<HostSlots> hosts;
  int world_size() const;
  // Host of `rank` (slot ranges in host order); "" when unknown.
  std::string HostOfRank(int rank) const;
};

struct LaunchCommand {
  Backend backend = Backend::kMpirun;                        // resolved: kMpirun or kSrun
  std::vector<std::string> argv;                             // argv[0] is "mpirun" or "srun" (looked up in PATH)
  std::vector<std::pair<std::string, std::string>> env_set;  // set on top of the launcher's environment
  Placement placement;                                       // host names as users see them
  std::vector<std::string> ssh_hosts;  // remote hosts mpirun reaches with plain ssh (none with a custom agent)
  // Per-node start only (kNode): this node's index, its first global rank and its worker count.
  int node_rank = -1;
  int first_rank = 0;
  int local_nproc = 0;
};

// --nproc-per-node resolved on this machine (gpu: the visible GPUs; cpu: 2; auto: GPUs if any, else 2);
// *slots_override tells whether the count replaces the hosts' own slot counts. InvalidArgument for gpu without a GPU.
Status ResolveNproc(const LaunchOptions& opts, const LaunchEnv& env, int* nproc, bool* slots_override);

// Builds the command of attempt `restart_count` (exported as DTRAIN_RESTART_COUNT). Reads the
// hostfile if one is given. InvalidArgument/NotFound for bad combinations (named by flag).
Status BuildLaunchCommand(const LaunchOptions& opts, const LaunchEnv& env, int restart_count, LaunchCommand* out);

// The ranks `cmd` starts on this machine: this node's per-node workers, or all of mpirun's implicit localhost's; 0 when
// hosts are named (their slots are theirs to check).
int LocalRanks(const LaunchOptions& opts, const LaunchCommand& cmd);

// "K=V ... mpirun -np 2 ..." with shell quoting where needed: the line --dry-run prints.
std::string FormatCommandLine(const LaunchCommand& cmd);

// `s` as a POSIX shell reads it back as one word: as it is when every character is safe (letters, digits and
// _-./:=,@%+), else in single quotes.
std::string ShellQuote(const std::string& s);

}  // namespace dtrain::launcher
