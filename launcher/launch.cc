#include "launcher/launch.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <sstream>

#include "core/check.h"
#include "core/logging.h"
#include "launcher/attempt_outcome.h"
#include "launcher/elastic_launch.h"
#include "launcher/exit_codes.h"
#include "launcher/host_probe.h"
#include "launcher/launch_command.h"
#include "launcher/launch_options.h"
#include "launcher/node_link.h"
#include "launcher/node_workers.h"
#include "launcher/output_router.h"
#include "launcher/slurm_elastic.h"
#include "launcher/supervisor.h"
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

// How long the per-node launchers wait for each other at the start of each attempt.
constexpr double kNodeJoinTimeoutS = 300;

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

int Supervise(const LaunchOptions& opts, const LaunchEnv& env) {
  std::unique_ptr<SupervisorScope> scope;
  Status st = SupervisorScope::Create(&scope);
  if (!st.ok()) return LaunchError(st);
  const int attempts = opts.max_restarts + 1;
  for (int attempt = 0; attempt < attempts; ++attempt) {
    LaunchCommand cmd;
    st = BuildLaunchCommand(opts, env, attempt, &cmd);
    if (!st.ok()) return LaunchError(st);
    DT_LOG_INFO(kLauncher, "attempt {} of {}: {}", attempt + 1, attempts, FormatCommandLine(cmd));
    OutputRouter::Options ropts;
    ropts.backend = cmd.backend;
    ropts.log_dir = opts.log_dir;
    ropts.attempt = attempt;
    OutputRouter router(ropts);
    AttemptResult result;
    st = RunAttempt(cmd, opts.grace_seconds, scope.get(), &router, &result);
    if (!st.ok()) return LaunchError(st);
    if (!router.log_error().empty()) DT_LOG_WARN(kLauncher, "--log-dir: {}", router.log_error());
    if (result.exit_code == kExitOk) {
      // Also after a signal: one that arrives while the ranks finish leaves nothing to save or resume.
      DT_LOG_INFO(kLauncher, "the job finished ({} exited 0){}", cmd.argv[0],
                  result.stop_signal != 0
                      ? " (signal " + std::to_string(result.stop_signal) + " arrived as it was finishing)"
                      : std::string());
      return kExitOk;
    }
    const RankExit cause = RootCause(router, cmd, result);
    const int code = cause.ProcessExitCode();
    if (result.stop_signal == 0 && code != kExitPreempted)
      ReportFailure(cause, router, cmd, "attempt " + std::to_string(attempt + 1) + " of " + std::to_string(attempts));
    const int exit_code = AfterFailure(code, result.stop_signal, attempt, opts.max_restarts,
                                       cause.rank >= 0 ? "rank " + std::to_string(cause.rank) : cmd.argv[0]);
    if (exit_code >= 0) return exit_code;
  }
  return kExitFailure;  // not reached
}

// Per-node start: each attempt joins the other nodes' launchers (node_link.h), then runs this node's workers
// (node_workers.h). Every node sees the same root-cause code, so all decide the same about restarting.
int SuperviseNode(const LaunchOptions& opts, const LaunchEnv& env) {
  std::unique_ptr<SupervisorScope> scope;
  Status st = SupervisorScope::Create(&scope);
  if (!st.ok()) return LaunchError(st);
  const int attempts = opts.max_restarts + 1;
  for (int attempt = 0; attempt < attempts; ++attempt) {
    LaunchCommand cmd;
    st = BuildLaunchCommand(opts, env, attempt, &cmd);
    if (!st.ok()) return LaunchError(st);
    std::unique_ptr<NodeLink> link;
    if (opts.nnodes > 1) {
      NodeLinkOptions lo;
      lo.node_rank = opts.node_rank;
      lo.nnodes = opts.nnodes;
      lo.master_addr = cmd.env_set[0].second;  // MASTER_ADDR
      lo.port = std::stoi(cmd.env_set[1].second) + 1;
      lo.attempt = attempt;
      lo.join_timeout_s = kNodeJoinTimeoutS;
      DT_LOG_INFO(kLauncher, "node {} of {}: joining the other nodes' launchers (node 0 listens on {}:{})",
                  opts.node_rank, opts.nnodes, lo.master_addr, lo.port);
      st = NodeLink::Join(lo, &link);
      if (!st.ok()) return LaunchError(st);
    }
    DT_LOG_INFO(kLauncher, "attempt {} of {}, node {} of {}: {}", attempt + 1, attempts, opts.node_rank, opts.nnodes,
                FormatCommandLine(cmd));
    OutputRouter::Options ropts;
    ropts.backend = cmd.backend;
    ropts.log_dir = opts.log_dir;
    ropts.attempt = attempt;
    ropts.console_rank = cmd.first_rank;
    OutputRouter router(ropts);
    NodeAttemptResult result;
    st = RunNodeAttempt(cmd, opts.grace_seconds, env.hostname, scope.get(), &router, link.get(), &result);
    if (!st.ok()) return LaunchError(st);
    link.reset();  // sends the failure or "done" still queued
    if (!router.log_error().empty()) DT_LOG_WARN(kLauncher, "--log-dir: {}", router.log_error());
    if (result.exit_code == kExitOk) {
      DT_LOG_INFO(kLauncher, "node {}: this node's workers finished (all exited 0)", opts.node_rank);
      return kExitOk;
    }
    if (result.remote.node >= 0) {
      DT_LOG_ERROR(kLauncher, "node {}: the job stopped because of node {}: {} (attempt {} of {})", opts.node_rank,
                   result.remote.node, result.remote.reason, attempt + 1, attempts);
    } else if (result.stop_signal == 0 && result.exit_code != kExitPreempted) {
      ReportFailure(result.cause, router, cmd,
                    "attempt " + std::to_string(attempt + 1) + " of " + std::to_string(attempts));
    }
    const int exit_code = AfterFailure(result.exit_code, result.stop_signal, attempt, opts.max_restarts,
                                       result.cause.rank >= 0 ? "rank " + std::to_string(result.cause.rank) : "a rank");
    if (exit_code >= 0) return exit_code;
  }
  return kExitFailure;  // not reached
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
  if (cmd.backend == Backend::kNode) return SuperviseNode(opts, env);
  st = CheckInPath(cmd.argv[0]);
  if (!st.ok()) return LaunchError(st);
  st = ProbeSshHosts(cmd.ssh_hosts);
  if (!st.ok()) return UsageError(st);  // not restartable: a host that cannot be reached
  return Supervise(opts, env);
}

}  // namespace dtrain::launcher
