#include "launcher/launch.h"

#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <sstream>
#include <thread>

#include "core/check.h"
#include "core/logging.h"
#include "launcher/elastic_plan.h"
#include "launcher/exit_codes.h"
#include "launcher/host_probe.h"
#include "launcher/launch_command.h"
#include "launcher/launch_options.h"
#include "launcher/node_link.h"
#include "launcher/node_workers.h"
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

// The decision after a failed attempt, the same for both supervising loops: -1 restart, else the exit code.
int AfterFailure(int code, int stop_signal, int attempt, int max_restarts, const std::string& who) {
  if (stop_signal != 0) {
    DT_LOG_WARN(kLauncher, "stopped by signal {} ({}); not restarting", stop_signal, strsignal(stop_signal));
    return code == kExitPreempted ? kExitPreempted : ExitCodeForSignal(stop_signal);
  }
  if (code == kExitPreempted) {
    DT_LOG_WARN(kLauncher, "{} exited {} (preempted, checkpoint saved): requeue the job to resume", who,
                kExitPreempted);
    return kExitPreempted;
  }
  if (code == kExitUsage) {
    DT_LOG_ERROR(kLauncher, "usage/config error (exit {}): not restarting", kExitUsage);
    return kExitUsage;
  }
  if (attempt < max_restarts) {
    DT_LOG_WARN(kLauncher, "restarting the job ({} of {} restarts, DTRAIN_RESTART_COUNT={})", attempt + 1, max_restarts,
                attempt + 1);
    return -1;
  }
  return code > 0 ? code : kExitFailure;
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
    if (result.stop_signal == 0 && code != kExitPreempted) ReportFailure(cause, router, cmd, attempt, attempts);
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
  if (!st.ok()) return ExitCodeFor(st);
  const int attempts = opts.max_restarts + 1;
  for (int attempt = 0; attempt < attempts; ++attempt) {
    LaunchCommand cmd;
    st = BuildLaunchCommand(opts, env, attempt, &cmd);
    if (!st.ok()) return ExitCodeFor(st);
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
      if (!st.ok()) return ExitCodeFor(st);
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
    if (!st.ok()) return ExitCodeFor(st);
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
      ReportFailure(result.cause, router, cmd, attempt, attempts);
    }
    const int exit_code = AfterFailure(result.exit_code, result.stop_signal, attempt, opts.max_restarts,
                                       result.cause.rank >= 0 ? "rank " + std::to_string(result.cause.rank) : "a rank");
    if (exit_code >= 0) return exit_code;
  }
  return kExitFailure;  // not reached
}

// --- Elastic host set (--nnodes MIN:MAX) ---------------------------------------------------------

// The listed hosts now: --hosts, or the hostfile read again (it may have changed since the last attempt).
Status ListHosts(const LaunchOptions& opts, std::vector<HostSlots>* out) {
  return opts.hostfile.empty() ? ParseHostList(opts.hosts, out) : ParseHostfile(opts.hostfile, out);
}

std::string HostList(const std::vector<HostSlots>& hosts) {
  std::string s;
  for (const HostSlots& h : hosts)
    s += (s.empty() ? "" : ",") + h.name + (h.slots > 0 ? ":" + std::to_string(h.slots) : "");
  return s;
}

// The options of one attempt on `active`: an mpirun over those hosts, with the batch re-planned for its world
// size (launcher/elastic_plan.h). *world is its world size.
Status ElasticAttempt(const LaunchOptions& opts, const LaunchEnv& env, const std::vector<HostSlots>& active,
                      int full_world, const proto::Config& cfg, int attempt, LaunchCommand* cmd) {
  LaunchOptions o = opts;
  o.hosts = HostList(active);
  o.hostfile.clear();
  o.nnodes = 0;
  LaunchCommand probe;
  DT_RETURN_IF_ERROR(BuildLaunchCommand(o, env, attempt, &probe));
  const int world = probe.placement.world_size();
  BatchPlan plan;
  DT_RETURN_IF_ERROR(PlanBatch(cfg.data().batch_size(), cfg.train().grad_accum_steps(), full_world, world,
                               opts.elastic_batch == "per-gpu" ? ElasticBatch::kPerGpu : ElasticBatch::kGlobal, &plan));
  o.sets.push_back("data.batch_size=" + std::to_string(plan.batch_size));
  o.sets.push_back("train.grad_accum_steps=" + std::to_string(plan.grad_accum_steps));
  return BuildLaunchCommand(o, env, attempt, cmd);
}

