#include "launcher/host_watch.h"

#include <signal.h>
#include <unistd.h>

#include <future>

#include "core/logging.h"
#include "launcher/host_probe.h"
#include "launcher/hostfile.h"

namespace dtrain::launcher {
namespace {

constexpr auto kLivenessEvery = std::chrono::seconds(1);
constexpr double kLivenessTimeoutS = 1.0;
constexpr auto kGrowEvery = std::chrono::seconds(2);

}  // namespace

Status ListHosts(const LaunchOptions& opts, std::vector<HostSlots>* out) {
  return opts.hostfile.empty() ? ParseHostList(opts.hosts, out) : ParseHostfile(opts.hostfile, out);
}

HostWatch::HostWatch(const LaunchOptions& opts, const HostWatchOptions& wopts, ElasticHosts* hosts,
                     std::vector<HostSlots> active, SupervisorScope* scope)
    : opts_(opts),
      wopts_(wopts),
      hosts_(hosts),
      active_(std::move(active)),
      scope_(scope),
      start_(Clock::now()),
      last_answer_(active_.size(), start_),
      thread_([this] { Run(); }) {}

HostWatch::~HostWatch() { Stop(); }

void HostWatch::Stop() {
  quit_ = true;
  if (thread_.joinable()) thread_.join();
}

HostWatch::Clock::time_point HostWatch::grow_asked_at() const {
  std::lock_guard<std::mutex> lk(mu_);
  return grow_asked_at_;
}

std::vector<std::string> HostWatch::answered() const {
  std::lock_guard<std::mutex> lk(mu_);
  return answered_;
}

std::vector<std::string> HostWatch::lost() const {
  std::lock_guard<std::mutex> lk(mu_);
  return lost_;
}

HostWatch::Clock::time_point HostWatch::lost_at() const {
  std::lock_guard<std::mutex> lk(mu_);
  return lost_at_;
}

void HostWatch::Run() {
  auto next_live = start_ + kLivenessEvery;
  auto next_grow =
      start_ + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(wopts_.grow_delay_s));
  bool stopped = false;  // after a loss: nothing more to watch
  while (!quit_ && !stopped) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    const auto now = Clock::now();
    if (now >= next_live) {
      next_live = now + kLivenessEvery;
      CheckLiveness(now);
      std::lock_guard<std::mutex> lk(mu_);
      stopped = !lost_.empty();
    }
    if (!stopped && !grow_asked_ && now >= next_grow && static_cast<int>(active_.size()) < opts_.elastic_max) {
      next_grow = Clock::now() + kGrowEvery;
      CheckGrowth();
    }
  }
}

void HostWatch::CheckLiveness(Clock::time_point now) {
  std::vector<std::future<bool>> answers;
  for (const HostSlots& h : active_) {
    answers.push_back(std::async(std::launch::async,
                                 [this, name = h.name] { return HostAnswers(name, wopts_.port, kLivenessTimeoutS); }));
  }
  std::vector<std::string> silent;
  for (size_t i = 0; i < active_.size(); ++i) {
    if (answers[i].get()) {
      last_answer_[i] = Clock::now();
    } else if (std::chrono::duration<double>(now - last_answer_[i]).count() >= wopts_.lost_after_s) {
      silent.push_back(active_[i].name);
    }
  }
  if (silent.empty()) return;
  {
    std::lock_guard<std::mutex> lk(mu_);
    lost_ = silent;
    lost_at_ = Clock::now();
  }
  std::string names;
  for (const std::string& h : silent) names += (names.empty() ? "" : ", ") + h;
  DT_LOG_WARN(kLauncher, "host(s) {} did not answer for {:.0f} s: lost; stopping this attempt", names,
              wopts_.lost_after_s);
  scope_->RequestStop();
}

void HostWatch::CheckGrowth() {
  std::vector<HostSlots> listed;
  if (!ListHosts(opts_, &listed).ok()) return;  // a hostfile being rewritten: next round
  hosts_->SetListed(listed);
  std::vector<std::string> candidates = hosts_->RejoinCandidates(Clock::now());
  for (const HostSlots& h : listed) {
    bool in = hosts_->dropped(h.name);
    for (const HostSlots& a : active_) in = in || a.name == h.name;
    if (!in) candidates.push_back(h.name);
  }
  std::vector<std::string> answered;
  for (const std::string& c : candidates) {
    if (!HostAnswers(c, wopts_.port)) {
      hosts_->Silent(c);
    } else if (!hosts_->MustVanishFirst(c)) {
      answered.push_back(c);
    }
  }
  if (answered.empty()) return;
  {
    std::lock_guard<std::mutex> lk(mu_);
    answered_ = answered;
    grow_asked_at_ = Clock::now();
  }
  DT_LOG_WARN(kLauncher, "host(s) {} answer again: asking the job for a checkpoint to restart on more hosts",
              answered.front() + (answered.size() > 1 ? ", ..." : ""));
  grow_asked_ = true;
  kill(getpid(), SIGUSR1);
}

}  // namespace dtrain::launcher
