#pragma once
// `dtrain report RUN_DIR [--price P]`: the run summary of a run directory (runtime/observe/run_report.h) -
// wall time, GPU-hours, cost, preemptions, restarts, steps recomputed, time checkpointing and
// restarting, one line per attempt.
//
// RUN_DIR is a run directory (its metrics.jsonl is read) or a metrics.jsonl file itself. The price
// per GPU-hour is --price P when given, else run.price_per_gpu_hour of RUN_DIR/config.yaml (the
// resolved config the trainer stores there); without either the cost line says how to set it.
// With RUN_DIR/elastic.jsonl (an elastic launch, launcher/elastic_launch.h) the report adds one line per elastic
// attempt (hosts, world size, why it ended, time to recover, steps counted and recomputed), the goodput, and the
// cost per 1M samples at --price-spot and --price-on-demand (runtime/observe/elastic_report.h).
// Output goes to stdout.

#include <string>
#include <vector>

#include "core/status.h"

namespace CLI {
class App;
}  // namespace CLI

namespace dtrain::launcher {

struct ReportArgs {
  std::string run_dir;         // RUN_DIR
  double price = -1;           // --price; -1: from RUN_DIR/config.yaml
  double price_on_demand = 0;  // --price-on-demand (elastic runs; per rank-hour); 0: not given
  double price_spot = 0;       // --price-spot (elastic runs; per rank-hour); 0: not given
};

// Registers `report RUN_DIR [--price P]` on `parent` (launcher/cli_parse.h); *out must outlive `parent`.
CLI::App* AddReportCommand(CLI::App* parent, ReportArgs* out);

// Prints BuildReportText's text to stdout.
Status RunReport(const ReportArgs& args);

// The report for parsed arguments.
Status BuildReportText(const ReportArgs& args, std::string* text);

// The report for `args` (the words after `report`, parsed as AddReportCommand does); --help gives the help.
Status BuildReport(const std::vector<std::string>& args, std::string* text);

}  // namespace dtrain::launcher
