#pragma once
// Watchdog: turns a hung collective into an error that names it — never a silent hang.
//
// The owner (the thread that issues collectives) calls Arm("what") before anything that may block on
// peers — a blocking MPI collective, a host sync that waits on NCCL work, a barrier — and Disarm()
// after; WatchdogScope does both. One background thread, every `poll_interval_s`:
//   1. polls CheckAsyncError() of every watched communicator (NCCL: a dead peer, a network error),
//      armed or not (kAborted is ignored: that is the owner tearing the communicator down itself);
//   2. declares the armed section hung once it has been armed for longer than `timeout_s`.
// On either failure, exactly once: logs an ERROR naming the section, this rank, the elapsed time and
// which ranks did not arrive (below); calls Abort() on every watched communicator (NCCL:
// ncclCommAbort unblocks the stuck stream; MPI: marks it aborted); then calls on_fatal(status) on
// the watchdog thread. What happens next is the owner's decision: the worker prints the error and
// ends the process with exit code 1 (std::_Exit) — for MPI the only way out of a blocked
// MPI_Allreduce; mpirun/srun then end the other ranks. Library code never exits. After firing the
// watchdog stays quiet (Arm/Disarm are accepted and ignored).
//
// Which ranks did not arrive. With MPI initialised at MPI_THREAD_MULTIPLE and more than one rank,
// each Arm sends its sequence number (8 bytes, MPI_Isend) to rank 0 on a private duplicate of
// MPI_COMM_WORLD; rank 0's watchdog thread receives them, so when rank 0's section #k times out it
// lists the ranks (and hosts) whose last Arm is < k. Other ranks cannot know and say so: rank 0's
// log names the missing ranks — if rank 0 reports nothing, rank 0 itself is the one missing. Below
// MPI_THREAD_MULTIPLE the watchdog thread may not call MPI while the owner is blocked in MPI, so
// tracking is off and the message says "ranks not known" and why. Sequence numbers line up across
// ranks because every rank Arms the same sections in the same order (as it issues the same
// collectives in the same order). Cost: one 8-byte message per Arm per rank, received by rank 0.
//
// Create is collective over MPI_COMM_WORLD when tracking is on (MPI_Comm_dup and a hostname
// allgather): every rank must create its watchdog with the same options.
// Ownership: borrows the communicators (they must outlive the watchdog); owns its thread and the
// tracking communicator. Destroy before MPI_Finalize; the destructor stops and joins the thread.
// Thread-safety: Arm/Disarm from the owner thread only; fired() and fatal_status() from any thread.

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "comm/communicator.h"
#include "core/status.h"

namespace dtrain::comm {

namespace detail {
class ArrivalTracker;  // rank 0's view of which ranks reached which Arm (watchdog.cc)
}  // namespace detail

struct WatchdogOptions {
  double timeout_s = 300;        // config dist.collective_timeout_s
  double poll_interval_s = 0.1;  // async-error poll and deadline check period
  bool track_arrivals = true;    // rank 0 learns which ranks reached each Arm (needs MPI_THREAD_MULTIPLE)
};

class Watchdog {
 public:
  using FatalFn = std::function<void(const Status&)>;

  // Watches `comms` (non-empty, non-null; rank and world size are taken from the first) and starts
  // the thread. `on_fatal` is called at most once, from the watchdog thread.
  static Status Create(const std::vector<Communicator*>& comms, const WatchdogOptions& opts, FatalFn on_fatal,
                       std::unique_ptr<Watchdog>* out);
  ~Watchdog();
  Watchdog(const Watchdog&) = delete;
  Watchdog& operator=(const Watchdog&) = delete;

  // Starts the clock for section `what` ("step 12 gradient all-reduce"). Arming while armed starts
  // a new section. Never fails: a failing arrival announcement only turns tracking off (logged).
  void Arm(const std::string& what);
  // Ends the armed section; no-op when not armed.
  void Disarm();

  bool fired() const { return fired_.load(); }
  // The error passed to on_fatal; OK while not fired.
  Status fatal_status() const;
  // Whether this watchdog reports which ranks did not arrive (rank 0) or takes part in it.
  bool tracking_arrivals() const { return tracking_ok_.load(); }

 private:
  using Clock = std::chrono::steady_clock;
  Watchdog();
  Status StartTracking();
  void Loop();
  // Returns the fatal Status when the job is lost (async error or timeout), OK otherwise.
  Status Check();
  // "ranks that did not arrive: 1 (host-b)" or why that is not known.
  std::string ArrivalReport(int64_t seq);
  void Fire(const Status& st);
  void DisableTracking(const Status& why);

  std::vector<Communicator*> comms_;
  WatchdogOptions opts_;
  FatalFn on_fatal_;
  int rank_ = 0;
  int world_ = 1;

  mutable std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
  bool armed_ = false;
  int64_t seq_ = 0;  // number of Arm calls so far; the armed section is #seq_
  std::string what_;
  Clock::time_point armed_at_;
  Status fatal_;
  std::atomic<bool> fired_{false};

  std::unique_ptr<detail::ArrivalTracker> tracker_;
  std::atomic<bool> tracking_ok_{false};
  std::string tracking_note_;  // why tracking is off (guarded by mu_ once the thread runs)
  std::thread thread_;
};

// RAII Arm/Disarm. A null watchdog makes it a no-op (single process, no watchdog configured).
class WatchdogScope {
 public:
  WatchdogScope(Watchdog* wd, const std::string& what) : wd_(wd) {
    if (wd_ != nullptr) wd_->Arm(what);
  }
  ~WatchdogScope() {
    if (wd_ != nullptr) wd_->Disarm();
  }
  WatchdogScope(const WatchdogScope&) = delete;
  WatchdogScope& operator=(const WatchdogScope&) = delete;

 private:
  Watchdog* wd_;
};

}  // namespace dtrain::comm
