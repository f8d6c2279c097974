#pragma once
// PrometheusFeed: what the trainer shows on the Prometheus endpoint (run.prometheus_port; README "Monitoring").
// Each node's local rank 0 runs one PrometheusExporter (runtime/observe/prometheus_exporter.h); at every progress
// line the feed turns the interval's ProgressMetric list (runtime/train/progress_metrics.h: the same values as the
// progress line, metrics.jsonl and TensorBoard) into samples named in Prometheus' base units (dtrain_step_seconds,
// dtrain_loss, ...), adds this rank's GPU telemetry with gpu/host/rank labels, the run's position, restart and
// preemption counts and the last checkpoint, and publishes them. Every sample carries host and rank labels.
// Only numbers and the model kind/device are exposed: never config values, paths or credentials.
//
// Thread-safety: one thread (the trainer's); the exporter serves from its own.

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/status.h"
#include "proto/config.pb.h"
#include "runtime/observe/gpu_telemetry.h"
#include "runtime/observe/prometheus_exporter.h"
#include "runtime/train/progress_metrics.h"

namespace dtrain::runtime {

// What the feed knows of the run besides the interval's metrics.
struct PrometheusRunInfo {
  std::string host;  // this node's host name (label)
  int rank = 0, world = 1;
  std::string device, model;                // "cpu" | "cuda"; model.kind (label values of dtrain_info)
  int64_t start_step = 0, total_steps = 0;  // where this attempt starts (a resume) and ends
  int64_t restarts = 0;                     // DTRAIN_RESTART_COUNT: restarts by `dtrain launch`
  int64_t requeues = 0;                     // SLURM_RESTART_COUNT: requeues by Slurm
  int64_t preemptions = 0;  // earlier attempts of this run.dir that ended preempted (its metrics.jsonl, when readable)
};

// The samples of one progress interval. `gpu` (samples > 0) is this rank's GPU `gpu_index`; the metrics of group
// "gpu" (means over the ranks) are left out in favour of it. A ProgressMetric without a mapping here appears as
// dtrain_<key>. `last_ckpt_unix` <= 0: no checkpoint saved yet by this attempt.
std::vector<PromSample> PrometheusSamples(const PrometheusRunInfo& info, int64_t epoch, int64_t step,
                                          const std::vector<ProgressMetric>& metrics, const GpuWindow& gpu,
                                          int gpu_index, bool preemption_requested, int64_t last_ckpt_step,
                                          double last_ckpt_unix);

class PrometheusFeed {
 public:
  // With run.prometheus_port > 0 on a node's local rank 0 (LOCAL_RANK/OMPI/Slurm variables; rank 0 of the job when
  // they say nothing), starts the endpoint and publishes the run's first samples; otherwise sets *out to null.
  // An address that does not resolve or a port that cannot be bound is InvalidArgument (exit 2) naming the key
  // (run.prometheus_addr / run.prometheus_port) and addr:port.
  static Status Start(const proto::Config& cfg, PrometheusRunInfo info, std::unique_ptr<PrometheusFeed>* out);

  // After each progress line (rank-mean loss and breakdown as in metrics.jsonl).
  void OnProgress(int64_t epoch, int64_t step, const std::vector<ProgressMetric>& metrics, const GpuWindow& gpu,
                  int gpu_index);
  // When a checkpoint of `step` is taken (the save begins) at Unix time `unix_time`.
  void OnCheckpoint(int64_t step, double unix_time);

  int port() const { return exporter_->port(); }

 private:
  PrometheusFeed() = default;
  void Publish();

  PrometheusRunInfo info_;
  std::unique_ptr<PrometheusExporter> exporter_;
  int64_t epoch_ = 0, step_ = 0, last_ckpt_step_ = 0;
  double last_ckpt_unix_ = 0;
  std::vector<ProgressMetric> metrics_;
  GpuWindow gpu_;
  int gpu_index_ = 0;
};

}  // namespace dtrain::runtime
