#pragma once
// RunReporter: everything a training run tells the outside, behind one object. The trainer measures; the reporter
// formats and writes:
//   - rank 0's progress line per log interval, and the warnings that go with it (input pipeline behind, a
//     step-time verdict that changed);
//   - rank 0's <run.dir>/metrics.jsonl (every record kind: start, restore, first_step, train, eval, checkpoint,
//     end), its train and eval records as rows of <run.dir>/metrics.csv (run.csv_metrics;
//     runtime/observe/csv_metrics.h) and TensorBoard scalars (run.tensorboard);
//   - the Prometheus feed (run.prometheus_port, each node's local rank 0: runtime/train/prometheus_feed.h);
//   - this rank's GPU telemetry and its idle/throttle alarms (run.gpu_sample_s; run.gpu_idle_exit asks the run to
//     stop through gpu_idle_stop());
//   - the live progress bar of a terminal (rank 0, stderr a tty, DTRAIN_NO_PROGRESS_BAR unset).
// Per log interval the trainer hands it one IntervalRecord: the values are the rank means already reduced by the
// trainer (the reporter does no collective). The line's text and the metrics.jsonl keys are what tests and bench/
// parse (runtime/train/progress_metrics.h); a value the record does not know (grad_norm NaN) is left out of both.
//
// Ownership: borrows nothing; owns the files, the exporter and the telemetry sampler. Not thread-safe: the
// trainer's thread only (the telemetry sampler and the exporter run their own threads internally).

#include <cstdint>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "core/status.h"
#include "proto/config.pb.h"
#include "runtime/observe/csv_metrics.h"
#include "runtime/observe/gpu_alarm.h"
#include "runtime/observe/gpu_telemetry.h"
#include "runtime/observe/metrics.h"
#include "runtime/observe/step_breakdown.h"
#include "runtime/observe/tensorboard.h"
#include "runtime/train/prometheus_feed.h"

namespace dtrain::runtime {

// Who reports: this worker's place in the job and its device.
struct ReporterIdentity {
  int rank = 0, world = 1;
  bool cuda = false;     // the device is a GPU (its telemetry is sampled with run.gpu_sample_s > 0)
  int device_index = 0;  // CUDA device index (GPU name in warnings, Prometheus gpu label)
  std::string model;     // model.kind (the Prometheus info label)
};

// One log interval, as every sink shows it.
struct IntervalRecord {
  int64_t epoch = 0;  // 1-based, as shown
  int64_t step = 0;   // optimizer steps done
  double loss = 0;    // mean training loss of the interval, over the ranks
  double lr = 0;      // the LR of the interval's last step
  // Global gradient norm of the last step (before clipping); NaN = not known: then it appears nowhere.
  double grad_norm = std::numeric_limits<double>::quiet_NaN();
  double samples_per_s = 0;
  int64_t tokens_per_sample = 0;  // > 0 for token models: adds tokens/s
  StepPhases phases;              // per-step breakdown
  double peak_mem_mib = 0;        // 0: not measured (CPU)
  // GPU telemetry averaged over the ranks that read any (gpu_ranks of them; 0: none did), and this rank's window.
  int gpu_ranks = 0;
  double gpu_util_pct = 0, gpu_mem_used_mib = 0, gpu_power_w = 0;
  GpuWindow gpu;
  std::vector<double> gpu_slots;  // every rank's PackGpuSlot, summed (empty when GpuSlots gave none)
};

// One evaluation, as every sink shows it: the means over all ranks' scored rows.
struct EvalRecord {
  int64_t epoch = 0;  // 1-based, as shown
  int64_t step = 0;   // optimizer steps done
  double loss = 0;
  double accuracy = 0;  // token models: of the next token
  double seconds = 0;   // wall time of the evaluation
  bool tokens = false;  // a token model: perplexity exp(loss) is shown instead of the accuracy
};

class RunReporter {
 public:
  // Starts this rank's GPU telemetry (cuda and run.gpu_sample_s > 0; a missing NVML is logged, not an error) and on
  // rank 0 opens <run.dir>/metrics.jsonl (appending), with run.csv_metrics <run.dir>/metrics.csv (appending; one of
  // other columns is warned about and left alone) and with run.tensorboard <run.dir>/tensorboard. run.dir must exist
  // on rank 0.
  static Status Create(const proto::Config& cfg, const ReporterIdentity& id, std::unique_ptr<RunReporter>* out);
  ~RunReporter();
  RunReporter(const RunReporter&) = delete;
  RunReporter& operator=(const RunReporter&) = delete;

