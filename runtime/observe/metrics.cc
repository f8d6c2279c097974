#include "runtime/observe/metrics.h"

#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <cstring>

namespace dtrain::runtime {

namespace {

// No exceptions leave dump(): invalid UTF-8 is replaced rather than thrown as type_error 316.
std::string Dump(const nlohmann::ordered_json& j) {
  return j.dump(/*indent=*/-1, /*indent_char=*/' ', /*ensure_ascii=*/false, nlohmann::json::error_handler_t::replace);
}

}  // namespace

std::string JsonQuote(const std::string& s) { return Dump(nlohmann::ordered_json(s)); }

std::string JsonLine::str() const { return Dump(obj_); }

JsonLine& JsonLine::Add(const std::string& key, double value) {
  if (!std::isfinite(value)) {
    obj_[key] = nullptr;  // JSON has no NaN/Inf
    return *this;
  }
  // 9 significant digits keep a float exactly; Unix times (1.8e9 s) need 13 for millisecond resolution.
  // Rounding here makes nlohmann's shortest round-trip output that many digits, not a double's 17.
  char buf[32];
  std::snprintf(buf, sizeof(buf), std::fabs(value) >= 1e6 ? "%.13g" : "%.9g", value);
  obj_[key] = std::strtod(buf, nullptr);
  return *this;
}

JsonLine& JsonLine::Add(const std::string& key, int64_t value) {
  obj_[key] = value;
  return *this;
}

JsonLine& JsonLine::Add(const std::string& key, const std::string& value) {
  obj_[key] = value;
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
