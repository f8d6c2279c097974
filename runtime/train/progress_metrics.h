#pragma once
// The metrics of one progress interval, named once for the trainer's sinks: the progress line (rank 0's log),
// TensorBoard scalars, metrics.jsonl's "train" records (docs/architecture.md, Formats), metrics.csv and Prometheus;
// and those of one evaluation ("eval" records).
// A metric added to IntervalMetrics appears in every sink its entry names; the keys and the line's text are
// what tests and bench scripts parse, so they do not change.

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "runtime/observe/gpu_telemetry.h"
#include "runtime/observe/metrics.h"
#include "runtime/observe/step_breakdown.h"

namespace dtrain::runtime {

struct ProgressMetric {
  const char* key;    // metrics.jsonl key; also the TensorBoard tag's name
  const char* group;  // TensorBoard tag group ("train" -> "train/<key>"); nullptr: not a TensorBoard scalar
  double value;
  // printf format of its progress-line segment ("loss %.4f"); nullptr: not on the line.
  const char* line;
  bool line_if_positive = false;  // the segment only when value > 0
  bool line_whole = false;        // the line shows the value truncated to an integer
};

// The interval's metrics, in metrics.jsonl order. tokens_per_sample > 0 (token models) adds tokens_per_s.
std::vector<ProgressMetric> IntervalMetrics(double loss, double lr, double samples_per_s, int64_t tokens_per_sample,
                                            const StepPhases& p, double peak_mem_mib);

// Inserts the global gradient norm right after the loss, when it is finite (NaN: not known, no entry): the line
// shows "gnorm %.4f" (llm.c's "norm"), metrics.jsonl and TensorBoard "grad_norm" (train/grad_norm).
void AddGradNorm(double grad_norm, std::vector<ProgressMetric>* metrics);

// Appends the GPU telemetry of the interval: utilization, memory used and power averaged over the ranks (their
// means), and this rank's temperature and SM clock (`own`); the line shows "gpu N%" and "gpu mem N MiB".
void AddGpuMetrics(double util_pct, double mem_used_mib, double power_w, const GpuWindow& own,
                   std::vector<ProgressMetric>* metrics);

// One evaluation's metrics, in metrics.jsonl order (group "eval"): eval_loss, eval_accuracy (token models: of the next
// token), eval_ppl = exp(eval_loss) for token models (`tokens`), eval_s (its wall time). No line formats: EvalLine.
std::vector<ProgressMetric> EvalMetrics(double loss, double accuracy, bool tokens, double seconds);
// "epoch E/N step S/T eval | loss 2.3456 | ppl 10.44 | 1.52 s" for token models; classifiers show
// "| accuracy 85.12%" instead of the perplexity.
std::string EvalLine(int64_t epoch, int64_t epochs, int64_t step, int64_t total_steps, double loss, double accuracy,
                     bool tokens, double seconds);
// The columns of <run.dir>/metrics.csv (runtime/observe/csv_metrics.h): kind, epoch, step, time, every key the train
// records (IntervalMetrics, AddGradNorm, AddGpuMetrics) and the eval records (EvalMetrics) may hold, and the verdict.
const std::vector<std::string>& CsvColumns();

// "epoch E/N step S/T | loss ... | lr ... | ... samples/s | step ... ms (<breakdown>) | peak ... MiB | P% 1m 05s
// elapsed, eta 3m 10s": the segments of the metrics with a line format, in order, the step breakdown right after the
// step time, then the run's progress (percent of total_steps, elapsed time of this attempt, estimated time left).
std::string ProgressLine(int64_t epoch, int64_t epochs, int64_t step, int64_t total_steps,
                         const std::vector<ProgressMetric>& metrics, const StepPhases& p, double elapsed_s,
                         double eta_s);
// The live one-line bar of a terminal: "[#####-----]  37% step 520/1404 | 21.0 s elapsed, eta 35.0 s".
std::string ProgressBar(int64_t step, int64_t total_steps, double elapsed_s, double eta_s);
// The TensorBoard scalars ("group/key", value).
std::vector<std::pair<std::string, double>> TensorBoardScalars(const std::vector<ProgressMetric>& metrics);
// Adds every metric as "key": value.
void AddMetrics(const std::vector<ProgressMetric>& metrics, JsonLine* line);

}  // namespace dtrain::runtime
