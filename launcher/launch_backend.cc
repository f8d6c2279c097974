#include "launcher/launch_backend.h"

#include <memory>
#include <string>

#include "core/check.h"
#include "core/logging.h"
#include "launcher/attempt_outcome.h"
#include "launcher/exit_codes.h"
#include "launcher/node_link.h"
#include "launcher/node_workers.h"
#include "launcher/output_router.h"

namespace dtrain::launcher {
namespace {

// How long the per-node launchers wait for each other at the start of each attempt.
constexpr double kNodeJoinTimeoutS = 300;

std::string AttemptOf(int attempt, int attempts) {
  return "attempt " + std::to_string(attempt + 1) + " of " + std::to_string(attempts);
}

// mpirun or srun: the process manager starts the ranks on every host; RunAttempt watches it.
class ManagerBackend : public LaunchBackend {
 public:
  ManagerBackend(const LaunchOptions& opts, const LaunchEnv& env) : opts_(opts), env_(env) {}

  Status RunAttempt(int attempt, int attempts, SupervisorScope* scope, AttemptEnd* end) override {
    LaunchCommand cmd;
    DT_RETURN_IF_ERROR(BuildLaunchCommand(opts_, env_, attempt, &cmd));
    DT_LOG_INFO(kLauncher, "attempt {} of {}: {}", attempt + 1, attempts, FormatCommandLine(cmd));
    OutputRouter::Options ropts;
    ropts.backend = cmd.backend;
    ropts.log_dir = opts_.log_dir;
    ropts.attempt = attempt;
    OutputRouter router(ropts);
    AttemptResult result;
    DT_RETURN_IF_ERROR(launcher::RunAttempt(cmd, opts_.grace_seconds, scope, &router, &result));
    if (!router.log_error().empty()) DT_LOG_WARN(kLauncher, "--log-dir: {}", router.log_error());
    end->stop_signal = result.stop_signal;
    if (result.exit_code == kExitOk) {
      // Also after a signal: one that arrives while the ranks finish leaves nothing to save or resume.
      DT_LOG_INFO(kLauncher, "the job finished ({} exited 0){}", cmd.argv[0],
                  result.stop_signal != 0
                      ? " (signal " + std::to_string(result.stop_signal) + " arrived as it was finishing)"
                      : std::string());
      end->done = true;
      return Status::OK();
    }
    const RankExit cause = RootCause(router, cmd, result);
    end->exit_code = cause.ProcessExitCode();
    end->who = cause.rank >= 0 ? "rank " + std::to_string(cause.rank) : cmd.argv[0];
    if (result.stop_signal == 0 && end->exit_code != kExitPreempted) {
      ReportFailure(cause, router, cmd, AttemptOf(attempt, attempts));
    }
    return Status::OK();
  }

 private:
  const LaunchOptions& opts_;
  const LaunchEnv& env_;
};

// Per-node start: each attempt joins the other nodes' launchers (node_link.h), then runs this node's workers
// (node_workers.h). Every node sees the same root-cause code, so all decide the same about restarting.
class NodeBackend : public LaunchBackend {
 public:
  NodeBackend(const LaunchOptions& opts, const LaunchEnv& env) : opts_(opts), env_(env) {}

  Status RunAttempt(int attempt, int attempts, SupervisorScope* scope, AttemptEnd* end) override {
    LaunchCommand cmd;
    DT_RETURN_IF_ERROR(BuildLaunchCommand(opts_, env_, attempt, &cmd));
    std::unique_ptr<NodeLink> link;
    if (opts_.nnodes > 1) {
      NodeLinkOptions lo;
      lo.node_rank = opts_.node_rank;
      lo.nnodes = opts_.nnodes;
      lo.master_addr = cmd.env_set[0].second;  // MASTER_ADDR
      lo.port = std::stoi(cmd.env_set[1].second) + 1;
      lo.attempt = attempt;
      lo.join_timeout_s = kNodeJoinTimeoutS;
      lo.cancel_fd = scope->signal_fd();  // SIGINT/SIGTERM stop the join at once
      DT_RETURN_IF_ERROR(comm::JobSecret::Resolve("", false, &lo.secret, nullptr));  // exported by LaunchWith
      DT_LOG_INFO(kLauncher, "node {} of {}: joining the other nodes' launchers (node 0 listens on {}:{})",
                  opts_.node_rank, opts_.nnodes, lo.master_addr, lo.port);
      const Status joined = NodeLink::Join(lo, &link, &end->stop_signal);
      if (end->stop_signal != 0) return Status::OK();  // a signal while joining: no restart (AfterFailure)
      DT_RETURN_IF_ERROR(joined);
    }
    DT_LOG_INFO(kLauncher, "attempt {} of {}, node {} of {}: {}", attempt + 1, attempts, opts_.node_rank, opts_.nnodes,
                FormatCommandLine(cmd));
    OutputRouter::Options ropts;
    ropts.backend = cmd.backend;
    ropts.log_dir = opts_.log_dir;
    ropts.attempt = attempt;
    ropts.console_rank = cmd.first_rank;
    OutputRouter router(ropts);
    NodeAttemptResult result;
    DT_RETURN_IF_ERROR(RunNodeAttempt(cmd, opts_.grace_seconds, env_.hostname, scope, &router, link.get(), &result));
    link.reset();  // sends the failure or "done" still queued
    if (!router.log_error().empty()) DT_LOG_WARN(kLauncher, "--log-dir: {}", router.log_error());
    end->stop_signal = result.stop_signal;
    if (result.exit_code == kExitOk) {
      DT_LOG_INFO(kLauncher, "node {}: this node's workers finished (all exited 0)", opts_.node_rank);
      end->done = true;
      return Status::OK();
    }
    end->exit_code = result.exit_code;
    end->who = result.cause.rank >= 0 ? "rank " + std::to_string(result.cause.rank) : "a rank";
    if (result.remote.node >= 0) {
      DT_LOG_ERROR(kLauncher, "node {}: the job stopped because of node {}: {} ({})", opts_.node_rank,
                   result.remote.node, result.remote.reason, AttemptOf(attempt, attempts));
    } else if (result.stop_signal == 0 && result.exit_code != kExitPreempted) {
      ReportFailure(result.cause, router, cmd, AttemptOf(attempt, attempts));
    }
    return Status::OK();
  }

 private:
  const LaunchOptions& opts_;
  const LaunchEnv& env_;
};

}  // namespace

std::unique_ptr<LaunchBackend> MakeLaunchBackend(const LaunchOptions& opts, const LaunchEnv& env, Backend backend) {
  if (backend == Backend::kNode) return std::make_unique<NodeBackend>(opts, env);
  return std::make_unique<ManagerBackend>(opts, env);
}

}  // namespace dtrain::launcher
