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
#include "launcher/attempt_loop.h"
#include "launcher/attempt_outcome.h"
#include "launcher/elastic_plan.h"
#include "launcher/exit_codes.h"
#include "launcher/launch_backend.h"
#include "launcher/restart_policy.h"
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

// The restart policy inside a Slurm allocation (launcher/slurm_elastic.h).
class SlurmElastic : public RestartPolicy {
 public:
  SlurmElastic(const LaunchOptions& opts, const LaunchEnv& env, const proto::Config& cfg, std::string job,
               ElasticHosts hosts, int nproc)
      : opts_(opts),
        env_(env),
        cfg_(cfg),
        job_(std::move(job)),
        hosts_(std::move(hosts)),
        nproc_(nproc),
        full_world_(opts.elastic_max * nproc),
        log_(cfg.run().dir()) {}

  int Plan(int attempt, int failures, AttemptPlan* plan) override {
    Status st = hosts_.Active(&active_);
    if (!st.ok()) {
      DT_LOG_ERROR(kLauncher, "{}: stopping", st.message());
      return kExitFailure;
    }
    st = AttemptCommand(attempt, &plan->cmd);
    if (!st.ok()) return LaunchError(st);
    world_ = plan->cmd.placement.world_size();
    plan->title = "elastic attempt " + std::to_string(attempt + 1) + " on " + std::to_string(active_.size()) +
                  " node(s) of Slurm job " + job_ + ", world size " + std::to_string(world_);
    plan->when = "elastic attempt " + std::to_string(attempt + 1) + "; " + std::to_string(failures) + " of " +
                 std::to_string(opts_.max_restarts) + " restarts used";
    return -1;
  }

  void Begin(const AttemptPlan& /*plan*/, SupervisorScope* /*scope*/) override { start_ = WallSeconds(); }
  void End() override { noticed_ = WallSeconds(); }

  AttemptVerdict Classify(const AttemptPlan& /*plan*/, const AttemptEnd& end) override {
    AttemptVerdict v;
    v.kind = BasicKind(end);
    if (v.kind != AttemptKind::kFailure) return v;
    // Lost: the nodes srun reported a node failure on, and those Slurm took out of the job.
    std::vector<std::string> lost, now;
    const Status nodes_st = JobNodes(job_, &now);
    if (!nodes_st.ok()) DT_LOG_WARN(kLauncher, "{}", nodes_st.message());
    for (const HostSlots& h : active_) {
      bool failed = false, held = !nodes_st.ok();
      for (const std::string& d : end.lost_daemon_hosts) failed = failed || d == h.name;
      for (const std::string& n : now) held = held || n == h.name;
      if (failed || !held) lost.push_back(h.name);
    }
    if (lost.empty() || lost.size() == active_.size()) return v;
    return {AttemptKind::kLostHost, lost, /*report=*/true};
  }

  void Apply(const AttemptPlan& plan, const AttemptEnd& /*end*/, const AttemptVerdict& verdict) override {
    log_.Write(plan.attempt, active_, world_, start_, noticed_, AttemptKindName(verdict.kind), verdict.hosts);
    if (verdict.kind == AttemptKind::kDone) {
      DT_LOG_INFO(kLauncher, "the job finished on {} node(s)", active_.size());
    } else if (verdict.kind == AttemptKind::kLostHost) {
      // Logged before the loop's failure report: the rank reported there is one that lost its peers, not the cause.
      DT_LOG_WARN(kLauncher,
                  "lost node(s) {} of Slurm job {}: restarting on the nodes the job still holds from the newest "
                  "checkpoint (not counted against --max-restarts; Slurm gives a running job no node back)",
                  Join(verdict.hosts), job_);
      for (const std::string& h : verdict.hosts) hosts_.Drop(h, ElasticHosts::Clock::now());
    }
  }

  // The command of one attempt on the active nodes: srun on those nodes, the batch re-planned for their world size.
  Status AttemptCommand(int attempt, LaunchCommand* cmd) {
    DT_RETURN_IF_ERROR(hosts_.Active(&active_));
    LaunchOptions o = opts_;
    o.backend = Backend::kSrun;
    o.nnodes = static_cast<int>(active_.size());
    o.nproc_per_node = std::to_string(nproc_);
    o.nproc_given = true;
    o.srun_nodelist.clear();
    for (const HostSlots& h : active_) o.srun_nodelist.push_back(h.name);
    DT_RETURN_IF_ERROR(
        AttemptBatchSets(cfg_, full_world_, o.nnodes * nproc_,
                         opts_.elastic_batch == "per-gpu" ? ElasticBatch::kPerGpu : ElasticBatch::kGlobal, &o.sets));
    return BuildLaunchCommand(o, env_, attempt, cmd);
  }

 private:
  const LaunchOptions& opts_;
  const LaunchEnv& env_;
  const proto::Config& cfg_;
  const std::string job_;
  ElasticHosts hosts_;
  const int nproc_;
  const int full_world_;
  AttemptLog log_;
  // The attempt in flight.
  std::vector<HostSlots> active_;
  int world_ = 0;
  double start_ = 0, noticed_ = 0;
};

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
  SlurmElastic policy(opts, env, cfg, *job, std::move(hosts), nproc);
  if (opts.dry_run) {
    LaunchCommand cmd;
    st = policy.AttemptCommand(0, &cmd);
    if (!st.ok()) return LaunchError(st);
    std::printf("%s\n", FormatCommandLine(cmd).c_str());
    return kExitOk;
  }
  const std::unique_ptr<LaunchBackend> backend = MakeLaunchBackend(opts, env, Backend::kSrun);
  return RunWithRestarts(backend.get(), &policy, opts.max_restarts);
}

}  // namespace dtrain::launcher
