#include "runtime/train/run_reporter.h"

#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>

#include "core/check.h"
#include "core/clock.h"
#include "core/logging.h"
#include "runtime/observe/run_report.h"
#include "runtime/train/progress_metrics.h"

namespace dtrain::runtime {
namespace {

// Data wait above this share of the step time gets a warning (the GPU should never wait for input).
constexpr double kDataWaitWarnShare = 0.05;

// The settings the step-time verdict's advice names (runtime/observe/step_breakdown.h), as this run has them.
TuningSettings TuningOf(const proto::Config& c) {
  TuningSettings t;
  t.data_workers = c.data().workers();
  t.data_prefetch = c.data().prefetch();
  t.batch_size = c.data().batch_size();
  t.grad_accum_steps = c.train().grad_accum_steps();
  t.bucket_mb = c.dist().bucket_mb();
  t.bf16_compress = c.dist().bf16_compress();
  t.zero1 = c.dist().zero1();
  t.offload = c.optim().offload() == "cpu";
  t.checkpoint_async = c.checkpoint().async();
  t.checkpoint_every_steps = c.checkpoint().every_steps();
  return t;
}

}  // namespace

RunReporter::RunReporter(const proto::Config& cfg, const ReporterIdentity& id) : cfg_(cfg), id_(id), rank_(id.rank) {}
RunReporter::~RunReporter() = default;

Status RunReporter::Create(const proto::Config& cfg, const ReporterIdentity& id, std::unique_ptr<RunReporter>* out) {
  std::unique_ptr<RunReporter> r(new RunReporter(cfg, id));  // private constructor
  const auto& run = cfg.run();
  if (id.cuda && run.gpu_sample_s() > 0) {  // each rank watches its own GPU
    const Status st = GpuTelemetry::StartForCudaDevice(id.device_index, run.gpu_sample_s(), &r->gpu_);
    if (!st.ok() && id.rank == 0) DT_LOG_INFO(kRuntime, "{}", st.message());
    r->gpu_alarm_ = GpuAlarm({run.gpu_idle_util_pct(), run.gpu_idle_s(), run.gpu_idle_exit()});
  }
  if (id.rank == 0) {
    DT_RETURN_IF_ERROR(r->metrics_.Open(run.dir() + "/metrics.jsonl"));
    if (run.csv_metrics()) {
      r->csv_ = std::make_unique<CsvMetricsWriter>();
      const Status st = r->csv_->Open(run.dir() + "/metrics.csv", CsvColumns());
      if (st.code() == Status::Code::kFailedPrecondition) {  // another version's columns: metrics.jsonl has it all
        DT_LOG_WARN(kRuntime, "run.csv_metrics: {}; this attempt writes no CSV rows (metrics.jsonl has them all)",
                    st.message());
        r->csv_.reset();
      } else {
        DT_RETURN_IF_ERROR(st);
      }
    }
    if (run.tensorboard()) DT_RETURN_IF_ERROR(EventWriter::Create(run.dir() + "/tensorboard", &r->tensorboard_));
  }
  *out = std::move(r);
  return Status::OK();
}

Status RunReporter::SetPlan(int64_t start_step, int64_t total_steps) {
  start_step_ = start_step;
  total_steps_ = total_steps;
  PrometheusRunInfo info;
  info.rank = rank_;
  info.world = id_.world;
  info.device = id_.cuda ? "cuda" : "cpu";
  info.model = id_.model;
  info.start_step = start_step;
  info.total_steps = total_steps;
  return PrometheusFeed::Start(cfg_, info, &prom_);
}

void RunReporter::StartLoop() {
  loop_start_s_ = MonotonicSeconds();
  // The live bar: a terminal only (under mpirun or in a log file the progress lines are the record).
  live_bar_ = rank_ == 0 && isatty(STDERR_FILENO) && std::getenv("DTRAIN_NO_PROGRESS_BAR") == nullptr;
}

GpuWindow RunReporter::TakeGpuWindow(double interval_s) {
  const GpuWindow gpu = gpu_ ? gpu_->TakeWindow() : GpuWindow();
  if (gpu.samples > 0) WarnAboutGpu(gpu, interval_s);
  return gpu;
}

std::vector<double> RunReporter::GpuSlots(const GpuWindow& w) const {
  std::vector<double> slots;
  if (cfg_.run().prometheus_port() > 0 && cfg_.run().gpu_sample_s() > 0) {
    PackGpuSlot(ThisHost(), rank_, id_.world, id_.device_index, w, &slots);
  }
  return slots;
}

Status RunReporter::ReportInterval(const IntervalRecord& r) {
  if (!wants_intervals()) return Status::OK();
  const StepPhases& p = r.phases;
  // Every metric of the interval, once, for the sinks (progress line, TensorBoard, metrics.jsonl, Prometheus).
  std::vector<ProgressMetric> metrics =
      IntervalMetrics(r.loss, r.lr, r.samples_per_s, r.tokens_per_sample, p, r.peak_mem_mib);
  AddGradNorm(r.grad_norm, &metrics);
  if (r.gpu_ranks > 0) AddGpuMetrics(r.gpu_util_pct, r.gpu_mem_used_mib, r.gpu_power_w, r.gpu, &metrics);
  if (prom_) prom_->OnProgress(r.epoch, r.step, metrics, r.gpu_slots);
  if (rank_ != 0) return Status::OK();
  double elapsed_s = 0, eta_s = 0;
  Progress(r.step, &elapsed_s, &eta_s);
  ClearBar();
  DT_LOG_INFO(kRuntime, "{}",
              ProgressLine(r.epoch, cfg_.train().epochs(), r.step, total_steps_, metrics, p, elapsed_s, eta_s));
  // Each bottleneck is warned about once, when it appears (and again only after it went away and came back).
  const bool data_behind = p.data_ms > kDataWaitWarnShare * p.step_ms;
  if (data_behind && !data_warned_) {
    DT_LOG_WARN(kRuntime,
                "input pipeline behind: waited {:.2f} ms per step for data ({:.0f}% of the step) with data.workers={} "
                "and data.prefetch={}: raise them, or check the storage the shards are read from",
                p.data_ms, 100.0 * p.data_ms / p.step_ms, cfg_.data().workers(), cfg_.data().prefetch());
  }
  data_warned_ = data_behind;
  const std::string verdict = StepVerdict(p, TuningOf(cfg_));
  const std::string verdict_kind = verdict.substr(0, verdict.find(':'));  // "communication-bound", ...
  if (!verdict.empty() && verdict.rfind("compute-bound", 0) != 0 && verdict_kind != last_verdict_) {
    DT_LOG_WARN(kRuntime, "step time: {}", verdict);
  }
  last_verdict_ = verdict_kind;
  if (tensorboard_) DT_RETURN_IF_ERROR(tensorboard_->AddScalars(r.step, WallSeconds(), TensorBoardScalars(metrics)));
  JsonLine record;
  record.Add("kind", std::string("train")).Add("epoch", r.epoch).Add("step", r.step).Add("time", WallSeconds());
  AddMetrics(metrics, &record);
  record.Add("verdict", verdict);
  if (csv_) DT_RETURN_IF_ERROR(csv_->Write(record));
  return metrics_.Write(record);
}

Status RunReporter::ReportEval(const EvalRecord& r) {
  const std::vector<ProgressMetric> metrics = EvalMetrics(r.loss, r.accuracy, r.tokens, r.seconds);
  if (prom_) prom_->OnEval(metrics);
  if (rank_ != 0) return Status::OK();
  ClearBar();
  DT_LOG_INFO(kRuntime, "{}",
              EvalLine(r.epoch, cfg_.train().epochs(), r.step, total_steps_, r.loss, r.accuracy, r.tokens, r.seconds));
  if (tensorboard_) {
    std::vector<std::pair<std::string, double>> scalars = {{"eval/loss", r.loss}, {"eval/accuracy", r.accuracy}};
    if (r.tokens) scalars.emplace_back("eval/perplexity", std::exp(r.loss));
    DT_RETURN_IF_ERROR(tensorboard_->AddScalars(r.step, WallSeconds(), scalars));
  }
  JsonLine record;
  record.Add("kind", std::string("eval")).Add("epoch", r.epoch).Add("step", r.step).Add("time", WallSeconds());
  AddMetrics(metrics, &record);
  if (csv_) DT_RETURN_IF_ERROR(csv_->Write(record));
  return metrics_.Write(record);
}

void RunReporter::OnCheckpoint(int64_t step) {
  if (prom_) prom_->OnCheckpoint(step, WallSeconds());
}

Status RunReporter::Write(const JsonLine& record) { return rank_ == 0 ? metrics_.Write(record) : Status::OK(); }

void RunReporter::LogRunSummary() {
  if (rank_ != 0) return;
  RunSummary run;  // every attempt of this run directory so far
  if (LoadRunSummary(metrics_.path(), &run).ok()) {
    DT_LOG_INFO(kRuntime, "run summary ({}):\n{}", metrics_.path(),
                FormatRunSummary(run, cfg_.run().price_per_gpu_hour()));
  }
}

void RunReporter::WarnAboutGpu(const GpuWindow& w, double window_s) {
  const std::string name = "GPU " + std::to_string(id_.device_index) + " (rank " + std::to_string(rank_) + ")";
  const GpuAlarmEvents ev = gpu_alarm_.Observe(w, window_s);
  if (!ev.idle.empty()) {
    DT_LOG_WARN(
        kRuntime,
        "{} has been {}: you are paying for an idle GPU; the progress line's step breakdown says where the "
        "time goes (data wait: raise data.workers){}",
        name, ev.idle,
        cfg_.run().gpu_idle_exit() ? "; run.gpu_idle_exit is set: saving a checkpoint and exiting with code 75" : "");
  }
  gpu_idle_stop_ = gpu_idle_stop_ || ev.stop;
  if (!ev.throttle.empty()) {
    DT_LOG_WARN(kRuntime, "{} is slowed down by the driver: {} (SM clock {:.0f} MHz, {:.0f} W, {:.0f} C)", name,
                ev.throttle, w.sm_clock_mhz, w.power_w, w.temp_c);
  }
}

void RunReporter::Progress(int64_t step, double* elapsed_s, double* eta_s) const {
  *elapsed_s = MonotonicSeconds() - loop_start_s_;
  const int64_t done = step - start_step_;
  *eta_s = done > 0 ? *elapsed_s / static_cast<double>(done) * static_cast<double>(total_steps_ - step) : 0;
}

void RunReporter::Tick(int64_t step) {
  if (!live_bar_ || MonotonicSeconds() - last_bar_s_ < 0.25) return;
  last_bar_s_ = MonotonicSeconds();
  double elapsed_s = 0, eta_s = 0;
  Progress(step, &elapsed_s, &eta_s);  // host-side: the device may be a few queued steps behind
  std::fprintf(stderr, "\r\033[K%s", ProgressBar(step, total_steps_, elapsed_s, eta_s).c_str());
  std::fflush(stderr);
  bar_shown_ = true;
}

void RunReporter::ClearBar() {
  if (!bar_shown_) return;
  std::fputs("\r\033[K", stderr);
  bar_shown_ = false;
}

}  // namespace dtrain::runtime
