#include "launcher/output_dialect.h"

#include <cctype>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

namespace dtrain::launcher {

int RankExit::ProcessExitCode() const { return signal > 0 ? 128 + signal : exit_code; }

std::string RankExit::Describe() const {
  if (signal > 0) return "signal " + std::to_string(signal) + " (" + strsignal(signal) + ")";
  if (exit_code >= 0) return "exit code " + std::to_string(exit_code);
  return "unknown exit status";
}

namespace {

// strsignal() text at the start of `text` ("Killed", "Segmentation fault (core dumped)") -> number.
int SignalFromText(const std::string& text) {
  for (int s = 1; s < 65; ++s) {
    const char* name = strsignal(s);
    if (name != nullptr && *name != '\0' && text.rfind(name, 0) == 0) return s;
  }
  return 0;
}

// Open MPI's mpirun with --tag-output.
class MpirunDialect : public OutputDialect {
 public:
  // "[J,R]<stdout>:text" -> rank R, stream, text. False for an untagged line.
  bool SplitRankLine(const std::string& line, int* rank, bool* is_stderr, std::string* text) const override {
    int job = 0, r = 0, consumed = 0;
    if (std::sscanf(line.c_str(), "[%d,%d]%n", &job, &r, &consumed) != 2 || consumed == 0) return false;
    static const char* const kStreams[] = {"<stdout>:", "<stderr>:", "<stddiag>:"};
    for (int i = 0; i < 3; ++i) {
      const size_t len = std::strlen(kStreams[i]);
      if (line.compare(consumed, len, kStreams[i]) == 0) {
        *rank = r;
        *is_stderr = i != 0;
        *text = line.substr(consumed + len);
        return true;
      }
    }
    return false;
  }

  void ParseReportLine(const std::string& line, ManagerReport* report) const override {
    if (report->root_cause.rank >= 0) return;
    RankExit r;
    char host[256] = {0};
    if (const auto pos = line.find("Process name: [["); pos != std::string::npos) {
      const auto comma = line.find("],", pos);
      if (comma != std::string::npos) report->pending_rank = std::atoi(line.c_str() + comma + 2);
    } else if (const auto pos = line.find("Exit code:"); pos != std::string::npos && report->pending_rank >= 0) {
      r.rank = report->pending_rank;
      r.exit_code = std::atoi(line.c_str() + pos + std::strlen("Exit code:"));
    } else if (const auto pos = line.find("process rank "); pos != std::string::npos) {
      const char* p = line.c_str() + pos;
      if (std::sscanf(p, "process rank %d with PID %*d on node %255s exited on signal %d", &r.rank, host, &r.signal) ==
          3) {
        r.host = host;
      } else if (std::sscanf(p, "process rank %d with PID %*d on", &r.rank) == 1) {
        r.signal = 0;  // "exiting improperly": the exit code is mpirun's own
      } else {
        r.rank = -1;
      }
    }
    if (r.rank >= 0) {
      report->root_cause = r;
      report->failure_seen = true;
    }
  }

  bool IsFrameLine(const std::string& line) const override {
    return line.size() >= 20 && line.find_first_not_of('-') == std::string::npos;
  }

  bool IsExitBanner(const std::vector<std::string>& message) const override {
    for (const std::string& line : message) {
      if ((line.find("Primary job") != std::string::npos && line.find("terminated normally") != std::string::npos) ||
          line.find("mpirun detected that one or more processes exited with non-zero status") != std::string::npos) {
        return true;
      }
    }
    return false;
  }
};

// Slurm's srun with --label.
class SrunDialect : public OutputDialect {
 public:
  // "  3: text" -> rank 3 (srun --label pads the number to the width of the largest rank).
  bool SplitRankLine(const std::string& line, int* rank, bool* /*is_stderr*/, std::string* text) const override {
    size_t i = 0;
    while (i < line.size() && line[i] == ' ') ++i;
    const size_t digits = i;
    while (i < line.size() && std::isdigit(static_cast<unsigned char>(line[i]))) ++i;
    if (i == digits || i - digits > 9 || line.compare(i, 2, ": ") != 0) return false;
    *rank = std::stoi(line.substr(digits, i - digits));
    *text = line.substr(i + 2);
    return true;
  }

  void ParseReportLine(const std::string& line, ManagerReport* report) const override {
    // "srun: error: HOST: task 1: Exited with exit code 3" / "...: tasks 0-3: Killed"
    const std::string prefix = "srun: error: ";
    if (line.rfind(prefix, 0) != 0) return;
    const auto host_end = line.find(": task", prefix.size());
    if (host_end == std::string::npos) return;
    report->failure_seen = true;
    if (report->root_cause.rank >= 0) return;
    size_t p = line.find(' ', host_end + 2);  // after "task"/"tasks"
    if (p == std::string::npos) return;
    RankExit r;
    r.host = line.substr(prefix.size(), host_end - prefix.size());
    r.rank = std::atoi(line.c_str() + p + 1);
    const auto status = line.find(": ", p);
    if (status == std::string::npos) return;
    const std::string what = line.substr(status + 2);
    int code = 0;
    if (std::sscanf(what.c_str(), "Exited with exit code %d", &code) == 1) {
      r.exit_code = code;
    } else {
      r.signal = SignalFromText(what);
    }
    report->root_cause = r;
  }
};

}  // namespace

std::unique_ptr<const OutputDialect> MakeOutputDialect(Backend backend) {
  if (backend == Backend::kSrun) return std::make_unique<SrunDialect>();
  return std::make_unique<MpirunDialect>();
}

}  // namespace dtrain::launcher
