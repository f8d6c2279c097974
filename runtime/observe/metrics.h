#pragma once
// MetricsWriter: appends one JSON object per line to <run_dir>/metrics.jsonl.
//
// Each Write() is one complete line, flushed immediately, so a killed run leaves a readable file
// (at worst without its last line). Keys keep insertion order. Not thread-safe: one writer thread.

#include <cstdio>
#include <string>
#include <utility>
#include <vector>

#include "core/status.h"

namespace dtrain::runtime {

// A flat JSON object of numbers and strings, built in order.
class JsonLine {
 public:
  JsonLine& Add(const std::string& key, double value);
  JsonLine& Add(const std::string& key, int64_t value);
  JsonLine& Add(const std::string& key, const std::string& value);
  std::string str() const { return "{" + body_ + "}"; }

 private:
  void Key(const std::string& key);
  std::string body_;
};

// Escapes a string for a JSON string literal (quotes included).
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
