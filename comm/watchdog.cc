#include "comm/watchdog.h"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <deque>

#include "core/check.h"
#include "core/logging.h"
#if DT_HAVE_MPI
#include <mpi.h>

#include "comm/mpi_check.h"
#endif

namespace dtrain::comm {
namespace {

// "%g" for configured values (300, 0.5), two decimals for measured ones (301.07).
std::string Seconds(double s, bool measured) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), measured ? "%.2f" : "%g", s);
  return buf;
}

}  // namespace

// ---- ArrivalTracker --------------------------------------------------------------------------
// Protocol, on a private duplicate of MPI_COMM_WORLD:
//   1. Create (collective): every rank contributes its hostname (allgather); rank 0 posts one
//      MPI_Irecv per peer.
//   2. Arm #k on rank r > 0 (owner thread): MPI_Isend(k) to rank 0. Rank 0 records its own k.
//   3. Rank 0's watchdog thread, every poll: MPI_Testsome drains the receives, keeps the largest k
//      per peer (MPI keeps one sender's messages in order) and reposts.
//   4. On rank 0's timeout of #k: the peers whose largest k is below k did not arrive.
// Thread use (needs MPI_THREAD_MULTIPLE): sends from the owner thread, receives from the watchdog
// thread, concurrently with the owner's own collectives on other communicators.
namespace detail {

class ArrivalTracker {
 public:
#if DT_HAVE_MPI
  static constexpr int kHostLen = 64;
  static constexpr int kTag = 7;

  static Status Create(std::unique_ptr<ArrivalTracker>* out) {
    auto t = std::make_unique<ArrivalTracker>();
    DT_MPI_CHECK(MPI_Comm_dup(MPI_COMM_WORLD, &t->comm_));
    DT_MPI_CHECK(MPI_Comm_set_errhandler(t->comm_, MPI_ERRORS_RETURN));
    DT_MPI_CHECK(MPI_Comm_rank(t->comm_, &t->rank_));
    DT_MPI_CHECK(MPI_Comm_size(t->comm_, &t->size_));
    char host[kHostLen] = {0};
    std::strncpy(host, log::Hostname().c_str(), kHostLen - 1);
    std::vector<char> hosts(static_cast<size_t>(kHostLen) * t->size_, '\0');
    DT_MPI_CHECK(MPI_Allgather(host, kHostLen, MPI_CHAR, hosts.data(), kHostLen, MPI_CHAR, t->comm_));
    for (int p = 0; p < t->size_; ++p) {
      t->hosts_.emplace_back(hosts.data() + static_cast<size_t>(p) * kHostLen,
                             strnlen(hosts.data() + static_cast<size_t>(p) * kHostLen, kHostLen));
    }
    t->last_.assign(t->size_, 0);
    if (t->rank_ == 0) {
      t->recv_buf_.assign(t->size_, 0);
      t->recv_req_.assign(t->size_, MPI_REQUEST_NULL);
      t->done_idx_.assign(t->size_, 0);
      for (int p = 1; p < t->size_; ++p) DT_RETURN_IF_ERROR(t->PostRecv(p));
    }
    *out = std::move(t);
    return Status::OK();
  }

  ~ArrivalTracker() {
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (finalized) return;  // too late to free MPI objects; MPI_Finalize reclaimed them
    for (MPI_Request& r : recv_req_) {
      if (r == MPI_REQUEST_NULL) continue;
      MPI_Cancel(&r);
      MPI_Wait(&r, MPI_STATUS_IGNORE);  // a cancelled receive completes at once
    }
    // 8-byte sends use MPI's eager protocol: they complete locally whether or not rank 0 receives.
    for (PendingSend& s : sends_) {
      if (s.req != MPI_REQUEST_NULL) MPI_Wait(&s.req, MPI_STATUS_IGNORE);
    }
    if (comm_ != MPI_COMM_NULL) MPI_Comm_free(&comm_);
  }

  // Owner thread: this rank has reached Arm #seq.
  Status Announce(int64_t seq) {
    if (rank_ == 0) {
      std::lock_guard<std::mutex> lock(mu_);
      last_[0] = seq;
      return Status::OK();
    }
    while (!sends_.empty()) {  // reap finished sends; the queue stays about one long
      int done = 0;
      DT_MPI_CHECK(MPI_Test(&sends_.front().req, &done, MPI_STATUS_IGNORE));
      if (!done) break;
      sends_.pop_front();
    }
    sends_.push_back(PendingSend{seq, MPI_REQUEST_NULL});  // deque: the buffer's address stays put
    PendingSend& s = sends_.back();
    DT_MPI_CHECK(MPI_Isend(&s.seq, 1, MPI_INT64_T, 0, kTag, comm_, &s.req));
    return Status::OK();
  }

