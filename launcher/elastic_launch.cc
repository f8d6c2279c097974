#include "launcher/elastic_launch.h"

#include <chrono>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "core/check.h"
#include "core/clock.h"
#include "core/logging.h"
#include "launcher/attempt_log.h"
#include "launcher/attempt_loop.h"
#include "launcher/attempt_outcome.h"
#include "launcher/elastic_plan.h"
#include "launcher/exit_codes.h"
#include "launcher/host_probe.h"
#include "launcher/host_watch.h"
#include "launcher/launch_backend.h"
#include "launcher/restart_policy.h"
#include "runtime/config/config.h"

namespace dtrain::launcher {
namespace {

using Clock = std::chrono::steady_clock;

std::string HostList(const std::vector<HostSlots>& hosts) {
  std::string s;
  for (const HostSlots& h : hosts)
    s += (s.empty() ? "" : ",") + h.name + (h.slots > 0 ? ":" + std::to_string(h.slots) : "");
  return s;
}

std::string Join(const std::vector<std::string>& names) {
  std::string s;
  for (const std::string& n : names) s += (s.empty() ? "" : ", ") + n;
  return s;
}

// A steady-clock instant as Unix seconds (the records' clock).
double UnixAt(Clock::time_point t) { return WallSeconds() - std::chrono::duration<double>(Clock::now() - t).count(); }

// The options of one attempt on `active`: an mpirun over those hosts, with the batch re-planned for its world
// size (launcher/elastic_plan.h).
Status ElasticAttempt(const LaunchOptions& opts, const LaunchEnv& env, const std::vector<HostSlots>& active,
                      int full_world, const proto::Config& cfg, int attempt, LaunchCommand* cmd) {
  LaunchOptions o = opts;
  o.hosts = HostList(active);
  o.hostfile.clear();
  o.nnodes = 0;
  LaunchCommand probe;
  DT_RETURN_IF_ERROR(BuildLaunchCommand(o, env, attempt, &probe));
  const int world = probe.placement.world_size();
  DT_RETURN_IF_ERROR(AttemptBatchSets(cfg, full_world, world,
                                      opts.elastic_batch == "per-gpu" ? ElasticBatch::kPerGpu : ElasticBatch::kGlobal,
                                      &o.sets));
  return BuildLaunchCommand(o, env, attempt, cmd);
}

// The hosts of the ranks in `ranks` (no duplicates).
std::vector<std::string> HostsOfRanks(const LaunchCommand& cmd, const std::vector<int>& ranks) {
  std::vector<std::string> out;
  for (int r : ranks) {
    const std::string h = cmd.placement.HostOfRank(r);
    bool seen = h.empty();
    for (const std::string& o : out) seen = seen || o == h;
    if (!seen) out.push_back(h);
  }
  return out;
}

// Fewer than MIN hosts are usable: with --wait-for-hosts S, probes the dropped hosts every 2 s (each once its
// --rejoin-after time has come; the host list re-read each round) until MIN of them answer, at most S s. The
// restart-everything-on-the-same-hosts way to run a spot job is --nnodes N:N with a long wait.
Status WaitForHosts(const LaunchOptions& opts, ElasticHosts* hosts, std::vector<HostSlots>* active) {
  Status st = hosts->Active(active);
  if (opts.wait_for_hosts <= 0) return st;
  DT_LOG_WARN(kLauncher, "{}: waiting up to {} s for hosts to answer again", st.message(), opts.wait_for_hosts);
  const auto deadline = Clock::now() + std::chrono::seconds(opts.wait_for_hosts);
  while (!st.ok() && Clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::seconds(2));
    std::vector<HostSlots> listed;
    if (ListHosts(opts, &listed).ok()) hosts->SetListed(listed);
    for (const std::string& h : hosts->RejoinCandidates(Clock::now())) {
      if (!HostAnswers(h)) {
        hosts->Silent(h);
      } else if (!hosts->MustVanishFirst(h)) {
        DT_LOG_WARN(kLauncher, "host {} answers again", h);
        hosts->Rejoin(h);
      }
    }
    st = hosts->Active(active);
  }
  return st;
}

// The restart policy over --hosts/--hostfile (launcher/elastic_launch.h says what each end means).
class HostfileElastic : public RestartPolicy {
 public:
  HostfileElastic(const LaunchOptions& opts, const LaunchEnv& env, const proto::Config& cfg, ElasticHosts hosts,
                  int full_world)
      : opts_(opts), env_(env), cfg_(cfg), hosts_(std::move(hosts)), full_world_(full_world), log_(cfg.run().dir()) {}