  // Where this attempt starts and ends (optimizer steps); starts the Prometheus feed (InvalidArgument for an
  // address or port it cannot use). Once, before the first interval.
  Status SetPlan(int64_t start_step, int64_t total_steps);
  // The training loop begins: the elapsed time and ETA count from now; the live bar turns on where it applies.
  void StartLoop();

  // --- Per interval (every rank) ---
  // This rank's GPU window since the last call (samples == 0 without telemetry); feeds the alarms, which warn.
  GpuWindow TakeGpuWindow(double interval_s);
  // The slot vector the Prometheus feed gathers (PackGpuSlot for `w`); empty when the feed shows no GPUs. The
  // trainer sum-all-reduces it into IntervalRecord::gpu_slots.
  std::vector<double> GpuSlots(const GpuWindow& w) const;
  // False where ReportInterval does nothing (ranks other than 0 without a Prometheus feed): the trainer may skip
  // building the record.
  bool wants_intervals() const { return rank_ == 0 || prom_ != nullptr; }
  // The progress line, its warnings, TensorBoard, the metrics.jsonl "train" record (and its metrics.csv row) and the
  // Prometheus samples.
  Status ReportInterval(const IntervalRecord& r);
  // True once the GPU alarm asked the run to stop (run.gpu_idle_exit).
  bool gpu_idle_stop() const { return gpu_idle_stop_; }

  // --- Other events ---
  // Every rank: the Prometheus eval samples (a node's endpoint). Rank 0: the evaluation line (EvalLine), TensorBoard's
  // eval/loss, eval/accuracy (and eval/perplexity), the "eval" record of metrics.jsonl and its metrics.csv row.
  Status ReportEval(const EvalRecord& r);
  // A checkpoint of `step` begins (the Prometheus feed's last checkpoint).
  void OnCheckpoint(int64_t step);
  // Rank 0: one record into metrics.jsonl; other ranks: nothing.
  Status Write(const JsonLine& record);
  // Rank 0: logs the summary of every attempt of this run directory so far (from metrics.jsonl).
  void LogRunSummary();
  // After each step: redraws the live bar (at most every 0.25 s). ClearBar erases it before another log line.
  void Tick(int64_t step);
  void ClearBar();

 private:
  RunReporter(const proto::Config& cfg, const ReporterIdentity& id);
  // Elapsed seconds of this attempt and the estimated seconds left after `step`.
  void Progress(int64_t step, double* elapsed_s, double* eta_s) const;
  // Warns once when the GPU sits idle for run.gpu_idle_s (and with run.gpu_idle_exit asks the run to stop), and when
  // the driver starts throttling it.
  void WarnAboutGpu(const GpuWindow& w, double window_s);

  const proto::Config cfg_;
  const ReporterIdentity id_;
  const int rank_;
  int64_t start_step_ = 0, total_steps_ = 0;
  MetricsWriter metrics_;                     // rank 0
  std::unique_ptr<CsvMetricsWriter> csv_;     // rank 0 with run.csv_metrics
  std::unique_ptr<EventWriter> tensorboard_;  // rank 0 with run.tensorboard
  std::unique_ptr<PrometheusFeed> prom_;      // run.prometheus_port > 0, each node's local rank 0
  std::unique_ptr<GpuTelemetry> gpu_;         // null: off or no NVML
  GpuAlarm gpu_alarm_{GpuAlarmOptions()};
  bool gpu_idle_stop_ = false;
  std::string last_verdict_;  // the kind of the last step-time verdict ("communication-bound"): warned when it changes
  bool data_warned_ = false;  // the last interval waited too long for data (warned once until it recovers)
  double loop_start_s_ = 0, last_bar_s_ = 0;
  bool live_bar_ = false, bar_shown_ = false;
};

}  // namespace dtrain::runtime
