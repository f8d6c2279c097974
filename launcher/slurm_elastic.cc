#include "launcher/slurm_elastic.h"

#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "core/check.h"
#include "core/clock.h"
#include "core/logging.h"
#include "launcher/attempt_log.h"
#include "launcher/attempt_outcome.h"
#include "launcher/elastic_plan.h"
#include "launcher/exit_codes.h"
#include "launcher/output_router.h"
#include "launcher/supervisor.h"
#include "runtime/config/config.h"

namespace dtrain::launcher {
namespace {

std::string Join(const std::vector<std::string>& names, const char* sep = ", ") {
  std::string s;
  for (const std::string& n : names) s += (s.empty() ? "" : sep) + n;
  return s;
}

const std::string* FindVar(const LaunchEnv& env, const std::string& name) {
  for (const auto& kv : env.vars) {
    if (kv.first == name) return &kv.second;
  }
  return nullptr;
}

// Runs `args` (a Slurm client, bounded by coreutils' timeout) and returns its stdout; Unavailable with its stderr when
// it fails.
Status Capture(const std::vector<std::string>& args, std::string* out) {
  std::vector<std::string> bounded = {"timeout", "20"};
  bounded.insert(bounded.end(), args.begin(), args.end());
  SessionChild child;
  DT_RETURN_IF_ERROR(SpawnSession(bounded, {}, SIGTERM, &child));
  std::string err;
  char buf[4096];
  for (auto [fd, text] : {std::pair<int, std::string*>{child.out_fd, out}, {child.err_fd, &err}}) {
    for (ssize_t n; (n = read(fd, buf, sizeof(buf))) != 0;) {
      if (n > 0) text->append(buf, n);
      if (n < 0 && errno != EINTR) break;
    }
    close(fd);
  }
  int ws = 0;
  while (waitpid(child.pid, &ws, 0) < 0 && errno == EINTR) {
  }
  const int code = ExitCodeOfWaitStatus(ws);
  if (code != 0) {
    return Status::Unavailable("`" + Join(args, " ") + "` exited " + std::to_string(code) + ": " + err);
  }
  return Status::OK();
}

// The nodes job `job` holds now, in Slurm's order ("n1", "n2"): a node Slurm took out of the job is not among them.
Status JobNodes(const std::string& job, std::vector<std::string>* nodes) {
  std::string list, names;
  DT_RETURN_IF_ERROR(Capture({"squeue", "-h", "-j", job, "-o", "%N"}, &list));
  while (!list.empty() && (list.back() == '\n' || list.back() == ' ')) list.pop_back();
  if (list.empty()) return Status::Unavailable("squeue -j " + job + ": the job holds no nodes (has it ended?)");
  DT_RETURN_IF_ERROR(Capture({"scontrol", "show", "hostnames", list}, &names));
  nodes->clear();
  std::istringstream in(names);
  for (std::string n; in >> n;) nodes->push_back(n);
  return Status::OK();
}

// Ranks per node: --nproc-per-node N|gpu|cpu, else the allocation's SLURM_NTASKS_PER_NODE when it is one number,
// else GPUs if any, else 2.
Status RanksPerNode(const LaunchOptions& opts, const LaunchEnv& env, int* nproc) {
  const std::string* per_node = FindVar(env, "SLURM_NTASKS_PER_NODE");
  if (!opts.nproc_given && per_node != nullptr && ParsePositiveInt(*per_node, nproc)) return Status::OK();
  bool slots_override = false;
  return ResolveNproc(opts, env, nproc, &slots_override);
}

}  // namespace

int SuperviseSlurmElastic(const LaunchOptions& opts, const LaunchEnv& env) {
  proto::Config cfg;
  Status st = runtime::LoadConfig(opts.config, opts.sets, &cfg);
  if (!st.ok()) return UsageError(st);
  const std::string* job = FindVar(env, "SLURM_JOB_ID");
  if (!env.in_slurm || job == nullptr) {
    return UsageError(Status::InvalidArgument(
        "--nnodes MIN:MAX with srun: run it inside a Slurm allocation (sbatch --no-kill / salloc --no-kill), or give "
        "--hosts/--hostfile for mpirun"));
  }
  int nproc = 0;
  st = RanksPerNode(opts, env, &nproc);
  if (!st.ok()) return UsageError(st);
  std::vector<std::string> nodes;
  st = JobNodes(*job, &nodes);
  if (!st.ok()) return LaunchError(st);
  ElasticHosts hosts(opts.elastic_min, opts.elastic_max, std::chrono::seconds(0));
  std::vector<HostSlots> listed, active;
  for (const std::string& n : nodes) listed.push_back({n, nproc});
  hosts.SetListed(listed);
  st = hosts.Active(&active);
  if (!st.ok()) return UsageError(st);
  if (static_cast<int>(active.size()) < opts.elastic_max) {
    DT_LOG_WARN(kLauncher,
                "--nnodes {}:{}: the allocation has {} node(s), fewer than MAX: the job runs smaller (the global batch "
                "of {} nodes kept); a requeue (exit 75) is the way to a full allocation",
                opts.elastic_min, opts.elastic_max, active.size(), opts.elastic_max);
  }
  const int full_world = opts.elastic_max * nproc;
  // The options of one attempt on `active`: srun on those nodes, the batch re-planned for their world size.
  const auto attempt_command = [&](int attempt, LaunchCommand* cmd) {
    LaunchOptions o = opts;
    o.backend = Backend::kSrun;
    o.nnodes = static_cast<int>(active.size());
    o.nproc_per_node = std::to_string(nproc);
    o.nproc_given = true;
    o.srun_nodelist.clear();
    for (const HostSlots& h : active) o.srun_nodelist.push_back(h.name);
    DT_RETURN_IF_ERROR(AttemptBatchSets(cfg, full_world, o.nnodes * nproc,
                                        opts.elastic_batch == "per-gpu" ? ElasticBatch::kPerGpu : ElasticBatch::kGlobal,
                                        &o.sets));
    return BuildLaunchCommand(o, env, attempt, cmd);
  };
  if (opts.dry_run) {
    LaunchCommand cmd;
    st = attempt_command(0, &cmd);
    if (!st.ok()) return LaunchError(st);
    std::printf("%s\n", FormatCommandLine(cmd).c_str());
    return kExitOk;
  }
  std::unique_ptr<SupervisorScope> scope;
  st = SupervisorScope::Create(&scope);
  if (!st.ok()) return LaunchError(st);
  AttemptLog log(cfg.run().dir());
  int failures = 0;  // attempts that count against --max-restarts
  for (int attempt = 0;; ++attempt) {
    st = hosts.Active(&active);
    if (!st.ok()) {
      DT_LOG_ERROR(kLauncher, "{}: stopping", st.message());
      return kExitFailure;
    }
    LaunchCommand cmd;
    st = attempt_command(attempt, &cmd);
    if (!st.ok()) return LaunchError(st);
    const int world = cmd.placement.world_size();
    DT_LOG_INFO(kLauncher, "elastic attempt {} on {} node(s) of Slurm job {}, world size {}: {}", attempt + 1,
                active.size(), *job, world, FormatCommandLine(cmd));
    OutputRouter::Options ropts;
    ropts.backend = cmd.backend;
    ropts.log_dir = opts.log_dir;
    ropts.attempt = attempt;
    OutputRouter router(ropts);
    AttemptResult result;
    const double start = WallSeconds();
    st = RunAttempt(cmd, opts.grace_seconds, scope.get(), &router, &result);
    if (!st.ok()) return LaunchError(st);
    const double noticed = WallSeconds();
    const auto record = [&](const std::string& reason, const std::vector<std::string>& lost) {
      log.Write(attempt, active, world, start, noticed, reason, lost);
    };
    if (result.exit_code == kExitOk) {
      record("done", {});
      DT_LOG_INFO(kLauncher, "the job finished on {} node(s)", active.size());
      return kExitOk;
    }
    const RankExit cause = RootCause(router, cmd, result);
    const int code = cause.ProcessExitCode();
    const std::string who = cause.rank >= 0 ? "rank " + std::to_string(cause.rank) : cmd.argv[0];
    if (result.stop_signal != 0 || code == kExitPreempted || code == kExitUsage) {
      record("stopped", {});
      return AfterFailure(code, result.stop_signal, failures, opts.max_restarts, who);
    }
    // Lost: the nodes srun reported a node failure on, and those Slurm took out of the job.
    std::vector<std::string> lost, now;
    const Status nodes_st = JobNodes(*job, &now);
    if (!nodes_st.ok()) DT_LOG_WARN(kLauncher, "{}", nodes_st.message());
    for (const HostSlots& h : active) {
      bool failed = false, held = !nodes_st.ok();
      for (const std::string& d : router.lost_daemon_hosts()) failed = failed || d == h.name;
      for (const std::string& n : now) held = held || n == h.name;
      if (failed || !held) lost.push_back(h.name);
    }
    const std::string when = "elastic attempt " + std::to_string(attempt + 1) + "; " + std::to_string(failures) +
                             " of " + std::to_string(opts.max_restarts) + " restarts used";
    if (lost.empty() || lost.size() == active.size()) {
      ReportFailure(cause, router, cmd, when);
      record("failure", {});
      const int exit_code = AfterFailure(code, 0, failures, opts.max_restarts, who);
      if (exit_code >= 0) return exit_code;
      ++failures;
      continue;
    }
    // The lost node first: the rank reported below is one that lost its peers there, not the cause.
    DT_LOG_WARN(kLauncher,
                "lost node(s) {} of Slurm job {}: restarting on the nodes the job still holds from the newest "
                "checkpoint (not counted against --max-restarts; Slurm gives a running job no node back)",
                Join(lost), *job);
    ReportFailure(cause, router, cmd, when);
    record("lost_host", lost);
    for (const std::string& h : lost) hosts.Drop(h, ElasticHosts::Clock::now());
  }
}

}  // namespace dtrain::launcher
