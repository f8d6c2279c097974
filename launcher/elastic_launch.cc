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
#include "launcher/attempt_outcome.h"
#include "launcher/elastic_plan.h"
#include "launcher/exit_codes.h"
#include "launcher/host_probe.h"
#include "launcher/host_watch.h"
#include "launcher/output_router.h"
#include "launcher/supervisor.h"
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
  const int full_world = full.placement.world_size();
  if (opts.dry_run) {
    std::printf("%s\n", FormatCommandLine(full).c_str());
    return kExitOk;
  }
  std::unique_ptr<SupervisorScope> scope;
  st = SupervisorScope::Create(&scope);
  if (!st.ok()) return LaunchError(st);
  AttemptLog log(cfg.run().dir());
  int failures = 0;  // attempts that count against --max-restarts
  for (int attempt = 0;; ++attempt) {
    if (attempt > 0) {
      st = ListHosts(opts, &listed);
      if (st.ok()) hosts.SetListed(listed);
    }
    st = hosts.Active(&active);
    if (!st.ok()) st = WaitForHosts(opts, &hosts, &active);
    if (!st.ok()) {
      DT_LOG_ERROR(kLauncher, "{}: stopping", st.message());
      return kExitFailure;
    }
    LaunchCommand cmd;
    st = ElasticAttempt(opts, env, active, full_world, cfg, attempt, &cmd);
    if (!st.ok()) return LaunchError(st);
    const int world = cmd.placement.world_size();
    DT_LOG_INFO(kLauncher, "elastic attempt {} on {} host(s), world size {}: {}", attempt + 1, active.size(), world,
                FormatCommandLine(cmd));
    OutputRouter::Options ropts;
    ropts.backend = cmd.backend;
    ropts.log_dir = opts.log_dir;
    ropts.attempt = attempt;
    OutputRouter router(ropts);
    AttemptResult result;
    const double start = WallSeconds();
    std::vector<std::string> answered, silent;
    bool grow = false;
    double noticed = 0;
    {
      HostWatch watch(opts, HostWatchOptions(), &hosts, active, scope.get());
      st = RunAttempt(cmd, opts.grace_seconds, scope.get(), &router, &result);
      watch.Stop();
      grow = watch.grow_asked();
      answered = watch.answered();
      silent = watch.lost();
      if (!silent.empty()) noticed = UnixAt(watch.lost_at());
      if (grow && silent.empty()) noticed = UnixAt(watch.grow_asked_at());
    }
    if (!st.ok()) return LaunchError(st);
    if (noticed == 0) noticed = WallSeconds();
    auto record = [&](const std::string& reason, const std::vector<std::string>& lost) {
      log.Write(attempt, active, world, start, noticed, reason, lost);
    };
    const auto drop = [&](const std::vector<std::string>& lost, bool vanish_first = false) {
      for (const std::string& h : lost) hosts.Drop(h, Clock::now(), vanish_first);
    };
    if (result.exit_code == kExitOk) {
      record("done", {});
      DT_LOG_INFO(kLauncher, "the job finished on {} host(s)", active.size());
      return kExitOk;
    }
    if (!silent.empty()) {  // also when the attempt ended on its own before the stop request reached it
      record("lost_host", silent);
      drop(silent);
      DT_LOG_WARN(kLauncher,
                  "lost host(s) {} (silent): restarting on the survivors from the newest checkpoint (not counted "
                  "against --max-restarts; a lost host may rejoin after {} s)",
                  Join(silent), opts.rejoin_after);
      continue;
    }
    const RankExit cause = RootCause(router, cmd, result);
    const int code = cause.ProcessExitCode();
    const std::vector<std::string> noticing = HostsOfRanks(cmd, router.notice_ranks());
    if (code == kExitPreempted && result.stop_signal == 0 && !noticing.empty()) {
      record("notice", noticing);
      drop(noticing, /*vanish_first=*/true);  // it answers until it is reclaimed: not a host to grow onto
      for (const std::string& h : answered) hosts.Rejoin(h);
      DT_LOG_WARN(kLauncher,
                  "spot notice on host(s) {}: the job saved a checkpoint; restarting on the other hosts (not counted "
                  "against --max-restarts; such a host may rejoin after {} s)",
                  Join(noticing), opts.rejoin_after);
      continue;
    }
    if (grow && code == kExitPreempted && result.stop_signal == 0) {
      record("grow", {});
      for (const std::string& h : answered) hosts.Rejoin(h);
      DT_LOG_WARN(kLauncher,
                  "growing: restarting from the checkpoint just saved with {} back (not counted against "
                  "--max-restarts)",
                  answered.front() + (answered.size() > 1 ? ", ..." : ""));
      continue;
    }
    const std::string who = cause.rank >= 0 ? "rank " + std::to_string(cause.rank) : cmd.argv[0];
    if (result.stop_signal != 0 || code == kExitPreempted || code == kExitUsage) {
      record("stopped", {});
      return AfterFailure(code, result.stop_signal, failures, opts.max_restarts, who);
    }
    // Which hosts are lost: those of the attempt that no longer answer, and the root-cause rank's host when
    // it died by a signal (killed: a host going away takes its processes with it).
    std::vector<std::string> lost;
    for (const HostSlots& h : active) {
      const bool killed = cause.rank >= 0 && cause.signal > 0 && cmd.placement.HostOfRank(cause.rank) == h.name;
      bool daemon_lost = false;  // mpirun lost its daemon there: the host's processes are gone, if not the host
      for (const std::string& d : router.lost_daemon_hosts()) daemon_lost = daemon_lost || d == h.name;
      if (killed || daemon_lost || !HostAnswers(h.name)) lost.push_back(h.name);
    }
    const std::string when = "elastic attempt " + std::to_string(attempt + 1) + "; " + std::to_string(failures) +
                             " of " + std::to_string(opts.max_restarts) + " restarts used";
    ReportFailure(cause, router, cmd, when);
    if (lost.empty() || lost.size() == active.size()) {
      record("failure", {});
      const int exit_code = AfterFailure(code, 0, failures, opts.max_restarts, who);
      if (exit_code >= 0) return exit_code;
      ++failures;
      continue;
    }
    record("lost_host", lost);
    drop(lost);
    DT_LOG_WARN(kLauncher,
                "lost host(s) {}: restarting on the survivors from the newest checkpoint (not counted against "
                "--max-restarts; a lost host may rejoin after {} s)",
                Join(lost), opts.rejoin_after);
  }
}

}  // namespace dtrain::launcher
