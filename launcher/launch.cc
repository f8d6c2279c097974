#include "launcher/launch.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <sstream>

#include "comm/job_secret.h"
#include "core/check.h"
#include "core/device_context.h"
#include "core/logging.h"
#include "launcher/attempt_loop.h"
#include "launcher/attempt_outcome.h"
#include "launcher/elastic_launch.h"
#include "launcher/exit_codes.h"
#include "launcher/fixed_restart.h"
#include "launcher/host_probe.h"
#include "launcher/launch_backend.h"
#include "launcher/launch_command.h"
#include "launcher/launch_options.h"
#include "launcher/slurm_elastic.h"
#include "runtime/config/config.h"
#include "runtime/train/auto_sizes.h"
#include "runtime/train/memory_fit.h"
#include "runtime/train/prometheus_feed.h"
#include "runtime/train/run_check.h"

namespace dtrain::launcher {
namespace {

// --log-dir must be a directory the launcher can write, created if missing: checked before anything starts (a log
// that cannot be opened would otherwise only be warned about while the ranks run). InvalidArgument naming the flag.
Status PrepareLogDir(const std::string& dir) {
  for (size_t pos = 0; pos != std::string::npos;) {
    pos = dir.find('/', pos + 1);
    const std::string prefix = dir.substr(0, pos);
    if (!prefix.empty() && mkdir(prefix.c_str(), 0755) != 0 && errno != EEXIST) {
      return Status::InvalidArgument("--log-dir " + dir + ": cannot create '" + prefix + "': " + std::strerror(errno));
    }
  }
  const std::string probe = dir + "/.dtrain-launch-" + std::to_string(getpid());
  const int fd = open(probe.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (fd < 0) return Status::InvalidArgument("--log-dir " + dir + ": cannot write there: " + std::strerror(errno));
  close(fd);
  unlink(probe.c_str());
  return Status::OK();
}

// The ranks this launcher starts on this machine (mpirun's implicit localhost, or this node's per-node workers) must
// fit its slots: CPU cores, or GPUs when they train on CUDA; else exit 2 naming the flag, unless --oversubscribe.
// Only an explicit count is checked (gpu/cpu/auto are the documented defaults); other hosts' slots are their own
// (a hostfile's slots=, Slurm's allocation).
// The ranks this launcher starts on this machine: this node's per-node workers, or all of mpirun's implicit
// localhost's; 0 when hosts are named (their slots are theirs to check).
int LocalRanks(const LaunchOptions& opts, const LaunchCommand& cmd) {
  if (cmd.backend == Backend::kNode) return cmd.local_nproc;
  if (cmd.backend == Backend::kMpirun && opts.hosts.empty() && opts.hostfile.empty()) return cmd.placement.world_size();
  return 0;
}

Status CheckLocalSlots(const LaunchOptions& opts, const LaunchEnv& env, const LaunchCommand& cmd, bool on_cuda) {
  int requested = 0;
  if (opts.oversubscribe || !ParsePositiveInt(opts.nproc_per_node, &requested)) return Status::OK();
  const int local = LocalRanks(opts, cmd);
  const int slots = on_cuda ? env.gpu_count : env.cpu_count;
  if (slots <= 0 || local <= slots) return Status::OK();
  return Status::InvalidArgument("--nproc-per-node " + opts.nproc_per_node + ": " + std::to_string(local) +
                                 " ranks on this machine, which has " + std::to_string(slots) +
                                 (on_cuda ? " GPU(s) (the job trains on CUDA)" : " CPU core(s)") +
                                 ": start at most that many, or pass --oversubscribe to share them");
}

// The process manager must exist before anything starts (a missing mpirun is not worth restarts).
Status CheckInPath(const std::string& program) {
  const char* path = std::getenv("PATH");
  std::stringstream dirs(path == nullptr ? "" : path);
  std::string dir;
  while (std::getline(dirs, dir, ':')) {
    if (access(((dir.empty() ? "." : dir) + "/" + program).c_str(), X_OK) == 0) return Status::OK();
  }
  return Status::FailedPrecondition(program +
                                    " not found in PATH (install Open MPI's mpirun, e.g. Debian's "
                                    "openmpi-bin, or run inside a Slurm allocation for srun)");
}

// Loads CONFIG with its --set overrides and checks it and its data at the job's world size; prints the
// check's warnings once. A per-node start of more than one rank needs the GPU path: the CPU path reduces
// gradients with MPI, which processes started without a process manager cannot form. The memory plan must fit
// (runtime/train/memory_fit.h: the GPU here, GPU 0's memory standing for every rank's, or train.memory_budget_gib);
// *memory_plan gets its description ("" when the model has none).
Status CheckRunBeforeStart(const LaunchOptions& opts, const LaunchEnv& env, const LaunchCommand& cmd, bool* on_cuda,
                           std::string* memory_plan) {
  const int world_size = cmd.placement.world_size();
  proto::Config cfg;
  DT_RETURN_IF_ERROR(runtime::LoadConfig(opts.config, opts.sets, &cfg));
  DT_RETURN_IF_ERROR(runtime::ResolveAutoSizes(&cfg));  // as each worker does, before its run check
  const std::string& device = cfg.train().device();
  *on_cuda = device == "cuda" || (device != "cpu" && env.gpu_count > 0);
  // A dry run on a machine without a GPU (a cluster's login node) of a config that runs on GPUs only (a 16- or 8-bit
  // train.precision) plans for the GPU it will run on; that GPU's memory is unknown here, so only
  // train.memory_budget_gib is checked.
  const std::string& precision = cfg.train().precision();
  const bool plan_for_gpu = opts.dry_run && !*on_cuda && device != "cpu" && precision != "fp32" && precision != "auto";
  *on_cuda |= plan_for_gpu;
  if (cmd.backend == Backend::kNode && world_size > 1 &&
      (device == "cpu" || (device != "cuda" && env.gpu_count == 0))) {
    return Status::InvalidArgument(
        "--node-rank: a per-node start (no mpirun) of " + std::to_string(world_size) + " ranks needs GPUs, but " +
        opts.config + " trains on the CPU (train.device: " + device +
        (device == "cpu" ? "" : ", and this machine has no GPU") +
        "): the CPU path reduces gradients with MPI, which workers started without mpirun/srun cannot form. Start it "
        "with `dtrain launch --hosts/--hostfile` (mpirun) or srun instead");
  }
  runtime::RunCheck check;
  std::vector<Status> problems = {runtime::CheckRun(cfg, world_size, &check)};
  // A Prometheus port in use here would stop this node's local rank 0 (exit 2) after the start: found now, when
  // ranks run on this machine (other hosts' ports are checked by their ranks).
  bool ranks_here = cmd.backend == Backend::kNode;
  for (const HostSlots& h : cmd.placement.hosts) ranks_here |= h.name == "localhost" || h.name == env.hostname;
  if (ranks_here) problems.push_back(runtime::CheckPrometheusEndpoint(cfg.run()));
  if (problems[0].ok()) {  // a config the run check refused has no plan worth printing (its errors would repeat)
    runtime::MemoryFit fit;
    const int64_t gpu_bytes = *on_cuda && env.gpu_count > 0 ? CudaDeviceMemoryBytes(0) : 0;
    problems.push_back(runtime::FitMemory(&cfg, world_size, *on_cuda, gpu_bytes, &fit));
    // Host memory for offloaded optimizer state, for the ranks this machine runs (not in a dry run, which may plan
    // on another machine than the nodes': every worker checks its own machine again).
    const int local_ranks = LocalRanks(opts, cmd);
    if (problems.back().ok() && local_ranks > 0 && !opts.dry_run) {
      problems.push_back(runtime::CheckHostMemory(cfg, fit.plan, local_ranks, runtime::HostMemoryAvailable()));
    }
    if (problems.back().ok() && fit.planned) *memory_plan = runtime::DescribeMemoryFit(fit);
    if (plan_for_gpu && !memory_plan->empty()) {
      *memory_plan += "\n(no GPU here: planned for a CUDA device, train.precision " + precision +
                      " runs on GPUs only; set train.memory_budget_gib to check the plan against a GPU's memory)";
    }
  }
  for (const std::string& w : check.warnings) DT_LOG_WARN(kLauncher, "{}", w);
  return runtime::JoinProblems(problems);
}

}  // namespace

int RunLaunch(const std::vector<std::string>& args) {
  LaunchOptions opts;
  std::string help;
  const Status st = ParseLaunchArgs(args, &opts, &help);
  if (!st.ok()) return UsageError(st);
  if (opts.help) {
    std::fputs(help.c_str(), stdout);
    return kExitOk;
  }
  return LaunchWith(opts);
}

int LaunchWith(const LaunchOptions& opts) {
  LaunchEnv env;
  Status st = ProbeLaunchEnv(&env);
  if (!st.ok()) return LaunchError(st);
  // The job secret (comm/job_secret.h): --secret-file or the environment; made here when this launcher starts the
  // whole job. Workers inherit it in DTRAIN_JOB_SECRET (never on a command line; env.vars predates it).
  comm::JobSecret secret;
  std::string secret_source;
  st = comm::JobSecret::Resolve(opts.secret_file, opts.node_rank < 0 || opts.nnodes <= 1, &secret, &secret_source);
  if (st.ok()) st = secret.ExportToEnvironment();
  if (!st.ok()) return UsageError(st);
  DT_LOG_DEBUG(kLauncher, "job secret: {}", secret_source);
  if (opts.elastic_min > 0) {
    if (!opts.dry_run && !opts.log_dir.empty()) {
      st = PrepareLogDir(opts.log_dir);
      if (!st.ok()) return UsageError(st);
    }
    // Under Slurm without a host list the allocation is the host set (srun); else mpirun over the listed hosts.
    const bool listed = !opts.hosts.empty() || !opts.hostfile.empty();
    const bool srun = opts.backend == Backend::kSrun || (opts.backend == Backend::kAuto && env.in_slurm && !listed);
    if (srun) return SuperviseSlurmElastic(opts, env);
    if (!listed) {
      return UsageError(Status::InvalidArgument(
          "--nnodes MIN:MAX: an elastic host set needs --hosts or --hostfile (mpirun over ssh), or a Slurm "
          "allocation (srun)" +
          FixedNodesHint(opts.elastic_min, opts.elastic_max)));
    }
    return SuperviseElastic(opts, env);
  }
  LaunchCommand cmd;
  st = BuildLaunchCommand(opts, env, 0, &cmd);
  if (!st.ok()) return LaunchError(st);
  // The whole run is checked here, once, before any rank starts (runtime/train/run_check.h) — when the workers
  // are this binary: another worker program (DTRAIN_WORKER_BIN) reads its config its own way and checks it.
  bool on_cuda = env.gpu_count > 0;  // another worker program: as train.device auto would
  std::string memory_plan;
  st = env.worker_bin == env.self_bin ? CheckRunBeforeStart(opts, env, cmd, &on_cuda, &memory_plan) : Status::OK();
  if (!st.ok()) {
    std::fprintf(stderr, "dtrain launch: error: %s\n", st.ToString().c_str());
    return ExitCodeFor(st);  // as `dtrain train` would exit on the same error
  }
  if (opts.dry_run) {
    if (!memory_plan.empty()) std::printf("%s\n", memory_plan.c_str());
    std::printf("%s\n", FormatCommandLine(cmd).c_str());
    std::fflush(stdout);
    return kExitOk;
  }
  st = CheckLocalSlots(opts, env, cmd, on_cuda);
  if (st.ok() && !opts.log_dir.empty()) st = PrepareLogDir(opts.log_dir);
  if (!st.ok()) return UsageError(st);
  if (cmd.backend != Backend::kNode) {
    st = CheckInPath(cmd.argv[0]);
    if (!st.ok()) return LaunchError(st);
    st = ProbeSshHosts(cmd.ssh_hosts);
    if (!st.ok()) return UsageError(st);  // not restartable: a host that cannot be reached
  }
  const std::unique_ptr<LaunchBackend> backend = MakeLaunchBackend(opts, env, cmd.backend);
  const std::unique_ptr<RestartPolicy> policy = MakeFixedRestartPolicy(opts, env);
  return RunWithRestarts(backend.get(), policy.get(), opts.max_restarts);
}

}  // namespace dtrain::launcher