  // Rank 0, watchdog thread: takes in every announcement that has arrived.
  Status Poll() {
    if (rank_ != 0) return Status::OK();
    for (;;) {
      int count = 0;
      DT_MPI_CHECK(MPI_Testsome(size_, recv_req_.data(), &count, done_idx_.data(), MPI_STATUSES_IGNORE));
      if (count == MPI_UNDEFINED || count == 0) return Status::OK();
      for (int i = 0; i < count; ++i) {
        const int p = done_idx_[i];
        {
          std::lock_guard<std::mutex> lock(mu_);
          last_[p] = std::max(last_[p], recv_buf_[p]);
        }
        DT_RETURN_IF_ERROR(PostRecv(p));
      }
    }
  }

  // Rank 0: "1 (host-b), 3 (host-c)" for the ranks whose last Arm is below `seq`; empty when none.
  std::string Missing(int64_t seq) {
    std::lock_guard<std::mutex> lock(mu_);
    std::string out;
    for (int p = 0; p < size_; ++p) {
      if (last_[p] >= seq) continue;
      if (!out.empty()) out += ", ";
      out += std::to_string(p) + " (" + hosts_[p] + ")";
    }
    return out;
  }

 private:
  struct PendingSend {
    int64_t seq;
    MPI_Request req;
  };

  Status PostRecv(int p) {
    DT_MPI_CHECK(MPI_Irecv(&recv_buf_[p], 1, MPI_INT64_T, p, kTag, comm_, &recv_req_[p]));
    return Status::OK();
  }

  MPI_Comm comm_ = MPI_COMM_NULL;
  int rank_ = 0;
  int size_ = 1;
  std::vector<std::string> hosts_;
  std::mutex mu_;
  std::vector<int64_t> last_;  // last Arm number heard from each rank (guarded by mu_)
  // Rank 0, watchdog thread only.
  std::vector<int64_t> recv_buf_;
  std::vector<MPI_Request> recv_req_;
  std::vector<int> done_idx_;
  // Ranks > 0, owner thread only.
  std::deque<PendingSend> sends_;
#else
  Status Announce(int64_t) { return Status::Unavailable("built without MPI"); }
  Status Poll() { return Status::Unavailable("built without MPI"); }
  std::string Missing(int64_t) { return ""; }
#endif
};

}  // namespace detail

// ---- Watchdog --------------------------------------------------------------------------------

Watchdog::Watchdog() = default;

Status Watchdog::Create(const std::vector<Communicator*>& comms, const WatchdogOptions& opts, FatalFn on_fatal,
                        std::unique_ptr<Watchdog>* out) {
  DT_CHECK_ARG(!comms.empty(), "the watchdog needs at least one communicator to watch");
  for (const Communicator* c : comms) DT_CHECK_ARG(c != nullptr, "null communicator");
  DT_CHECK_ARG(opts.timeout_s > 0, "timeout_s " << opts.timeout_s);
  DT_CHECK_ARG(opts.poll_interval_s > 0, "poll_interval_s " << opts.poll_interval_s);
  DT_CHECK_ARG(on_fatal != nullptr, "on_fatal must be set");
  std::unique_ptr<Watchdog> w(new Watchdog());  // private constructor
  w->comms_ = comms;
  w->opts_ = opts;
  w->on_fatal_ = std::move(on_fatal);
  w->rank_ = comms.front()->rank();
  w->world_ = comms.front()->world_size();
  DT_RETURN_IF_ERROR(w->StartTracking());
  DT_LOG_DEBUG(kComm, "collective watchdog: timeout {} s, arrival tracking {}", opts.timeout_s,
               w->tracking_ok_.load() ? "on" : "off (" + w->tracking_note_ + ")");
  w->thread_ = std::thread(&Watchdog::Loop, w.get());
  *out = std::move(w);
  return Status::OK();
}

Status Watchdog::StartTracking() {
  if (!opts_.track_arrivals) {
    tracking_note_ = "arrival tracking is off";
    return Status::OK();
  }
  if (world_ == 1) {
    tracking_note_ = "single process";
    return Status::OK();
  }
#if DT_HAVE_MPI
  int initialized = 0;
  int finalized = 0;
  DT_MPI_CHECK(MPI_Initialized(&initialized));
  DT_MPI_CHECK(MPI_Finalized(&finalized));
  int provided = MPI_THREAD_SINGLE;
  int world = 0;
  if (initialized && !finalized) {
    DT_MPI_CHECK(MPI_Query_thread(&provided));
    DT_MPI_CHECK(MPI_Comm_size(MPI_COMM_WORLD, &world));
  }
  // Every rank takes the same branch (same binary, same MPI, same world), so the collective
  // Create below runs on all ranks or on none.
  if (!initialized || finalized) {
    tracking_note_ = "MPI is not running";
  } else if (provided < MPI_THREAD_MULTIPLE) {
    tracking_note_ = "arrival tracking needs MPI_THREAD_MULTIPLE and MPI runs at a lower thread level";
  } else if (world != world_) {
    tracking_note_ = "the watched group is not MPI_COMM_WORLD";
  } else {
    DT_RETURN_IF_ERROR(detail::ArrivalTracker::Create(&tracker_));
    tracking_ok_ = true;
  }
#else
  tracking_note_ = "built without MPI";
#endif
  return Status::OK();
}

