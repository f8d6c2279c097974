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

// mpirun or srun: the process manager starts the ranks on every host; RunAttempt watches it.
class ManagerBackend : public LaunchBackend {
 public:
  explicit ManagerBackend(const LaunchOptions& opts) : opts_(opts) {}

  Status RunAttempt(const AttemptPlan& plan, SupervisorScope* scope, AttemptEnd* end) override {
    const LaunchCommand& cmd = plan.cmd;
    DT_LOG_INFO(kLauncher, "{}: {}", plan.title, FormatCommandLine(cmd));
    OutputRouter::Options ropts;
    ropts.backend = cmd.backend;
    ropts.log_dir = opts_.log_dir;
    ropts.attempt = plan.attempt;
    OutputRouter router(ropts);
    AttemptResult result;
    const Status st = launcher::RunAttempt(cmd, opts_.grace_seconds, scope, &router, &result);
    if (!st.ok()) router.ReleaseHeldBanners(true);
    DT_RETURN_IF_ERROR(st);
    if (!router.log_error().empty()) DT_LOG_WARN(kLauncher, "--log-dir: {}", router.log_error());
    end->stop_signal = result.stop_signal;
    if (result.exit_code == kExitOk) {
      router.ReleaseHeldBanners(false);
      // Also after a signal: one that arrives while the ranks finish leaves nothing to save or resume.
      end->finished =
          "the job finished (" + cmd.argv[0] + " exited 0)" +
          (result.stop_signal != 0 ? " (signal " + std::to_string(result.stop_signal) + " arrived as it was finishing)"
                                   : std::string());
      end->done = true;
      return Status::OK();
    }
    end->cause = RootCause(router, cmd, result);
    end->exit_code = end->cause.ProcessExitCode();
    // mpirun's "Primary job terminated normally, but 1 process returned a non-zero exit code" after a clean outcome
    // (bad input explained by the ranks, a checkpoint before a preemption, a stop asked for) reads as a crash.
    router.ReleaseHeldBanners(result.stop_signal == 0 && end->exit_code != kExitUsage &&
                              end->exit_code != kExitPreempted);
    end->who = end->cause.rank >= 0 ? "rank " + std::to_string(end->cause.rank) : cmd.argv[0];
    end->notice_ranks = router.notice_ranks();
    end->lost_daemon_hosts = router.lost_daemon_hosts();
    if (result.stop_signal == 0 && end->exit_code != kExitPreempted) {
      end->report = FailureReport(end->cause, router, cmd, plan.when);
    }
    return Status::OK();
  }

 private:
  const LaunchOptions& opts_;
};

// Per-node start: each attempt joins the other nodes' launchers (node_link.h), then runs this node's workers
// (node_workers.h). Every node sees the same root-cause code, so all decide the same about restarting.
class NodeBackend : public LaunchBackend {
 public:
  NodeBackend(const LaunchOptions& opts, const LaunchEnv& env) : opts_(opts), env_(env) {}

  Status RunAttempt(const AttemptPlan& plan, SupervisorScope* scope, AttemptEnd* end) override {
    const LaunchCommand& cmd = plan.cmd;
    std::unique_ptr<NodeLink> link;
    if (opts_.nnodes > 1) {
      NodeLinkOptions lo;
      lo.node_rank = opts_.node_rank;
      lo.nnodes = opts_.nnodes;
      lo.master_addr = cmd.env_set[0].second;  // MASTER_ADDR
      lo.port = std::stoi(cmd.env_set[1].second) + 1;
      lo.attempt = plan.attempt;
      lo.join_timeout_s = kNodeJoinTimeoutS;
      lo.cancel_fd = scope->signal_fd();  // SIGINT/SIGTERM stop the join at once
      DT_RETURN_IF_ERROR(comm::JobSecret::Resolve("", false, &lo.secret, nullptr));  // exported by LaunchWith
      DT_LOG_INFO(kLauncher, "node {} of {}: joining the other nodes' launchers (node 0 listens on {}:{})",
                  opts_.node_rank, opts_.nnodes, lo.master_addr, lo.port);
      const Status joined = NodeLink::Join(lo, &link, &end->stop_signal);
      if (end->stop_signal != 0) return Status::OK();  // a signal while joining: no restart (AfterFailure)
      DT_RETURN_IF_ERROR(joined);
    }
    DT_LOG_INFO(kLauncher, "{}, node {} of {}: {}", plan.title, opts_.node_rank, opts_.nnodes, FormatCommandLine(cmd));
    OutputRouter::Options ropts;
    ropts.backend = cmd.backend;
    ropts.log_dir = opts_.log_dir;
    ropts.attempt = plan.attempt;
    ropts.console_rank = cmd.first_rank;
    OutputRouter router(ropts);
    NodeAttemptResult result;
    DT_RETURN_IF_ERROR(RunNodeAttempt(cmd, opts_.grace_seconds, env_.hostname, scope, &router, link.get(), &result));
    link.reset();  // sends the failure or "done" still queued
    if (!router.log_error().empty()) DT_LOG_WARN(kLauncher, "--log-dir: {}", router.log_error());
    end->stop_signal = result.stop_signal;
    if (result.exit_code == kExitOk) {
      end->finished = "node " + std::to_string(opts_.node_rank) + ": this node's workers finished (all exited 0)";
      end->done = true;
      return Status::OK();
    }
    end->exit_code = result.exit_code;
    end->cause = result.cause;
    end->who = result.cause.rank >= 0 ? "rank " + std::to_string(result.cause.rank) : "a rank";
    end->notice_ranks = router.notice_ranks();
    if (result.remote.node >= 0) {
      end->report = "node " + std::to_string(opts_.node_rank) + ": the job stopped because of node " +
                    std::to_string(result.remote.node) + ": " + result.remote.reason + " (" + plan.when + ")";
    } else if (result.stop_signal == 0 && result.exit_code != kExitPreempted) {
      end->report = FailureReport(result.cause, router, cmd, plan.when);
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
  return std::make_unique<ManagerBackend>(opts);
}

}  // namespace dtrain::launcher
