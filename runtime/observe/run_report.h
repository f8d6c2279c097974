#pragma once
// The run summary: what a run cost and where its time went, from <run_dir>/metrics.jsonl.
//
// metrics.jsonl is written by rank 0 (runtime/train/trainer.cc), one JSON object per line, appended across
// the restarts of a run directory. Records used here ("kind"):
//   start       time, restart (DTRAIN_RESTART_COUNT), resume_step (0 = fresh), world, device, total_steps,
//               global_batch (samples per step)
//   first_step  step, time: the attempt's first step completed (the end of a recovery)
//   train       step, time, loss, step_ms, ...          eval        step, time, eval_loss, eval_accuracy[, eval_ppl]
//   checkpoint  step, time, stall_ms, wait_ms, async    end         step, time, status done|preempted|failed
//   restore     (written before its attempt's start record: ignored, so that it does not extend the previous one)
// Each "start" opens an attempt; the records up to the next start belong to it.
//
// Figures (times are the records' Unix seconds):
//   wall time        first start to the last record of the file;
//   GPU-hours        sum over attempts of (last record - start) x world / 3600; the gaps between
//                    attempts are not counted (no worker ran). CPU runs count rank-hours;
//   cost             GPU-hours x price per GPU-hour;
//   preemptions      attempts that ended with status "preempted";
//   restarts         starts after the first one, or with restart > 0 (the first start of a file
//                    continued from another directory's run);
//   steps recomputed per restart: the previous attempt's last logged step (the highest step of its
//                    train/eval/checkpoint/end records) minus the resume step, at least 0. The
//                    previous attempt may have gone further than its last log line (train lines come
//                    every train.log_every steps; a killed worker writes no end record), so this is a
//                    lower bound, short by less than log_every per restart; it is exact when the
//                    attempt ended with an end record;
//   time recomputing steps recomputed x mean step_ms of the train records (0 without them);
//   time checkpointing  sum of the checkpoint records' stall_ms (the loop stood still), and
//                    separately the sum of wait_ms (waits for a previous async save);
//   time restarting  sum over restarts of (start - last record of the previous attempt).
//
// Robustness: a last line cut short by a kill is ignored and counted; a line where a killed write was
// continued by the next attempt's append ("{"kind":"tr{"kind":"start",...}") is read from its last
// complete object; other unparsable lines are skipped and counted. A missing file is NotFound and a
// file without records, or with records before its first start, is DataLoss, each naming the file.
//
// All functions are stateless and thread-safe.

#include <cstdint>
#include <string>
#include <vector>

#include "core/status.h"

namespace dtrain::runtime {

struct AttemptSummary {
  double start_time = 0;  // Unix seconds of the start record
  double last_time = 0;   // of the attempt's last record
  int64_t restart = 0;    // DTRAIN_RESTART_COUNT
  int64_t resume_step = 0;
  int64_t world = 0;
  std::string device;            // "cuda" | "cpu"
  int64_t global_batch = 0;      // samples per step (0: not recorded)
  double first_step_time = 0;    // Unix seconds of the first_step record (0: none)
  int64_t last_step = 0;         // highest logged step (resume_step when nothing was logged)
  std::string end_status;        // "done" | "preempted" | "failed" | "" (no end record: killed)
  int64_t steps_recomputed = 0;  // attempts after the first: see the file comment
  double restart_gap_s = 0;      // attempts after the first: start - previous attempt's last record
  double gpu_busy_s = 0;         // sum over train records with gpu_util_pct of (util / 100) x the interval they close
  double gpu_timed_s = 0;        // the intervals those records close: busy / timed = time-weighted GPU utilization
};

struct RunSummary {
  std::string source;  // the metrics file
  std::vector<AttemptSummary> attempts;
  double wall_s = 0;
  double gpu_hours = 0;
  int64_t preemptions = 0;
  int64_t restarts = 0;
  int64_t steps_recomputed = 0;
  double recompute_s = 0;
  double mean_step_ms = 0;  // over all train records; 0 without them
  int64_t checkpoints = 0;
  double checkpoint_stall_s = 0;
  double checkpoint_wait_s = 0;
  double restart_s = 0;
  int64_t final_step = 0;   // last attempt's last_step
  int64_t total_steps = 0;  // of the last start record
  bool has_loss = false;
  double last_loss = 0;  // of the last train record with a loss
  bool has_eval = false;
  double eval_loss = 0, eval_accuracy = 0;  // of the last eval record
  bool has_eval_ppl = false;                // the last eval record has eval_ppl (a token model)
  double eval_ppl = 0;
  int64_t skipped_lines = 0;  // unparsable lines (see Robustness)
  bool truncated_last_line = false;
};

// Summarizes the text of a metrics file; `source` names it in errors and in the summary.
Status SummarizeMetrics(const std::string& text, const std::string& source, RunSummary* out);

// Reads `path` and summarizes it. NotFound names the path when it does not exist.
Status LoadRunSummary(const std::string& path, RunSummary* out);

// The summary as printed at the end of training and by `dtrain report`: one figure per line.
// price_per_gpu_hour <= 0 leaves the cost out (with a hint how to set it).
std::string FormatRunSummary(const RunSummary& s, double price_per_gpu_hour);

// "45.2 s", "3m 05s", "2h 07m 03s".
std::string FormatDuration(double seconds);

}  // namespace dtrain::runtime