// Watches for hosts that may (re)join while an attempt runs: from 5 s after its start, every 2 s it re-reads the host
// list and probes the dropped hosts whose rejoin time has come and listed hosts beyond the active set; when one answers
// and the set is below MAX it asks the job for a coordinated checkpoint (SIGUSR1 to the launcher itself, which forwards
// it to every rank: they save and exit 75) and remembers the hosts that answered.
class GrowWatcher {
 public:
  GrowWatcher(const LaunchOptions& opts, ElasticHosts* hosts, const std::vector<HostSlots>& active)
      : thread_([this, &opts, hosts, active] { Run(opts, hosts, active); }) {}
  ~GrowWatcher() {
    quit_ = true;
    thread_.join();
  }
  bool asked() const { return asked_; }
  const std::vector<std::string>& answered() const { return answered_; }  // after the destructor's join only

 private:
  void Run(const LaunchOptions& opts, ElasticHosts* hosts, std::vector<HostSlots> active) {
    const int max_hosts = opts.elastic_max;
    // The first probe waits until the workers had time to install their signal handlers (a SIGUSR1 before that
    // would kill a worker instead of asking it for a checkpoint).
    auto next = std::chrono::steady_clock::now() + std::chrono::seconds(5);
    while (!quit_ && !asked_) {
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
      if (std::chrono::steady_clock::now() < next || static_cast<int>(active.size()) >= max_hosts) continue;
      next = std::chrono::steady_clock::now() + std::chrono::seconds(2);
      std::vector<HostSlots> listed;
      if (!ListHosts(opts, &listed).ok()) continue;  // a hostfile being rewritten: next round
      hosts->SetListed(listed);
      std::vector<std::string> candidates = hosts->RejoinCandidates(std::chrono::steady_clock::now());
      for (const HostSlots& h : listed) {
        bool in = hosts->dropped(h.name);
        for (const HostSlots& a : active) in = in || a.name == h.name;
        if (!in) candidates.push_back(h.name);
      }
      for (const std::string& c : candidates) {
        if (HostAnswers(c)) answered_.push_back(c);
      }
      if (!answered_.empty()) {
        DT_LOG_WARN(kLauncher, "host(s) {} answer again: asking the job for a checkpoint to restart on more hosts",
                    answered_.front() + (answered_.size() > 1 ? ", ..." : ""));
        asked_ = true;
        kill(getpid(), SIGUSR1);
      }
    }
  }
  std::atomic<bool> quit_{false};
  std::atomic<bool> asked_{false};
  std::vector<std::string> answered_;
  std::thread thread_;
};

