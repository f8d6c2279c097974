#pragma once
// CsvMetricsWriter: <run_dir>/metrics.csv, the spreadsheet view of metrics.jsonl's records.
//
// One fixed column set for the whole file, given at Open (the caller's list of every key its records may hold), so
// every row lines up with the header however the records differ: a cell is empty where the record has no such key
// or its value is null (NaN); keys of a record that are not columns are left out. The header row is written once,
// when the file is new or empty. Cells are the record's JSON values as metrics.jsonl has them (numbers in the same
// text, strings CSV-quoted when they hold a comma, quote or line break), so a CSV cell equals the jsonl number.
//
// Appends, never truncates (a resumed run adds its rows). A file whose first line is not this column set (written by
// another dtrain version) is not touched: Open returns FailedPrecondition naming the file and both headers.
// Each Write() is one complete line, flushed at once. Not thread-safe: one writer thread.

#include <cstdio>
#include <string>
#include <vector>

#include "core/status.h"
#include "runtime/observe/metrics.h"

namespace dtrain::runtime {

class CsvMetricsWriter {
 public:
  CsvMetricsWriter() = default;
  ~CsvMetricsWriter();
  CsvMetricsWriter(const CsvMetricsWriter&) = delete;
  CsvMetricsWriter& operator=(const CsvMetricsWriter&) = delete;

  // Opens (creating or appending) `path` with these columns; IoError when it cannot be opened or read.
  Status Open(const std::string& path, const std::vector<std::string>& columns);
  // One row from `record`'s keys.
  Status Write(const JsonLine& record);
  const std::string& path() const { return path_; }

 private:
  std::FILE* f_ = nullptr;
  std::string path_;
  std::vector<std::string> columns_;
};

// A CSV cell holding `text` (RFC 4180): quoted, with quotes doubled, when it holds a comma, quote or line break.
std::string CsvCell(const std::string& text);

}  // namespace dtrain::runtime
