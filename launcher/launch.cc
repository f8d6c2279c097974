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

}  // namespace

int RunLaunch(const std::vector<std::string>& args, const PreStartCheck& check) {
  LaunchOptions opts;
  std::string help;
  const Status st = ParseLaunchArgs(args, &opts, &help);
  if (!st.ok()) return UsageError(st);
  if (opts.help) {
    std::fputs(help.c_str(), stdout);
    return kExitOk;
  }
  return LaunchWith(opts, check);
}

int LaunchWith(const LaunchOptions& opts, const PreStartCheck& check) {
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
  // The whole run is checked here, once, before any rank starts (`check`) — when the workers are this binary:
  // another worker program (DTRAIN_WORKER_BIN) reads its config its own way and checks it.
  bool on_cuda = env.gpu_count > 0;  // another worker program: as train.device auto would
  std::string memory_plan;
  st = check && env.worker_bin == env.self_bin ? check(opts, env, cmd, &on_cuda, &memory_plan) : Status::OK();
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