// Supervise() for an elastic host set. Attempts differ in their hosts; a lost host's attempt does not count
// against --max-restarts, nor does a grow; other failures do.
int SuperviseElastic(const LaunchOptions& opts, const LaunchEnv& env) {
  proto::Config cfg;
  Status st = runtime::LoadConfig(opts.config, opts.sets, &cfg);
  if (!st.ok()) return UsageError(st);
  ElasticHosts hosts(opts.elastic_min, opts.elastic_max, std::chrono::seconds(opts.rejoin_after));
  std::vector<HostSlots> listed, active;
  st = ListHosts(opts, &listed);
  if (!st.ok()) return ExitCodeFor(st);
  hosts.SetListed(listed);
  st = hosts.Active(&active);
  if (!st.ok()) return UsageError(st);
  if (static_cast<int>(active.size()) < opts.elastic_max) {
    return UsageError(Status::InvalidArgument("--nnodes " + std::to_string(opts.elastic_min) + ":" +
                                              std::to_string(opts.elastic_max) + ": only " +
                                              std::to_string(listed.size()) + " host(s) listed; the full set is MAX"));
  }
  LaunchCommand full;
  LaunchOptions full_opts = opts;
  full_opts.hosts = HostList(active);
  full_opts.hostfile.clear();
  st = BuildLaunchCommand(full_opts, env, 0, &full);
  if (!st.ok()) return ExitCodeFor(st);
  const int full_world = full.placement.world_size();
  if (opts.dry_run) {
    std::printf("%s\n", FormatCommandLine(full).c_str());
    return kExitOk;
  }
  std::unique_ptr<SupervisorScope> scope;
  st = SupervisorScope::Create(&scope);
  if (!st.ok()) return ExitCodeFor(st);
  int failures = 0;  // attempts that count against --max-restarts
  for (int attempt = 0;; ++attempt) {
    if (attempt > 0) {
      st = ListHosts(opts, &listed);
      if (st.ok()) hosts.SetListed(listed);
    }
    st = hosts.Active(&active);
    if (!st.ok()) {
      DT_LOG_ERROR(kLauncher, "{}: stopping", st.message());
      return kExitFailure;
    }
    LaunchCommand cmd;
    st = ElasticAttempt(opts, env, active, full_world, cfg, attempt, &cmd);
    if (!st.ok()) return ExitCodeFor(st);
    DT_LOG_INFO(kLauncher, "elastic attempt {} on {} host(s), world size {}: {}", attempt + 1, active.size(),
                cmd.placement.world_size(), FormatCommandLine(cmd));
    OutputRouter::Options ropts;
    ropts.backend = cmd.backend;
    ropts.log_dir = opts.log_dir;
    ropts.attempt = attempt;
    OutputRouter router(ropts);
    AttemptResult result;
    std::vector<std::string> answered;
    bool grow = false;
    {
      GrowWatcher watcher(opts, &hosts, active);
      st = RunAttempt(cmd, opts.grace_seconds, scope.get(), &router, &result);
      grow = watcher.asked();
      if (grow) answered = watcher.answered();
    }
    if (!st.ok()) return ExitCodeFor(st);
    if (result.exit_code == kExitOk) {
      DT_LOG_INFO(kLauncher, "the job finished on {} host(s)", active.size());
      return kExitOk;
    }
    const RankExit cause = RootCause(router, cmd, result);
    const int code = cause.ProcessExitCode();
    if (grow && code == kExitPreempted && result.stop_signal == 0) {
      for (const std::string& h : answered) hosts.Rejoin(h);
      DT_LOG_WARN(kLauncher,
                  "growing: restarting from the checkpoint just saved with {} back (not counted against "
                  "--max-restarts)",
                  answered.front() + (answered.size() > 1 ? ", ..." : ""));
      continue;
    }
    if (result.stop_signal != 0 || code == kExitPreempted || code == kExitUsage) {
      return AfterFailure(code, result.stop_signal, failures, opts.max_restarts,
                          cause.rank >= 0 ? "rank " + std::to_string(cause.rank) : cmd.argv[0]);
    }
    // Which hosts are lost: those of the attempt that no longer answer, and the root-cause rank's host when
    // it died by a signal (killed: a host going away takes its processes with it).
    std::vector<std::string> lost;
    for (const HostSlots& h : active) {
      const bool killed = cause.rank >= 0 && cause.signal > 0 && cmd.placement.HostOfRank(cause.rank) == h.name;
      if (killed || !HostAnswers(h.name)) lost.push_back(h.name);
    }
    ReportFailure(cause, router, cmd, failures, opts.max_restarts + 1);
    if (lost.empty() || lost.size() == active.size()) {
      const int exit_code = AfterFailure(code, 0, failures, opts.max_restarts,
                                         cause.rank >= 0 ? "rank " + std::to_string(cause.rank) : cmd.argv[0]);
      if (exit_code >= 0) return exit_code;
      ++failures;
      continue;
    }
    std::string names;
    for (const std::string& h : lost) {
      hosts.Drop(h, std::chrono::steady_clock::now());
      names += (names.empty() ? "" : ", ") + h;
    }
    DT_LOG_WARN(kLauncher,
                "lost host(s) {}: restarting on the survivors from the newest checkpoint (not counted against "
                "--max-restarts; a lost host may rejoin after {} s)",
                names, opts.rejoin_after);
  }
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
  if (opts.elastic_min > 0) return SuperviseElastic(opts, env);
  LaunchCommand cmd;
  st = BuildLaunchCommand(opts, env, 0, &cmd);
  if (!st.ok()) return ExitCodeFor(st);
  // The whole run is checked here, once, before any rank starts (runtime/train/run_check.h) — when the workers
  // are this binary: another worker program (DTRAIN_WORKER_BIN) reads its config its own way and checks it.
  st = env.worker_bin == env.self_bin ? CheckRunBeforeStart(opts, env, cmd) : Status::OK();
  if (!st.ok()) {
    std::fprintf(stderr, "dtrain launch: error: %s\n", st.ToString().c_str());
    return kExitUsage;
  }
  if (opts.dry_run) {
    std::printf("%s\n", FormatCommandLine(cmd).c_str());
    std::fflush(stdout);
    return kExitOk;
  }
  if (!opts.log_dir.empty()) {
    st = MakeDirs(opts.log_dir);
    if (!st.ok()) return ExitCodeFor(st);
  }
  if (cmd.backend == Backend::kNode) return SuperviseNode(opts, env);
  st = CheckInPath(cmd.argv[0]);
  if (!st.ok()) return ExitCodeFor(st);
  st = ProbeSshHosts(cmd.ssh_hosts);
  if (!st.ok()) return UsageError(st);  // not restartable: a host that cannot be reached
  return Supervise(opts, env);
}

}  // namespace dtrain::launcher
