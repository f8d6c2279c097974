#pragma once
// `dtrain report RUN_DIR [--price P]`: the run summary of a run directory (runtime/observe/run_report.h) -
// wall time, GPU-hours, cost, preemptions, restarts, steps recomputed, time checkpointing and
// restarting, one line per attempt.
//
// RUN_DIR is a run directory (its metrics.jsonl is read) or a metrics.jsonl file itself. The price
// per GPU-hour is --price P when given, else run.price_per_gpu_hour of RUN_DIR/config.yaml (the
// resolved config the trainer stores there); without either the cost line says how to set it.
// Output goes to stdout.

#include <string>
#include <vector>

#include "core/status.h"

namespace CLI {
class App;
}  // namespace CLI

namespace dtrain::launcher {

struct ReportArgs {
  std::string run_dir;  // RUN_DIR
  double price = -1;    // --price; -1: from RUN_DIR/config.yaml
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
