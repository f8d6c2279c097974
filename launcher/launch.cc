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
#include "launcher/exit_codes.h"
#include "launcher/host_probe.h"
#include "launcher/launch_command.h"
#include "launcher/launch_options.h"
#include "launcher/output_router.h"
#include "launcher/supervisor.h"
#include "runtime/config/config.h"
#include "runtime/train/run_check.h"

namespace dtrain::launcher {
namespace {

int UsageError(const Status& st) {
  std::fprintf(stderr, "dtrain launch: error: %s\n", st.message().c_str());
  return kExitUsage;
}

int ExitCodeFor(const Status& st) {
  switch (st.code()) {
    case Status::Code::kOk:
      return kExitOk;
    case Status::Code::kInvalidArgument:
    case Status::Code::kNotFound:
      return UsageError(st);
    default:
      std::fprintf(stderr, "dtrain launch: error: %s\n", st.ToString().c_str());
      return kExitFailure;
  }
}

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
// check's warnings once.
Status CheckRunBeforeStart(const LaunchOptions& opts, int world_size) {
  proto::Config cfg;
  DT_RETURN_IF_ERROR(runtime::LoadConfig(opts.config, opts.sets, &cfg));
  runtime::RunCheck check;
  DT_RETURN_IF_ERROR(runtime::CheckRun(cfg, world_size, &check));
  for (const std::string& w : check.warnings) DT_LOG_WARN(kLauncher, "{}", w);
  return Status::OK();
}

// The root cause of a failed attempt, completed from what the launcher knows itself.
RankExit RootCause(const OutputRouter& router, const LaunchCommand& cmd, const AttemptResult& result) {
  RankExit cause = router.root_cause();
  if (cause.rank >= 0 && cause.host.empty()) cause.host = cmd.placement.HostOfRank(cause.rank);
  if (cause.ProcessExitCode() < 0) {  // no report, or one without a code: take the manager's
    cause.exit_code = result.exit_code;
    cause.signal = 0;
  }
  return cause;
}

void ReportFailure(const RankExit& cause, const OutputRouter& router, const LaunchCommand& cmd, int attempt,
                   int attempts) {
  std::string msg;
  if (cause.rank >= 0) {
    msg = "rank " + std::to_string(cause.rank) + " on host " + (cause.host.empty() ? "?" : cause.host) +
          " failed first: " + cause.Describe();
  } else {
    msg = cmd.argv[0] + " failed with exit code " + std::to_string(cause.exit_code) + " and named no rank";
  }
  if (router.daemons_failed()) {
    msg +=
        ": it could not start workers on every host (see its lines above): check that each host of "
        "--hosts/--hostfile resolves, is reachable by ssh without a password prompt, and has dtrain at the same path";
  }
  msg += " (attempt " + std::to_string(attempt + 1) + " of " + std::to_string(attempts) + ")";
  if (cause.rank >= 0) {
    const auto tail = router.Tail(cause.rank);
    msg += tail.empty() ? "; it printed nothing" : "; its last lines:";
    for (const auto& line : tail) msg += "\n  | " + line;
  }
  DT_LOG_ERROR(kLauncher, "{}", msg);
}

int Supervise(const LaunchOptions& opts, const LaunchEnv& env) {
  std::unique_ptr<SupervisorScope> scope;
  Status st = SupervisorScope::Create(&scope);
  if (!st.ok()) return ExitCodeFor(st);
  const int attempts = opts.max_restarts + 1;
  for (int attempt = 0; attempt < attempts; ++attempt) {
    LaunchCommand cmd;
    st = BuildLaunchCommand(opts, env, attempt, &cmd);
    if (!st.ok()) return ExitCodeFor(st);
    DT_LOG_INFO(kLauncher, "attempt {} of {}: {}", attempt + 1, attempts, FormatCommandLine(cmd));
    OutputRouter::Options ropts;
    ropts.backend = cmd.backend;
    ropts.log_dir = opts.log_dir;
    ropts.attempt = attempt;
    OutputRouter router(ropts);
    AttemptResult result;
    st = RunAttempt(cmd, opts.grace_seconds, scope.get(), &router, &result);
    if (!st.ok()) return ExitCodeFor(st);
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
    if (result.stop_signal != 0) {
      DT_LOG_WARN(kLauncher, "stopped by signal {} ({}); not restarting", result.stop_signal,
                  strsignal(result.stop_signal));
      return code == kExitPreempted ? kExitPreempted : ExitCodeForSignal(result.stop_signal);
    }
    if (code == kExitPreempted) {
      DT_LOG_WARN(kLauncher, "{} exited {} (preempted, checkpoint saved): requeue the job to resume",
                  cause.rank >= 0 ? "rank " + std::to_string(cause.rank) : cmd.argv[0], kExitPreempted);
      return kExitPreempted;
    }
    ReportFailure(cause, router, cmd, attempt, attempts);
    if (code == kExitUsage) {
      DT_LOG_ERROR(kLauncher, "usage/config error (exit {}): not restarting", kExitUsage);
      return kExitUsage;
    }
    if (attempt + 1 < attempts) {
      DT_LOG_WARN(kLauncher, "restarting the job ({} of {} restarts, DTRAIN_RESTART_COUNT={})", attempt + 1,
                  opts.max_restarts, attempt + 1);
    } else {
      return code > 0 ? code : kExitFailure;
    }
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
  if (!st.ok()) return ExitCodeFor(st);
  LaunchCommand cmd;
  st = BuildLaunchCommand(opts, env, 0, &cmd);
  if (!st.ok()) return ExitCodeFor(st);
  // The whole run is checked here, once, before any rank starts (runtime/train/run_check.h) — when the workers
  // are this binary: another worker program (DTRAIN_WORKER_BIN) reads its config its own way and checks it.
  st = env.worker_bin == env.self_bin ? CheckRunBeforeStart(opts, cmd.placement.world_size()) : Status::OK();
  if (!st.ok()) {
    std::fprintf(stderr, "dtrain launch: error: %s\n", st.ToString().c_str());
    return kExitUsage;
  }
  if (opts.dry_run) {
    std::printf("%s\n", FormatCommandLine(cmd).c_str());
    std::fflush(stdout);
    return kExitOk;
  }
  st = CheckInPath(cmd.argv[0]);
  if (!st.ok()) return ExitCodeFor(st);
  st = ProbeSshHosts(cmd.ssh_hosts);
  if (!st.ok()) return UsageError(st);  // not restartable: a host that cannot be reached
  if (!opts.log_dir.empty()) {
    st = MakeDirs(opts.log_dir);
    if (!st.ok()) return ExitCodeFor(st);
  }
  return Supervise(opts, env);
}

}  // namespace dtrain::launcher
