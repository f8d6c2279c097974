#pragma once
// PrometheusFeed: what the trainer shows on the Prometheus endpoint (run.prometheus_port; README "Monitoring").
// Each node's local rank 0 runs one PrometheusExporter (runtime/observe/prometheus_exporter.h); at every progress
// line the feed turns the interval's ProgressMetric list (runtime/train/progress_metrics.h: the same values as the
// progress line, metrics.jsonl and TensorBoard) into samples named in Prometheus' base units (dtrain_step_seconds,
// dtrain_loss, ...), adds the node's GPU telemetry with gpu/host/rank labels, the run's position, restart and
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

// One GPU of this node: the rank that drives it, its CUDA device index there, its telemetry of the interval.
struct NodeGpu {
  int rank = 0;
  int gpu = 0;
  GpuWindow window;
};

// The GPU telemetry of every rank, gathered by one sum all-reduce of a world x kGpuSlotSize vector in which each
// rank fills only its own slot (PackGpuSlot, zeros elsewhere); each node's endpoint then takes the slots of the
// ranks on its host (NodeGpus; hosts are told apart by a 32-bit hash of the host name). A rank without telemetry
// fills a slot with samples = 0, which NodeGpus leaves out.
constexpr int kGpuSlotSize = 10;
void PackGpuSlot(const std::string& host, int rank, int world, int gpu, const GpuWindow& w, std::vector<double>* v);
std::vector<NodeGpu> NodeGpus(const std::vector<double>& v, const std::string& host);
// This machine's host name (the `host` label).
std::string ThisHost();

// The samples of one progress interval; `gpus` are this node's GPUs (their series carry gpu, host and the rank
// driving them), and the metrics of group "gpu" (means over the ranks) are left out in favour of them. A
// ProgressMetric without a mapping here appears as dtrain_<key>. `last_ckpt_unix` <= 0: no checkpoint saved yet.
std::vector<PromSample> PrometheusSamples(const PrometheusRunInfo& info, int64_t epoch, int64_t step,
                                          const std::vector<ProgressMetric>& metrics, const std::vector<NodeGpu>& gpus,
                                          bool preemption_requested, int64_t last_ckpt_step, double last_ckpt_unix);

class PrometheusFeed {
 public:
  // With run.prometheus_port > 0 on a node's local rank 0 (LOCAL_RANK/OMPI/Slurm variables; rank 0 of the job when
  // they say nothing), starts the endpoint and publishes the run's first samples; otherwise sets *out to null.
  // An address that does not resolve or a port that cannot be bound is InvalidArgument (exit 2) naming the key
  // (run.prometheus_addr / run.prometheus_port) and addr:port.
  static Status Start(const proto::Config& cfg, PrometheusRunInfo info, std::unique_ptr<PrometheusFeed>* out);

  // After each progress line (rank-mean loss and breakdown as in metrics.jsonl); `gpu_slots`: every rank's
  // PackGpuSlot, summed (empty without telemetry).
  void OnProgress(int64_t epoch, int64_t step, const std::vector<ProgressMetric>& metrics,
                  const std::vector<double>& gpu_slots);
  // After each evaluation (EvalMetrics): dtrain_eval_loss, dtrain_eval_accuracy, dtrain_eval_perplexity (token
  // models), dtrain_eval_seconds, shown with every later publish.
  void OnEval(const std::vector<ProgressMetric>& eval_metrics);
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
  std::vector<ProgressMetric> eval_metrics_;  // of the last evaluation
  std::vector<NodeGpu> gpus_;
};

}  // namespace dtrain::runtime