  int Plan(int attempt, int failures, AttemptPlan* plan) override {
    std::vector<HostSlots> listed;
    if (attempt > 0 && ListHosts(opts_, &listed).ok()) hosts_.SetListed(listed);
    Status st = hosts_.Active(&active_);
    if (!st.ok()) st = WaitForHosts(opts_, &hosts_, &active_);
    if (!st.ok()) {
      DT_LOG_ERROR(kLauncher, "{}: stopping", st.message());
      return kExitFailure;
    }
    st = ElasticAttempt(opts_, env_, active_, full_world_, cfg_, attempt, &plan->cmd);
    if (!st.ok()) return LaunchError(st);
    world_ = plan->cmd.placement.world_size();
    plan->title = "elastic attempt " + std::to_string(attempt + 1) + " on " + std::to_string(active_.size()) +
                  " host(s), world size " + std::to_string(world_);
    plan->when = "elastic attempt " + std::to_string(attempt + 1) + "; " + std::to_string(failures) + " of " +
                 std::to_string(opts_.max_restarts) + " restarts used";
    return -1;
  }

  void Begin(const AttemptPlan& /*plan*/, SupervisorScope* scope) override {
    start_ = WallSeconds();
    noticed_ = 0;
    watch_ = std::make_unique<HostWatch>(opts_, HostWatchOptions(), &hosts_, active_, scope);
  }

  void End() override {
    watch_->Stop();
    grow_ = watch_->grow_asked();
    answered_ = watch_->answered();
    silent_ = watch_->lost();
    if (!silent_.empty()) noticed_ = UnixAt(watch_->lost_at());
    if (grow_ && silent_.empty()) noticed_ = UnixAt(watch_->grow_asked_at());
    watch_.reset();
    if (noticed_ == 0) noticed_ = WallSeconds();
  }

  AttemptVerdict Classify(const AttemptPlan& plan, const AttemptEnd& end) override {
    AttemptVerdict v;
    v.kind = BasicKind(end);
    if (v.kind == AttemptKind::kDone) return v;
    if (!silent_.empty()) {  // also when the attempt ended on its own before the stop request reached it
      return {AttemptKind::kLostHost, silent_, /*report=*/false};
    }
    const bool saved = end.exit_code == kExitPreempted && end.stop_signal == 0;
    const std::vector<std::string> noticing = HostsOfRanks(plan.cmd, end.notice_ranks);
    if (saved && !noticing.empty()) return {AttemptKind::kNotice, noticing, /*report=*/false};
    if (saved && grow_) return {AttemptKind::kGrow, {}, /*report=*/false};
    if (v.kind == AttemptKind::kStopped) return v;
    // Which hosts are lost: those of the attempt that no longer answer, and the root-cause rank's host when
    // it died by a signal (killed: a host going away takes its processes with it).
    const RankExit& cause = end.cause;
    std::vector<std::string> lost;
    for (const HostSlots& h : active_) {
      const bool killed = cause.rank >= 0 && cause.signal > 0 && plan.cmd.placement.HostOfRank(cause.rank) == h.name;
      bool daemon_lost = false;  // mpirun lost its daemon there: the host's processes are gone, if not the host
      for (const std::string& d : end.lost_daemon_hosts) daemon_lost = daemon_lost || d == h.name;
      if (killed || daemon_lost || !HostAnswers(h.name)) lost.push_back(h.name);
    }
    if (lost.empty() || lost.size() == active_.size()) return v;
    return {AttemptKind::kLostHost, lost, /*report=*/true};
  }

