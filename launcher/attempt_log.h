#pragma once
// The record of an elastic launch's attempts: one JSON line per attempt's end appended to <run.dir>/elastic.jsonl on
// the launcher's machine, read by `dtrain report` (goodput, time to recover; runtime/observe/elastic_report.h):
//   {"kind":"attempt","attempt":A,"hosts":"h1,h2","world":W,"start":T,"end":T,"noticed":T,"reason":R,"lost":"h3"}
// A = the attempt's DTRAIN_RESTART_COUNT; times are Unix seconds; noticed = when the launcher learned what ended the
// attempt. Written by both elastic restart policies (mpirun: launcher/elastic_launch.h; srun:
// launcher/slurm_elastic.h) from the one attempt loop (launcher/attempt_loop.h).
// Not thread-safe: one loop writes it.

#include <string>
#include <vector>

#include "launcher/hostfile.h"
#include "runtime/observe/metrics.h"

namespace dtrain::launcher {

class AttemptLog {
 public:
  explicit AttemptLog(std::string run_dir) : run_dir_(std::move(run_dir)) {}
  // Appends one attempt's end (`end` is now). The file is opened at the first end (the run directory may not
  // exist before the workers ran); a record that cannot be written is warned about once and the rest skipped: the
  // job matters more than its accounting.
  void Write(int attempt, const std::vector<HostSlots>& hosts, int world, double start, double noticed,
             const std::string& reason, const std::vector<std::string>& lost);

 private:
  const std::string run_dir_;
  runtime::MetricsWriter writer_;
  bool ok_ = true;  // false after a failure: warned about once
};

}  // namespace dtrain::launcher
