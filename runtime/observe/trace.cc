#include "runtime/observe/trace.h"

#include <cerrno>
#include <cstring>
#include <filesystem>

#include "core/logging.h"

namespace dtrain::runtime {
namespace {

constexpr TraceTrack kTracks[] = {TraceTrack::kHost, TraceTrack::kCompute, TraceTrack::kComm};

std::string Micros(double us) {
  char buf[40];
  std::snprintf(buf, sizeof(buf), "%.3f", us);
  return buf;
}

}  // namespace

const char* TraceTrackName(TraceTrack track) {
  switch (track) {
    case TraceTrack::kHost:
      return "host thread";
    case TraceTrack::kCompute:
      return "compute stream";
    case TraceTrack::kComm:
      return "comm stream";
  }
  return "unknown";
}

TraceWriter::TraceWriter(std::FILE* f, std::string path, int rank)
    : f_(f), path_(std::move(path)), rank_(rank), origin_(std::chrono::steady_clock::now()) {
  origin_unix_us_ = static_cast<double>(
      std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::system_clock::now().time_since_epoch())
          .count());
}

Status TraceWriter::Create(const std::string& path, int rank, std::unique_ptr<TraceWriter>* out) {
  const std::filesystem::path parent = std::filesystem::path(path).parent_path();
  if (!parent.empty()) {
    std::error_code ec;
    std::filesystem::create_directories(parent, ec);
    if (ec) return Status::IoError("cannot create trace directory '" + parent.string() + "': " + ec.message());
  }
  std::FILE* f = std::fopen(path.c_str(), "w");
  if (f == nullptr) return Status::IoError("cannot open trace file '" + path + "': " + std::strerror(errno));
  std::unique_ptr<TraceWriter> w(new TraceWriter(f, path, rank));  // private constructor: make_unique cannot reach it

  std::lock_guard<std::mutex> lock(w->mu_);
  if (std::fputs("{\"traceEvents\":[\n", f) < 0) w->error_ = Status::IoError("writing trace file '" + path + "'");
  const std::string pid = std::to_string(rank);
  w->WriteLocked("{\"name\":\"process_name\",\"ph\":\"M\",\"pid\":" + pid +
                 ",\"tid\":0,\"args\":{\"name\":" + JsonQuote("rank " + pid) + "}}");
  w->WriteLocked("{\"name\":\"process_sort_index\",\"ph\":\"M\",\"pid\":" + pid +
                 ",\"tid\":0,\"args\":{\"sort_index\":" + pid + "}}");
  for (TraceTrack t : kTracks) {
    const std::string tid = std::to_string(static_cast<int>(t));
    w->WriteLocked("{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":" + pid + ",\"tid\":" + tid +
                   ",\"args\":{\"name\":" + JsonQuote(TraceTrackName(t)) + "}}");
    w->WriteLocked("{\"name\":\"thread_sort_index\",\"ph\":\"M\",\"pid\":" + pid + ",\"tid\":" + tid +
                   ",\"args\":{\"sort_index\":" + tid + "}}");
  }
  if (!w->error_.ok()) return w->error_;
  *out = std::move(w);
  return Status::OK();
}

TraceWriter::~TraceWriter() {
  const Status st = Close();
  if (!st.ok()) DT_LOG_WARN(kRuntime, "{}", st.ToString());
}

double TraceWriter::NowUs() const {
  const auto since = std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - origin_);
  return origin_unix_us_ + static_cast<double>(since.count()) * 1e-3;
}

void TraceWriter::Record(TraceTrack track, const std::string& name, const std::string& cat, double start_us,
                         double dur_us, const JsonLine* args) {
  std::string ev = "{\"name\":" + JsonQuote(name) + ",\"cat\":" + JsonQuote(cat) +
                   ",\"ph\":\"X\",\"ts\":" + Micros(start_us) + ",\"dur\":" + Micros(dur_us < 0 ? 0 : dur_us) +
                   ",\"pid\":" + std::to_string(rank_) + ",\"tid\":" + std::to_string(static_cast<int>(track));
  if (args != nullptr) ev += ",\"args\":" + args->str();
  ev += "}";
  std::lock_guard<std::mutex> lock(mu_);
  WriteLocked(ev);
}

void TraceWriter::WriteLocked(const std::string& event) {
  if (f_ == nullptr || !error_.ok()) return;
  // Events are separated by ",\n" written before each one, so the trailer needs no comma fix-up.
  const std::string text = (first_event_ ? "" : ",\n") + event;
  first_event_ = false;
  if (std::fwrite(text.data(), 1, text.size(), f_) != text.size()) {
    error_ = Status::IoError("writing trace file '" + path_ + "': " + std::strerror(errno));
  }
}

Status TraceWriter::Close() {
  std::lock_guard<std::mutex> lock(mu_);
  if (f_ == nullptr) return Status::OK();
  if (error_.ok() && std::fputs("\n],\"displayTimeUnit\":\"ms\"}\n", f_) < 0) {
    error_ = Status::IoError("writing trace file '" + path_ + "': " + std::strerror(errno));
  }
  if (std::fclose(f_) != 0 && error_.ok()) {
    error_ = Status::IoError("closing trace file '" + path_ + "': " + std::strerror(errno));
  }
  f_ = nullptr;
  Status st = error_;
  error_ = Status::OK();
  return st;
}

TraceSpan::TraceSpan(TraceWriter* w, TraceTrack track, std::string name, std::string cat)
    : w_(w), track_(track), name_(std::move(name)), cat_(std::move(cat)) {
  if (w_ != nullptr) start_us_ = w_->NowUs();
}

TraceSpan::~TraceSpan() {
  if (w_ != nullptr) w_->Record(track_, name_, cat_, start_us_, w_->NowUs() - start_us_);
}

std::string TraceFilePath(const std::string& run_dir, int rank) {
  return run_dir + "/trace/rank" + std::to_string(rank) + ".trace.json";
}

bool InTraceWindow(int64_t step, int64_t start, int64_t count) {
  return count > 0 && step >= start && step < start + count;
}

}  // namespace dtrain::runtime
