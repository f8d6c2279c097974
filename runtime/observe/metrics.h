#pragma once
// MetricsWriter: appends one JSON object per line to <run_dir>/metrics.jsonl.
//
// Each Write() is one complete line, flushed immediately, so a killed run leaves a readable file
// (at worst without its last line). Keys keep insertion order. Not thread-safe: one writer thread.

#include <cstdint>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <string>

#include "core/status.h"

namespace dtrain::runtime {

// A flat JSON object of numbers and strings, built in order (serialized by nlohmann-json).
//   - Keys keep insertion order; adding a key again replaces its value in place.
//   - Doubles are rounded to 9 significant digits (13 from 1e6 up, so Unix times keep milliseconds);
//     NaN and +-Inf become null (JSON has neither), so a diverged loss reads back as a missing number.
//   - Strings that are not valid UTF-8 have each bad byte replaced by U+FFFD, so the line stays JSON.
class JsonLine {
 public:
  JsonLine& Add(const std::string& key, double value);
  JsonLine& Add(const std::string& key, int64_t value);
  JsonLine& Add(const std::string& key, const std::string& value);
  // The object on one line without spaces, e.g. {"kind":"train","step":3,"loss":2.5}; "{}" when empty.
  std::string str() const;
  // The object itself (read-only), for other renderings of the same values (runtime/observe/csv_metrics.h).
  const nlohmann::ordered_json& object() const { return obj_; }

 private:
  nlohmann::ordered_json obj_ = nlohmann::ordered_json::object();
};

// A JSON string literal of s (quotes included), with the same UTF-8 repair as JsonLine.
std::string JsonQuote(const std::string& s);

class MetricsWriter {
 public:
  MetricsWriter() = default;
  ~MetricsWriter();
  MetricsWriter(const MetricsWriter&) = delete;
  MetricsWriter& operator=(const MetricsWriter&) = delete;

  // Opens (creating or appending) `path`.
  Status Open(const std::string& path);
  Status Write(const JsonLine& line);
  const std::string& path() const { return path_; }

 private:
  std::FILE* f_ = nullptr;
  std::string path_;
};

}  // namespace dtrain::runtime
