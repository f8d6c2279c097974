#include "launcher/launch.h"

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
#include "runtime/train/run_check.h"

namespace dtrain::launcher {
namespace {

Status MakeDirs(const std::string& path) {
  std::string prefix;
  size_t pos = 0;
  while (pos != std::string::npos) {
    pos = path.find('/', pos + 1);
    prefix = path.substr(0, pos);
    if (prefix.empty()) continue;
    if (mkdir(prefix.c_str(), 0755) != 0 && errno != EEXIST) {
      return Status::IoError("--log-dir: cannot create '" + prefix + "': " + std::strerror(errno));
    }
  }
  return Status::OK();
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
// gradients with MPI, which processes started without a process manager cannot form.
Status CheckRunBeforeStart(const LaunchOptions& opts, const LaunchEnv& env, const LaunchCommand& cmd) {
  const int world_size = cmd.placement.world_size();
  proto::Config cfg;
  DT_RETURN_IF_ERROR(runtime::LoadConfig(opts.config, opts.sets, &cfg));
  const std::string& device = cfg.train().device();
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
  DT_RETURN_IF_ERROR(runtime::CheckRun(cfg, world_size, &check));
  for (const std::string& w : check.warnings) DT_LOG_WARN(kLauncher, "{}", w);
  return Status::OK();
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
    // Under Slurm without a host list the allocation is the host set (srun); else mpirun over the listed hosts.
    const bool listed = !opts.hosts.empty() || !opts.hostfile.empty();
    const bool srun = opts.backend == Backend::kSrun || (opts.backend == Backend::kAuto && env.in_slurm && !listed);
    if (srun) return SuperviseSlurmElastic(opts, env);
    if (!listed) {
      return UsageError(Status::InvalidArgument(
          "--nnodes MIN:MAX: an elastic host set needs --hosts or --hostfile (mpirun over ssh), or a Slurm "
          "allocation (srun)"));
    }
    return SuperviseElastic(opts, env);
  }
  LaunchCommand cmd;
  st = BuildLaunchCommand(opts, env, 0, &cmd);
  if (!st.ok()) return LaunchError(st);
  // The whole run is checked here, once, before any rank starts (runtime/train/run_check.h) — when the workers
  // are this binary: another worker program (DTRAIN_WORKER_BIN) reads its config its own way and checks it.
  st = env.worker_bin == env.self_bin ? CheckRunBeforeStart(opts, env, cmd) : Status::OK();
  if (!st.ok()) {
    std::fprintf(stderr, "dtrain launch: error: %s\n", st.ToString().c_str());
    return ExitCodeFor(st);  // as `dtrain train` would exit on the same error
  }
  if (opts.dry_run) {
    std::printf("%s\n", FormatCommandLine(cmd).c_str());
    std::fflush(stdout);
    return kExitOk;
  }
  if (!opts.log_dir.empty()) {
    st = MakeDirs(opts.log_dir);
    if (!st.ok()) return LaunchError(st);
  }
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