Watchdog::~Watchdog() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
  tracker_.reset();  // after the join: the thread polls it
}

void Watchdog::Arm(const std::string& what) {
  int64_t seq = 0;
  {
    std::lock_guard<std::mutex> lock(mu_);
    seq = ++seq_;
    what_ = what;
    armed_ = true;
    armed_at_ = Clock::now();
  }
  if (tracking_ok_.load() && !fired_.load()) {
    Status st = tracker_->Announce(seq);
    if (!st.ok()) DisableTracking(st);
  }
}

void Watchdog::Disarm() {
  std::lock_guard<std::mutex> lock(mu_);
  armed_ = false;
}

Status Watchdog::fatal_status() const {
  std::lock_guard<std::mutex> lock(mu_);
  return fatal_;
}

void Watchdog::DisableTracking(const Status& why) {
  if (!tracking_ok_.exchange(false)) return;
  DT_LOG_WARN(kComm, "collective watchdog: arrival tracking turned off: {}", why.ToString());
  std::lock_guard<std::mutex> lock(mu_);
  tracking_note_ = "arrival tracking failed earlier: " + why.ToString();
}

void Watchdog::Loop() {
  const auto period = std::chrono::duration<double>(opts_.poll_interval_s);
  std::unique_lock<std::mutex> lock(mu_);
  while (!stop_) {
    cv_.wait_for(lock, period, [this] { return stop_; });
    if (stop_) break;
    lock.unlock();
    Status st = Check();
    if (!st.ok()) {
      Fire(st);
      return;  // fires once; the destructor still joins
    }
    lock.lock();
  }
}

Status Watchdog::Check() {
  if (tracking_ok_.load()) {
    Status st = tracker_->Poll();
    if (!st.ok()) DisableTracking(st);
  }
  std::string what;
  int64_t seq = 0;
  bool armed = false;
  double elapsed = 0;
  {
    std::lock_guard<std::mutex> lock(mu_);
    armed = armed_;
    what = what_;
    seq = seq_;
    elapsed = std::chrono::duration<double>(Clock::now() - armed_at_).count();
  }
  const std::string who =
      "rank " + std::to_string(rank_) + " of " + std::to_string(world_) + " (" + log::Hostname() + ")";
  for (Communicator* c : comms_) {
    Status st = c->CheckAsyncError();
    // kAborted: the owner aborted the communicator itself (tearing down after an error it returns).
    if (st.ok() || st.code() == Status::Code::kAborted) continue;
    const std::string during =
        armed ? "during '" + what + "' (armed " + Seconds(elapsed, true) + " s)" : "between collectives";
    return st.WithContext("collective watchdog: " + std::string(BackendName(c->backend())) +
                          " communicator failed on " + who + " " + during);
  }
  if (!armed || elapsed <= opts_.timeout_s) return Status::OK();
  return Status::Aborted("collective watchdog: '" + what + "' did not complete within " +
                         Seconds(opts_.timeout_s, false) + " s on " + who + ", armed " + Seconds(elapsed, true) +
                         " s ago; " + ArrivalReport(seq));
}

std::string Watchdog::ArrivalReport(int64_t seq) {
  if (!tracking_ok_.load()) {
    std::lock_guard<std::mutex> lock(mu_);
    return "which ranks did not arrive is not known (" + tracking_note_ + ")";
  }
  if (rank_ != 0) {
    return "which ranks did not arrive is not known on this rank: rank 0 tracks arrivals and names them "
           "(if rank 0 reports nothing, rank 0 is the one missing)";
  }
  const std::string missing = tracker_->Missing(seq);
  if (missing.empty()) {
    return "every rank reached it (a rank is stuck inside it, or ranks issued different collectives)";
  }
  return "ranks that did not arrive: " + missing;
}

void Watchdog::Fire(const Status& st) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    fatal_ = st;
  }
  fired_ = true;
  DT_LOG_ERROR(kComm, "{}; aborting the communicator(s)", st.message());
  for (Communicator* c : comms_) {
    Status a = c->Abort();
    if (!a.ok()) {
      DT_LOG_WARN(kComm, "collective watchdog: abort of the {} communicator: {}", BackendName(c->backend()),
                  a.ToString());
    }
  }
  on_fatal_(st);
}

}  // namespace dtrain::comm
