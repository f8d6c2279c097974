#pragma once
// HostWatch: the elastic launcher's watch over the hosts while one attempt runs (`dtrain launch --nnodes MIN:MAX`,
// launcher/elastic_launch.cc). One thread, two jobs:
//  - Liveness (the heartbeat): every second each host of the attempt is probed (HostAnswers, in parallel). A host
//    that has not answered for `lost_after_s` is lost — its network is cut or it is gone, while mpirun and the
//    surviving ranks may wait on it for as long as TCP does: the watch records it and stops the attempt
//    (SupervisorScope::RequestStop), once. So a silent host is noticed within lost_after_s + one probe timeout.
//  - Growth: from `grow_delay_s` after the start (mpirun needs about that long to spawn the ranks: a worker keeps a
//    SIGUSR1 from the first line of RunWorker on, but one that reaches a rank before its main() kills it), every 2 s while the attempt runs on fewer than MAX hosts, it re-reads the
//    host list, probes the dropped hosts whose rejoin time has come and the listed hosts beyond the attempt's, and
//    when one answers (a host dropped after a spot notice: only once a probe found it gone) asks the job for a
//    coordinated checkpoint (SIGUSR1 to this process, which the supervisor
//    forwards to every rank: they save and exit 75).
//
// Thread-safety: the watch's thread uses `hosts` (ElasticHosts is not thread-safe) until the destructor has joined
// it; the caller must not touch `hosts` in between. The accessors may be read from any thread; answered() and lost()
// are complete after the destructor (or Stop()) returned.

#include <atomic>
#include <chrono>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "launcher/elastic_plan.h"
#include "launcher/launch_options.h"
#include "launcher/supervisor.h"

namespace dtrain::launcher {

// The listed hosts now: --hosts, or --hostfile read again (it may have changed since the last look).
Status ListHosts(const LaunchOptions& opts, std::vector<HostSlots>* out);

struct HostWatchOptions {
  double lost_after_s = 6;  // a host silent this long is lost
  double grow_delay_s = 5;  // no grow request before this long after the start
  int port = 22;            // the probe's port (an answer or a refusal both count)
};

class HostWatch {
 public:
  using Clock = std::chrono::steady_clock;
  // Starts watching `active` (the attempt's hosts); `opts`, `hosts` and `scope` must outlive the watch.
  HostWatch(const LaunchOptions& opts, const HostWatchOptions& wopts, ElasticHosts* hosts,
            std::vector<HostSlots> active, SupervisorScope* scope);
  ~HostWatch();  // Stop()
  HostWatch(const HostWatch&) = delete;
  HostWatch& operator=(const HostWatch&) = delete;

  void Stop();  // stops and joins the thread (idempotent)

  bool grow_asked() const { return grow_asked_; }
  Clock::time_point grow_asked_at() const;
  std::vector<std::string> answered() const;  // hosts that answered and made it ask to grow
  std::vector<std::string> lost() const;      // hosts it found silent (then it stopped the attempt)
  Clock::time_point lost_at() const;

 private:
  void Run();
  void CheckLiveness(Clock::time_point now);
  void CheckGrowth();

  const LaunchOptions& opts_;
  const HostWatchOptions wopts_;
  ElasticHosts* hosts_;
  const std::vector<HostSlots> active_;
  SupervisorScope* scope_;
  const Clock::time_point start_;
  std::vector<Clock::time_point> last_answer_;  // per active host; the watch's thread only
  std::atomic<bool> quit_{false};
  std::atomic<bool> grow_asked_{false};
  mutable std::mutex mu_;
  std::vector<std::string> answered_, lost_;   // guarded by mu_
  Clock::time_point grow_asked_at_, lost_at_;  // guarded by mu_
  std::thread thread_;                         // last: started after the members it reads
};

}  // namespace dtrain::launcher
