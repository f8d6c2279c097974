#pragma once
// SpotWatcher: polls a cloud metadata endpoint for a spot-termination notice and, when one appears,
// raises the same preemption flag as SIGTERM (runtime/checkpoint/preemption.h), so the trainer checkpoints and
// exits 75. Endpoints (config checkpoint.spot_notice_url):
//   AWS:     http://169.254.169.254/latest/meta-data/spot/instance-action
//   Alibaba: http://100.100.100.200/latest/meta-data/instance/spot/termination-time
//
// One thread GETs the URL every poll interval (2 s timeout per request). HTTP 200 with a non-empty
// body is a notice: logged at WARN with the body, then Preemption::Raise(SIGTERM), once; the thread
// then stops polling. 404 (no notice yet), other statuses and connection errors (the endpoint
// exists only on cloud VMs) are logged at debug and ignored. (AWS IMDSv2-only instances answer 401
// to tokenless GETs: those never produce a notice.)
//
// Thread-safety: construct and destroy from one thread. The destructor stops the thread: it returns
// after at most the request in flight (<= 2 s), and at once when the thread is waiting between polls.

#include <condition_variable>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "core/status.h"

namespace dtrain::runtime {

struct SpotWatcherOptions {
  std::string url;         // http(s) URL to GET; must be non-empty
  double poll_s = 5.0;     // seconds between requests, > 0
  long timeout_ms = 2000;  // per request (connect + transfer)
};

class SpotWatcher {
 public:
  // Starts the polling thread; the first request goes out at once.
  static Status Create(const SpotWatcherOptions& opts, std::unique_ptr<SpotWatcher>* out);
  ~SpotWatcher();
  SpotWatcher(const SpotWatcher&) = delete;
  SpotWatcher& operator=(const SpotWatcher&) = delete;

  // Whether this watcher has seen a notice (and raised the flag).
  bool noticed() const;

 private:
  explicit SpotWatcher(const SpotWatcherOptions& opts);
  void Loop();
  // One GET: true when it returned a notice (HTTP 200, non-empty body), body in *notice.
  bool Poll(void* curl, std::string* notice);

  const SpotWatcherOptions opts_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;     // guarded by mu_
  bool noticed_ = false;  // guarded by mu_
  std::thread thread_;    // last: started after the members it reads
};

}  // namespace dtrain::runtime
