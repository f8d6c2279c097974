#include "runtime/train/prometheus_feed.h"

#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <functional>

#include "comm/dist_env.h"
#include "core/check.h"
#include "runtime/checkpoint/preemption.h"
#include "runtime/observe/run_report.h"

namespace dtrain::runtime {
namespace {

// How a ProgressMetric key appears in Prometheus: base units (seconds, bytes), names after its conventions.
struct Mapping {
  const char* key;
  const char* name;
  double scale;
  const char* help;
};

constexpr Mapping kMappings[] = {
    {"loss", "dtrain_loss", 1, "Training loss of the last progress interval, mean over the steps and ranks"},
    {"lr", "dtrain_learning_rate", 1, "Learning rate of the last step"},
    {"eval_loss", "dtrain_eval_loss", 1, "Loss of the last evaluation, mean over its scored rows (all ranks)"},
    {"eval_accuracy", "dtrain_eval_accuracy", 1, "Accuracy (0..1) of the last evaluation (token models: next token)"},
    {"eval_ppl", "dtrain_eval_perplexity", 1, "Perplexity exp(eval loss) of the last evaluation (token models)"},
    {"eval_s", "dtrain_eval_seconds", 1, "Wall time of the last evaluation"},
    {"samples_per_s", "dtrain_samples_per_second", 1, "Training samples per second over the last interval, all ranks"},
    {"tokens_per_s", "dtrain_tokens_per_second", 1, "Training tokens per second over the last interval, all ranks"},
    {"step_ms", "dtrain_step_seconds", 1e-3, "Wall time of one optimizer step, mean over the last interval"},
    {"data_ms", "dtrain_step_data_wait_seconds", 1e-3, "Per step: time waiting for input data"},
    {"fwd_bwd_ms", "dtrain_step_compute_seconds", 1e-3, "Per step: forward and backward compute"},
    {"comm_exposed_ms", "dtrain_step_comm_exposed_seconds", 1e-3,
     "Per step: gradient communication not hidden behind backward"},
    {"optim_ms", "dtrain_step_optimizer_seconds", 1e-3, "Per step: optimizer update"},
    {"ckpt_stall_ms", "dtrain_step_checkpoint_stall_seconds", 1e-3,
     "Per step: time training stood still for checkpoints (their stall spread over the interval's steps)"},
    {"peak_mem_mib", "dtrain_device_memory_peak_bytes", 1048576.0,
     "Peak device memory in use during the last interval (0 on the CPU)"},
};

// Exact in a double.
double HostHash(const std::string& host) { return static_cast<double>(std::hash<std::string>()(host) & 0xffffffffu); }

}  // namespace

std::string ThisHost() {
  char buf[256] = {};
  if (gethostname(buf, sizeof(buf) - 1) != 0) return "unknown";
  return buf;
}

void PackGpuSlot(const std::string& host, int rank, int world, int gpu, const GpuWindow& w, std::vector<double>* v) {
  v->assign(static_cast<size_t>(world) * kGpuSlotSize, 0.0);
  if (w.samples <= 0) return;
  double* slot = v->data() + static_cast<size_t>(rank) * kGpuSlotSize;
  const double values[kGpuSlotSize] = {
      HostHash(host),  1.0 + gpu, w.util_pct, w.mem_util_pct, w.mem_used_mib,
      w.mem_total_mib, w.power_w, w.temp_c,   w.sm_clock_mhz, w.ThrottleText().empty() ? 0.0 : 1.0};
  std::copy(values, values + kGpuSlotSize, slot);
}

std::vector<NodeGpu> NodeGpus(const std::vector<double>& v, const std::string& host) {
  std::vector<NodeGpu> out;
  const double mine = HostHash(host);
  for (size_t r = 0; r + kGpuSlotSize <= v.size(); r += kGpuSlotSize) {
    const double* s = v.data() + r;
    if (s[1] < 1 || s[0] != mine) continue;  // no telemetry (gpu + 1 = 0), or another node's GPU
    NodeGpu g;
    g.rank = static_cast<int>(r / kGpuSlotSize);
    g.gpu = static_cast<int>(s[1]) - 1;
    g.window.samples = 1;
    g.window.util_pct = s[2];
    g.window.mem_util_pct = s[3];
    g.window.mem_used_mib = s[4];
    g.window.mem_total_mib = s[5];
    g.window.power_w = s[6];
    g.window.temp_c = s[7];
    g.window.sm_clock_mhz = s[8];
    g.window.throttle = s[9] > 0 ? 1 : 0;  // only "throttled or not" travels
    out.push_back(g);
  }
  return out;
}

std::vector<PromSample> PrometheusSamples(const PrometheusRunInfo& info, int64_t epoch, int64_t step,
                                          const std::vector<ProgressMetric>& metrics, const std::vector<NodeGpu>& gpus,
                                          bool preemption_requested, int64_t last_ckpt_step, double last_ckpt_unix) {
  const std::vector<std::pair<std::string, std::string>> labels = {{"host", info.host},
                                                                   {"rank", std::to_string(info.rank)}};
  std::vector<PromSample> out;
  auto add = [&](std::string name, std::string help, double value, bool counter = false) {
    out.push_back({std::move(name), std::move(help), counter, labels, value});
  };
  PromSample about{"dtrain_info", "Constant 1; its labels describe the run", false, labels, 1};
  about.labels.insert(about.labels.end(),
                      {{"world", std::to_string(info.world)}, {"device", info.device}, {"model", info.model}});
  out.push_back(about);
  add("dtrain_step", "Optimizer steps done", static_cast<double>(step));
  add("dtrain_total_steps", "Optimizer steps the run will take", static_cast<double>(info.total_steps));
  add("dtrain_epoch", "Current epoch (1-based); 0 before the first progress line", static_cast<double>(epoch));
  add("dtrain_world_size", "Ranks of the job", info.world);
  for (const ProgressMetric& m : metrics) {
    if (m.group != nullptr && std::strcmp(m.group, "gpu") == 0) continue;  // below, per GPU with labels
    const Mapping* map = nullptr;
    for (const Mapping& c : kMappings) {
      if (std::strcmp(c.key, m.key) == 0) map = &c;
    }
    if (map != nullptr) {
      add(map->name, map->help, m.value * map->scale);
    } else {
      add(std::string("dtrain_") + m.key, std::string("metrics.jsonl key ") + m.key, m.value);
    }
  }
  for (const NodeGpu& g : gpus) {
    auto add_gpu = [&](const char* name, const char* help, double value) {
      out.push_back({name,
                     help,
                     false,
                     {{"gpu", std::to_string(g.gpu)}, {"host", info.host}, {"rank", std::to_string(g.rank)}},
                     value});
    };
    const GpuWindow& w = g.window;
    add_gpu("dtrain_gpu_utilization_percent", "GPU busy (a kernel running), mean over the last interval", w.util_pct);
    add_gpu("dtrain_gpu_memory_utilization_percent", "GPU memory controller busy, mean over the last interval",
            w.mem_util_pct);
    add_gpu("dtrain_gpu_memory_used_bytes", "GPU memory used (all processes), max over the last interval",
            w.mem_used_mib * 1048576.0);
    add_gpu("dtrain_gpu_memory_total_bytes", "GPU memory in total", w.mem_total_mib * 1048576.0);
    add_gpu("dtrain_gpu_power_watts", "GPU power draw, mean over the last interval", w.power_w);
    add_gpu("dtrain_gpu_temperature_celsius", "GPU temperature, max over the last interval", w.temp_c);
    add_gpu("dtrain_gpu_sm_clock_hertz", "GPU SM clock, mean over the last interval", w.sm_clock_mhz * 1e6);
    add_gpu("dtrain_gpu_throttled", "1 when the driver slowed the GPU (power or thermal) in the last interval",
            w.throttle != 0 ? 1 : 0);
  }
  // Counters, so named with _total (promtool check metrics refuses a counter without it, and a gauge ending in
  // _count, which Prometheus reserves for histograms and summaries).
  add("dtrain_restarts_total", "Restarts of the job by dtrain launch (DTRAIN_RESTART_COUNT)",
      static_cast<double>(info.restarts), /*counter=*/true);
  add("dtrain_slurm_requeues_total", "Requeues of the Slurm job (SLURM_RESTART_COUNT)",
      static_cast<double>(info.requeues), /*counter=*/true);
  add("dtrain_preemptions", "Earlier attempts of this run that ended preempted (exit 75), from metrics.jsonl",
      static_cast<double>(info.preemptions));
  add("dtrain_preemption_requested", "1 once this attempt received a preemption signal or spot notice",
      preemption_requested ? 1 : 0);
  if (last_ckpt_unix > 0) {
    add("dtrain_last_checkpoint_step", "Step of the last checkpoint this attempt took",
        static_cast<double>(last_ckpt_step));
    add("dtrain_last_checkpoint_timestamp_seconds", "Unix time the last checkpoint was taken", last_ckpt_unix);
    out.push_back({"dtrain_last_checkpoint_age_seconds", "Seconds since the last checkpoint was taken", false, labels,
                   last_ckpt_unix, /*age_of_unix_time=*/true});
  }
  return out;
}

Status StartPrometheusEndpoint(const proto::RunConfig& run, std::unique_ptr<PrometheusExporter>* out) {
  PrometheusOptions o;
  o.addr = run.prometheus_addr();
  o.port = static_cast<int>(run.prometheus_port());
  Status st = PrometheusExporter::Start(o, out);
  if (st.code() == Status::Code::kInvalidArgument)
    return Status::InvalidArgument("run.prometheus_addr: " + st.message());
  if (!st.ok()) {
    return Status::InvalidArgument("run.prometheus_port: " + st.message() +
                                   "; choose another run.prometheus_port, or 0 to turn the endpoint off");
  }
  return Status::OK();
}

Status CheckPrometheusEndpoint(const proto::RunConfig& run) {
  if (run.prometheus_port() <= 0) return Status::OK();
  std::unique_ptr<PrometheusExporter> probe;
  return StartPrometheusEndpoint(run, &probe);  // closed again when `probe` goes
}

Status PrometheusFeed::Start(const proto::Config& cfg, PrometheusRunInfo info, std::unique_ptr<PrometheusFeed>* out) {
  out->reset();
  const auto& run = cfg.run();
  if (run.prometheus_port() == 0) return Status::OK();
  comm::DistEnv env;
  const bool node_leader = comm::DetectDistEnv(&env).ok() ? env.local_rank == 0 : info.rank == 0;
  if (!node_leader) return Status::OK();
  if (info.host.empty()) info.host = ThisHost();
  if (env.source != "single") {
    info.restarts = env.restart_count;
    info.requeues = env.requeue_count;
  }
  RunSummary past;  // attempts so far (rank 0 reads it before this attempt's start record; other nodes if shared)
  if (LoadRunSummary(run.dir() + "/metrics.jsonl", &past).ok()) info.preemptions = past.preemptions;
  std::unique_ptr<PrometheusFeed> feed(new PrometheusFeed());  // private constructor
  DT_RETURN_IF_ERROR(StartPrometheusEndpoint(run, &feed->exporter_));
  feed->step_ = info.start_step;
  feed->info_ = std::move(info);
  feed->Publish();
  *out = std::move(feed);
  return Status::OK();
}

void PrometheusFeed::OnProgress(int64_t epoch, int64_t step, const std::vector<ProgressMetric>& metrics,
                                const std::vector<double>& gpu_slots) {
  epoch_ = epoch;
  step_ = step;
  metrics_ = metrics;
  gpus_ = NodeGpus(gpu_slots, info_.host);
  Publish();
}

void PrometheusFeed::OnEval(const std::vector<ProgressMetric>& eval_metrics) {
  eval_metrics_ = eval_metrics;
  Publish();
}

void PrometheusFeed::OnCheckpoint(int64_t step, double unix_time) {
  last_ckpt_step_ = step;
  last_ckpt_unix_ = unix_time;
  Publish();
}

void PrometheusFeed::Publish() {
  std::vector<ProgressMetric> all = metrics_;
  all.insert(all.end(), eval_metrics_.begin(), eval_metrics_.end());
  exporter_->Publish(PrometheusSamples(info_, epoch_, step_, all, gpus_, Preemption::Requested() != 0, last_ckpt_step_,
                                       last_ckpt_unix_));
}

}  // namespace dtrain::runtime
