#include "launcher/output_router.h"

#include <cctype>
#include <cerrno>
#include <cstring>
#include <sstream>

#include "launcher/rank_exec.h"

namespace dtrain::launcher {
namespace {

constexpr size_t kMaxLine = 64 * 1024;  // a longer line without '\n' is handled in pieces

std::string Lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

}  // namespace

bool LooksLikeWarningOrError(const std::string& text) {
  // dtrain's log pattern: "HH:MM:SS.mmm host:rank subsys L file.cc:42] message".
  std::istringstream words(text);
  std::string w[5];
  if (words >> w[0] >> w[1] >> w[2] >> w[3] >> w[4]) {
    if ((w[3] == "W" || w[3] == "E" || w[3] == "C") && w[4].back() == ']') return true;
  }
  const std::string lower = Lower(text);
  for (const char* word : {"warn", "error", "fatal", "abort"}) {
    if (lower.find(word) != std::string::npos) return true;
  }
  return false;
}

OutputRouter::OutputRouter(Options options) : opts_(std::move(options)), dialect_(MakeOutputDialect(opts_.backend)) {}

OutputRouter::~OutputRouter() {
  for (auto& kv : files_) {
    if (kv.second != nullptr) std::fclose(kv.second);
  }
}

void OutputRouter::Feed(bool from_stderr, const char* data, size_t size) {
  std::string& buf = partial_[from_stderr ? 1 : 0];
  for (size_t i = 0; i < size; ++i) {
    if (data[i] == '\n') {
      HandleLine(from_stderr, buf);
      buf.clear();
    } else {
      buf += data[i];
      if (buf.size() >= kMaxLine) {
        HandleLine(from_stderr, buf);
        buf.clear();
      }
    }
  }
}

void OutputRouter::FeedRank(int rank, bool from_stderr, const char* data, size_t size) {
  std::string& buf = rank_partial_[from_stderr ? 1 : 0][rank];
  for (size_t i = 0; i < size; ++i) {
    if (data[i] != '\n') buf += data[i];
    if (data[i] == '\n' || buf.size() >= kMaxLine) {
      HandleRankLine(rank, from_stderr, buf);
      buf.clear();
    }
  }
}

void OutputRouter::Finish() {
  for (int s = 0; s < 2; ++s) {
    if (!partial_[s].empty()) HandleLine(s == 1, partial_[s]);
    partial_[s].clear();
    for (auto& kv : rank_partial_[s]) {
      if (!kv.second.empty()) HandleRankLine(kv.first, s == 1, kv.second);
    }
    rank_partial_[s].clear();
  }
  PrintLines(message_);  // a framed message that never closed
  message_.clear();
  for (auto& kv : files_) {
    if (kv.second != nullptr) std::fflush(kv.second);
  }
}

std::vector<std::string> OutputRouter::Tail(int rank) const {
  auto it = tails_.find(rank);
  if (it == tails_.end()) return {};
  return {it->second.begin(), it->second.end()};
}

void OutputRouter::HandleLine(bool from_stderr, const std::string& line) {
  int rank = -1;
  bool is_stderr = from_stderr;
  std::string text;
  if (dialect_->SplitRankLine(line, &rank, &is_stderr, &text)) {
    HandleRankLine(rank, is_stderr, text);
  } else {
    HandleManagerLine(line);
  }
}

void OutputRouter::HandleRankLine(int rank, bool is_stderr, const std::string& text) {
  if (!opts_.log_dir.empty()) {
    if (FILE* f = LogFile("rank-" + std::to_string(rank) + ".log")) std::fprintf(f, "%s\n", text.c_str());
  }
  if (ParseRankExecLine(rank, text)) return;  // in the rank's log only: not in its tail, not on the console
  if (text.rfind(kSpotNoticeLine, 0) == 0) notice_ranks_.push_back(rank);
  auto& tail = tails_[rank];
  tail.push_back(text);
  while (tail.size() > opts_.tail_lines) tail.pop_front();
  if (rank == opts_.console_rank) {
    FILE* out = is_stderr ? opts_.err : opts_.out;
    std::fprintf(out, "%s\n", text.c_str());
    std::fflush(out);
  } else if (LooksLikeWarningOrError(text)) {
    std::fprintf(opts_.err, "[rank %d] %s\n", rank, text.c_str());
    std::fflush(opts_.err);
  }
}

void OutputRouter::HandleManagerLine(const std::string& line) {
  dialect_->ParseReportLine(line, &report_);
  const std::string remote_daemon = "  Remote daemon: ";  // in the "ORTE has lost communication" report
  const size_t node = line.find(" on node ");
  if (line.rfind(remote_daemon, 0) == 0 && node != std::string::npos) {
    lost_daemon_hosts_.push_back(line.substr(node + 9));
    report_.failure_seen = true;
  }
  const std::string node_failure = "srun: error: Node failure on ";  // slurmctld lost the node's slurmd
  if (line.rfind(node_failure, 0) == 0) {
    lost_daemon_hosts_.push_back(line.substr(node_failure.size()));
    report_.failure_seen = true;
  }
  if (line.find("ORTE was unable to reliably start one or more daemons") != std::string::npos) {
    daemons_failed_ = true;
  }
  if (line.find("the job has been aborted") != std::string::npos ||
      line.find("srun: Job step aborted") != std::string::npos) {
    report_.failure_seen = true;
  }
  if (!opts_.log_dir.empty()) {
    if (FILE* f = LogFile("launcher.log")) std::fprintf(f, "%s\n", line.c_str());
  }
  const bool frame = dialect_->IsFrameLine(line);
  if (message_.empty() && !frame) {
    std::fprintf(opts_.err, "%s\n", line.c_str());
    std::fflush(opts_.err);
    return;
  }
  message_.push_back(line);
  if (!frame || message_.size() == 1) return;  // the message goes on, or has just opened
  if (dialect_->IsExitBanner(message_)) {
    held_.insert(held_.end(), message_.begin(), message_.end());
  } else {
    PrintLines(message_);
  }
  message_.clear();
}

void OutputRouter::PrintLines(const std::vector<std::string>& lines) {
  for (const std::string& l : lines) std::fprintf(opts_.err, "%s\n", l.c_str());
  std::fflush(opts_.err);
}

void OutputRouter::ReleaseHeldBanners(bool show) {
  if (show) PrintLines(held_);
  held_.clear();
}

bool OutputRouter::ParseRankExecLine(int rank, const std::string& text) {
  if (text.rfind(kRankExitPrefix, 0) != 0) return false;
  const char* what = text.c_str() + std::strlen(kRankExitPrefix);
  RankExit r;
  r.rank = rank;
  if (std::sscanf(what, "exit code %d", &r.exit_code) != 1 && std::sscanf(what, "signal %d", &r.signal) != 1) {
    return false;  // e.g. "cannot run ...": an ordinary line of the rank
  }
  const auto at = text.rfind(" at ");
  if (at != std::string::npos && std::sscanf(text.c_str() + at, " at %lf", &r.ended_at) != 1) r.ended_at = 0;
  report_.failure_seen = true;
  if (first_rank_exit_.rank < 0) first_rank_exit_ = r;
  rank_exits_.emplace(rank, r);  // a rank's first end line
  if (r.ended_at > 0 && (earliest_rank_exit_.rank < 0 || r.ended_at < earliest_rank_exit_.ended_at)) {
    earliest_rank_exit_ = r;
  }
  return true;
}

RankExit OutputRouter::root_cause() const {
  const RankExit& named = report_.root_cause;
  if (named.rank < 0) return earliest_rank_exit_.rank >= 0 ? earliest_rank_exit_ : first_rank_exit_;
  // The process manager names the first end it noticed; when that rank's own line gives a time, a rank that ended
  // earlier by its line is the first failure (all ranks failing at once: the one that failed first by time). A rank
  // that could not say (its rank-exec died with it, or its host) is the manager's to name.
  const auto own = rank_exits_.find(named.rank);
  if (own != rank_exits_.end() && own->second.ended_at > 0 && earliest_rank_exit_.rank >= 0 &&
      earliest_rank_exit_.ended_at < own->second.ended_at) {
    return earliest_rank_exit_;
  }
  return named;
}

FILE* OutputRouter::LogFile(const std::string& name) {
  auto it = files_.find(name);
  if (it != files_.end()) return it->second;
  const std::string path = opts_.log_dir + "/" + name;
  FILE* f = std::fopen(path.c_str(), "a");
  if (f == nullptr) {
    if (log_error_.empty()) log_error_ = "cannot open " + path + ": " + std::strerror(errno);
  } else {
    setvbuf(f, nullptr, _IOLBF, 0);
    std::fprintf(f, "===== dtrain launch: attempt %d (DTRAIN_RESTART_COUNT=%d) =====\n", opts_.attempt + 1,
                 opts_.attempt);
  }
  files_[name] = f;
  return f;
}

}  // namespace dtrain::launcher