  void Apply(const AttemptPlan& plan, const AttemptEnd& /*end*/, const AttemptVerdict& verdict) override {
    log_.Write(plan.attempt, active_, world_, start_, noticed_, AttemptKindName(verdict.kind), verdict.hosts);
    switch (verdict.kind) {
      case AttemptKind::kDone:
        DT_LOG_INFO(kLauncher, "the job finished on {} host(s)", active_.size());
        break;
      case AttemptKind::kLostHost:
        for (const std::string& h : verdict.hosts) hosts_.Drop(h, Clock::now());
        DT_LOG_WARN(kLauncher,
                    "lost host(s) {}{}: restarting on the survivors from the newest checkpoint (not counted against "
                    "--max-restarts; a lost host may rejoin after {} s)",
                    Join(verdict.hosts), silent_.empty() ? "" : " (silent)", opts_.rejoin_after);
        break;
      case AttemptKind::kNotice:
        // It answers until it is reclaimed: not a host to grow onto.
        for (const std::string& h : verdict.hosts) hosts_.Drop(h, Clock::now(), /*vanish_first=*/true);
        for (const std::string& h : answered_) hosts_.Rejoin(h);
        DT_LOG_WARN(kLauncher,
                    "spot notice on host(s) {}: the job saved a checkpoint; restarting on the other hosts (not "
                    "counted against --max-restarts; such a host may rejoin after {} s)",
                    Join(verdict.hosts), opts_.rejoin_after);
        break;
      case AttemptKind::kGrow:
        for (const std::string& h : answered_) hosts_.Rejoin(h);
        DT_LOG_WARN(kLauncher,
                    "growing: restarting from the checkpoint just saved with {} back (not counted against "
                    "--max-restarts)",
                    answered_.front() + (answered_.size() > 1 ? ", ..." : ""));
        break;
      case AttemptKind::kFailure:
      case AttemptKind::kStopped:
        break;
    }
  }

 private:
  const LaunchOptions& opts_;
  const LaunchEnv& env_;
  const proto::Config& cfg_;
  ElasticHosts hosts_;
  const int full_world_;
  AttemptLog log_;
  // The attempt in flight: its hosts and world size, its start, and what the host watch saw.
  std::vector<HostSlots> active_;
  int world_ = 0;
  double start_ = 0, noticed_ = 0;
  std::unique_ptr<HostWatch> watch_;
  bool grow_ = false;
  std::vector<std::string> answered_, silent_;
};

}  // namespace

int SuperviseElastic(const LaunchOptions& opts, const LaunchEnv& env) {
  proto::Config cfg;
  Status st = runtime::LoadConfig(opts.config, opts.sets, &cfg);
  if (!st.ok()) return UsageError(st);
  ElasticHosts hosts(opts.elastic_min, opts.elastic_max, std::chrono::seconds(opts.rejoin_after));
  std::vector<HostSlots> listed, active;
  st = ListHosts(opts, &listed);
  if (!st.ok()) return LaunchError(st);
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
  if (!st.ok()) return LaunchError(st);
  if (opts.dry_run) {
    std::printf("%s\n", FormatCommandLine(full).c_str());
    return kExitOk;
  }
  HostfileElastic policy(opts, env, cfg, std::move(hosts), full.placement.world_size());
  const std::unique_ptr<LaunchBackend> backend = MakeLaunchBackend(opts, env, Backend::kMpirun);
  return RunWithRestarts(backend.get(), &policy, opts.max_restarts);
}

}  // namespace dtrain::launcher
