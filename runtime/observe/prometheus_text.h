#pragma once
// The Prometheus text exposition format, version 0.0.4 (what GET /metrics of runtime/observe/prometheus_exporter.h
// serves): one "# HELP name text" and one "# TYPE name gauge|counter" line per metric name, then its samples
// "name{label="value",...} value", one per line. Label values escape backslash, double quote and newline; HELP texts
// escape backslash and newline; values are written with 17 significant digits, NaN as "NaN", infinities "+Inf"/"-Inf".
// Pure functions; thread-safe.

#include <string>
#include <utility>
#include <vector>

namespace dtrain::runtime {

// One sample of one series.
struct PromSample {
  std::string name;      // [a-zA-Z_:][a-zA-Z0-9_:]*, e.g. "dtrain_step_seconds"
  std::string help;      // what it means, in one line; the first sample of a name gives the metric's HELP
  bool counter = false;  // TYPE counter (only ever grows) instead of gauge
  std::vector<std::pair<std::string, std::string>> labels;  // names [a-zA-Z_][a-zA-Z0-9_]*, values any UTF-8
  double value = 0;
  // The value is a Unix time: the sample shows the seconds since then at formatting time ("age of ...").
  bool age_of_unix_time = false;
};

// True for a valid metric name (`label` = false) or label name (`label` = true; no ':', no "__" prefix).
bool ValidPromName(const std::string& name, bool label);

// The exposition text of `samples`, grouped by name in the order each name first appears (a name's samples need not
// be adjacent), `now_unix` being the time that age_of_unix_time samples are measured against. Samples with an
// invalid metric or label name are left out (they would make the whole scrape fail), as are duplicates of a
// name+labels already written.
std::string FormatPrometheusText(const std::vector<PromSample>& samples, double now_unix);

// Escapes a label value (\\, \", \n) as the format requires.
std::string EscapePromLabelValue(const std::string& value);

}  // namespace dtrain::runtime
