#include "runtime/observe/metrics.h"

#include <cerrno>
#include <cmath>
#include <cstring>

namespace dtrain::runtime {

std::string JsonQuote(const std::string& s) {
  std::string out = "\"";
  for (unsigned char c : s) {
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\t':
        out += "\\t";
        break;
      default:
        if (c < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof(buf), "\\u%04x", c);
          out += buf;
        } else {
          out += static_cast<char>(c);
        }
    }
  }
  return out + "\"";
}

void JsonLine::Key(const std::string& key) {
  if (!body_.empty()) body_ += ",";
  body_ += JsonQuote(key) + ":";
}

JsonLine& JsonLine::Add(const std::string& key, double value) {
  Key(key);
  if (!std::isfinite(value)) {
    body_ += "null";  // JSON has no NaN/Inf
  } else {
    // 9 significant digits keep a float exactly; Unix times (1.8e9 s) need 13 for millisecond resolution.
    char buf[32];
    std::snprintf(buf, sizeof(buf), std::fabs(value) >= 1e6 ? "%.13g" : "%.9g", value);
    body_ += buf;
  }
  return *this;
}

JsonLine& JsonLine::Add(const std::string& key, int64_t value) {
  Key(key);
  body_ += std::to_string(value);
  return *this;
}

JsonLine& JsonLine::Add(const std::string& key, const std::string& value) {
  Key(key);
  body_ += JsonQuote(value);
  return *this;
}

MetricsWriter::~MetricsWriter() {
  if (f_ != nullptr) std::fclose(f_);
}

Status MetricsWriter::Open(const std::string& path) {
  f_ = std::fopen(path.c_str(), "a");
  if (f_ == nullptr) return Status::IoError("cannot open metrics file '" + path + "': " + std::strerror(errno));
  path_ = path;
  return Status::OK();
}

Status MetricsWriter::Write(const JsonLine& line) {
  if (f_ == nullptr) return Status::FailedPrecondition("MetricsWriter::Write before Open");
  const std::string s = line.str() + "\n";
  if (std::fwrite(s.data(), 1, s.size(), f_) != s.size() || std::fflush(f_) != 0) {
    return Status::IoError("writing '" + path_ + "': " + std::strerror(errno));
  }
  return Status::OK();
}

}  // namespace dtrain::runtime
