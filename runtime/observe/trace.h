#pragma once
// TraceWriter: a Chrome-trace timeline (chrome://tracing, https://ui.perfetto.dev) of one rank.
//
// The file is one JSON object {"traceEvents":[...],"displayTimeUnit":"ms"} holding
//   - metadata events (ph "M"): process_name "rank R" for pid R, and thread_name for each track;
//   - complete events (ph "X"): name, cat, ts and dur in microseconds, pid = rank, tid = the track.
// Tracks are fixed: 1 "host thread" (the training loop), 2 "compute stream", 3 "comm stream" (spans
// timed with CUDA events and placed on the host clock by the caller), so every rank's file shows the
// same rows and the files of several ranks can be opened side by side.
//
// Time base: NowUs() is Unix microseconds taken once at Create and advanced by the steady clock, so
// durations are monotonic and ranks on NTP-synced hosts line up.
//
// Lifetime: events are buffered (stdio) and written in order; Close() - or the destructor, which
// runs when the trainer returns early with an error - writes the closing "]}", so the file is valid
// JSON whenever the process ends through a normal return. A process killed by a signal leaves an
// unterminated file (Perfetto still loads it; chrome://tracing may not).
//
// Thread-safety: Record() and Close() may be called from any thread (one mutex per writer). Record()
// never fails the caller: tracing is diagnostics, so a write error is kept and returned by Close().

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <mutex>
#include <string>

#include "core/status.h"
#include "runtime/observe/metrics.h"

namespace dtrain::runtime {

enum class TraceTrack : int { kHost = 1, kCompute = 2, kComm = 3 };

// "host thread", "compute stream", "comm stream".
const char* TraceTrackName(TraceTrack track);

class TraceWriter {
 public:
  // Creates the parent directory of `path` when missing, opens `path` (truncating it) and writes the
  // header and the metadata events. IoError names the path on failure.
  static Status Create(const std::string& path, int rank, std::unique_ptr<TraceWriter>* out);

  // Closes the file (see Lifetime); errors are logged.
  ~TraceWriter();
  TraceWriter(const TraceWriter&) = delete;
  TraceWriter& operator=(const TraceWriter&) = delete;

  // Microseconds on this writer's clock (see Time base).
  double NowUs() const;

  // One complete event [start_us, start_us + dur_us) on `track`. `args`, when given, is shown in
  // the viewer's detail pane (e.g. bytes of a collective). No-op after Close().
  void Record(TraceTrack track, const std::string& name, const std::string& cat, double start_us, double dur_us,
              const JsonLine* args = nullptr);

  // Writes the trailer and closes the file; returns the first write error of the writer's life.
  // Idempotent (later calls return OK).
  Status Close();

  const std::string& path() const { return path_; }
  int rank() const { return rank_; }

 private:
  TraceWriter(std::FILE* f, std::string path, int rank);
  void WriteLocked(const std::string& event);

  std::mutex mu_;
  std::FILE* f_ = nullptr;
  std::string path_;
  int rank_ = 0;
  bool first_event_ = true;
  Status error_;
  double origin_unix_us_ = 0;
  std::chrono::steady_clock::time_point origin_;
};

// Times a host-side scope and records it on destruction. A null writer makes it a no-op, so call
// sites need no branch when tracing is off.
class TraceSpan {
 public:
  TraceSpan(TraceWriter* w, TraceTrack track, std::string name, std::string cat);
  ~TraceSpan();
  TraceSpan(const TraceSpan&) = delete;
  TraceSpan& operator=(const TraceSpan&) = delete;

 private:
  TraceWriter* w_;
  TraceTrack track_;
  std::string name_, cat_;
  double start_us_ = 0;
};

// <run_dir>/trace/rank<R>.trace.json
std::string TraceFilePath(const std::string& run_dir, int rank);

// Whether optimizer step `step` lies in [start, start + count) (run.trace_start, run.trace_steps).
bool InTraceWindow(int64_t step, int64_t start, int64_t count);

}  // namespace dtrain::runtime
