#include "runtime/train/trainer.h"

#include <sys/stat.h>

#include <cerrno>
#include <cmath>
#include <cstring>
#include <fstream>
#include <limits>
#include <map>
#include <optional>

#include "core/allocator.h"
#include "core/check.h"
#include "core/clock.h"
#include "core/nvtx.h"
#include "runtime/checkpoint/dtype_convert.h"
#include "runtime/checkpoint/safetensors.h"
#include "runtime/config/config.h"
#include "runtime/observe/step_breakdown.h"
#include "runtime/train/finished_run.h"
#include "runtime/train/hf_import.h"
#include "runtime/train/master_halves.h"
#include "runtime/train/memory_fit.h"
#include "runtime/train/model_factory.h"
#include "runtime/train/step_body.h"
#include "runtime/train/step_graph.h"
#include "runtime/train/weights_metadata.h"
#if DT_HAVE_CUDA
#include "core/cuda_handles.h"
#endif

namespace dtrain::runtime {
namespace {

std::string ShapeString(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

// The PhaseTimer's phases of a step.
enum { kPhaseData, kPhaseCompute, kPhaseComm, kPhaseOptim, kNumPhases };

// The eager step's hooks (runtime/train/step_body.h): batches from the data source as the loop reaches them, the
// PhaseTimer's phases, the host trace spans and, in a trace window (dev non-null), the compute stream's spans.
class EagerStep final : public StepHooks {
 public:
  EagerStep(DeviceContext& ctx, DataSource& data, PhaseTimer& phases, ParameterUpdater& updater, TraceWriter* trace,
            DeviceTrace* dev, int64_t accum, double lr, double* data_seconds)
      : ctx_(ctx),
        data_(data),
        phases_(phases),
        updater_(updater),
        trace_(trace),
        dev_(dev),
        accum_(accum),
        lr_(lr),
        data_seconds_(data_seconds) {}

  Status TakeBatch(int64_t m, const Tensor** inputs, const Tensor** targets) override {
    TraceSpan span(trace_, TraceTrack::kHost, "data wait", "data");
    DT_RETURN_IF_ERROR(phases_.Switch(kPhaseData));
    DT_RETURN_IF_ERROR(data_.Next(&batch_));
    DT_RETURN_IF_ERROR(phases_.Switch(kPhaseCompute));
    *data_seconds_ += batch_.wait_seconds;
    *inputs = &batch_.inputs;
    *targets = &batch_.targets;
    return Status::OK();
  }
  Status BeforeForward(int64_t m) override {
    span_.emplace(trace_, TraceTrack::kHost, "forward+backward (queue)", "compute");
    if (dev_ && m == 0) DT_RETURN_IF_ERROR(dev_->Record(ctx_.stream(), &compute_begin_));
    return Status::OK();
  }
  Status AfterBackward(int64_t m) override {
    span_.reset();
    return Status::OK();
  }
  Status BeforeFinalize() override {
    if (dev_) {
      DT_RETURN_IF_ERROR(dev_->Record(ctx_.stream(), &compute_end_));
      dev_->Span(TraceTrack::kCompute, "forward+backward", "compute", compute_begin_, compute_end_,
                 JsonLine().Add("micro_batches", accum_));
    }
    DT_RETURN_IF_ERROR(phases_.Switch(kPhaseComm));
    span_.emplace(trace_, TraceTrack::kHost, "gradient finalize", "comm");
    return Status::OK();
  }
  Status AfterFinalize() override {
    span_.reset();
    DT_RETURN_IF_ERROR(phases_.Switch(kPhaseOptim));
    span_.emplace(trace_, TraceTrack::kHost, "optimizer (queue)", "optim");  // until the step ends
    return Status::OK();
  }
  Status Update() override { return updater_.Step(lr_); }
  // In a trace window: the compute stream's span from the end of backward to the end of the optimizer.
  Status EndOptimizer() {
    DT_RETURN_IF_ERROR(dev_->Record(ctx_.stream(), &optim_end_));
    dev_->Span(TraceTrack::kCompute, "wait for gradients + optimizer", "optim", compute_end_, optim_end_);
    return Status::OK();
  }

 private:
  DeviceContext& ctx_;
  DataSource& data_;
  PhaseTimer& phases_;
  ParameterUpdater& updater_;
  TraceWriter* trace_;  // null outside the trace window
  DeviceTrace* dev_;    // null outside the trace window
  const int64_t accum_;
  const double lr_;
  double* data_seconds_;
  data::Batch batch_;              // the micro-batch being queued
  std::optional<TraceSpan> span_;  // the host span now open
  DeviceTrace::Mark compute_begin_, compute_end_, optim_end_;
};

// A captured step's hooks: the micro-batches taken before the capture, the optimizer's device half (StageStep ran
// before the replay). No host work: a capture records device work only.
class CapturedStep final : public StepHooks {
 public:
  CapturedStep(const std::vector<StepGraph::MicroBatch>& batches, ParameterUpdater& updater)
      : batches_(batches), updater_(updater) {}
  Status TakeBatch(int64_t m, const Tensor** inputs, const Tensor** targets) override {
    *inputs = &batches_[static_cast<size_t>(m)].inputs;
    *targets = &batches_[static_cast<size_t>(m)].targets;
    return Status::OK();
  }
  Status Update() override { return updater_.ApplyStep(); }

 private:
  const std::vector<StepGraph::MicroBatch>& batches_;
  ParameterUpdater& updater_;
};

Status MakeDirs(const std::string& path) {
  std::string partial;
  for (size_t i = 0; i <= path.size(); ++i) {
    if (i == path.size() || path[i] == '/') {
      if (!partial.empty() && mkdir(partial.c_str(), 0755) != 0 && errno != EEXIST) {
        return Status::IoError("cannot create run directory '" + partial + "': " + std::strerror(errno));
      }
    }
    if (i < path.size()) partial += path[i];
  }
  return Status::OK();
}

}  // namespace

Trainer::Trainer(const proto::Config& cfg, DeviceContext& ctx) : cfg_(cfg), ctx_(ctx) {}
Trainer::~Trainer() = default;

Status Trainer::Create(const proto::Config& cfg, DeviceContext& ctx, comm::Communicator* grad_comm,
                       comm::Communicator* host_comm, const comm::DistEnv& env, std::unique_ptr<Trainer>* out) {
  std::unique_ptr<Trainer> t(new Trainer(cfg, ctx));  // private constructor
  t->grad_comm_ = grad_comm;
  t->host_comm_ = host_comm;
  t->env_ = env;
  t->rank_ = env.rank;
  t->world_ = env.world_size;
  const Status st = t->Setup();
  if (!st.ok()) {
    if (t->run_lock_ != nullptr) t->run_lock_->Discard();  // a refused start leaves no run directory behind
    return st;
  }
  *out = std::move(t);
  return Status::OK();
}

Status Trainer::Setup() {
  const auto& d = cfg_.data();
  DT_RETURN_IF_ERROR(FaultInjector::FromEnv(env_.restart_count, &fault_));
  if (rank_ == 0) {  // one job per run.dir, held until the trainer goes (runtime/checkpoint/run_lock.h)
    std::string took_over;
    DT_RETURN_IF_ERROR(RunLock::Acquire(cfg_.run().dir(), &run_lock_, &took_over));
    LogLockTakeover(env_, took_over);
  }
  DT_RETURN_IF_ERROR(MakeDataSource(cfg_, ctx_, env_, &data_));
  const int64_t accum = cfg_.train().grad_accum_steps();

  DT_RETURN_IF_ERROR(BuildModel(cfg_, ctx_, &model_));
  if (rank_ == 0 && !model_->precision_summary().empty()) {
    DT_LOG_INFO(kRuntime, "precision {}", model_->precision_summary());
  }
  phases_ = std::make_unique<PhaseTimer>(ctx_, kNumPhases);
  // The updater first: split masters' low halves (train.master_weights split) are its state, and an import writes them.
  DT_RETURN_IF_ERROR(MakeParameterUpdater(cfg_, ctx_, *model_, grad_comm_, rank_, world_, &updater_));
  DT_LOG_INFO(kRuntime, "optimizer state: {:.1f} MiB on this rank ({})", updater_->state_bytes() / 1048576.0,
              updater_->placement());
  DT_RETURN_IF_ERROR(model_->InitParams(cfg_.train().seed()));
  if (!cfg_.model().init_from().empty()) DT_RETURN_IF_ERROR(ImportParams(cfg_.model().init_from()));
  {  // the plan the first step's measured peak is compared with (0: the model has none)
    models::MemoryPlanInputs in;
    models::MemoryPlan plan;
    if (MemoryPlanInputsOf(cfg_, world_, ctx_.is_cuda(), &in).ok() && PlanRunMemory(cfg_, in, &plan).ok()) {
      memory_plan_bytes_ = plan.total();
      memory_plan_allocator_bytes_ = plan.allocator_total();
    }
  }
  const std::string graph_blocker = StepGraph::Blocker(cfg_, ctx_, *updater_);
  if (graph_blocker.empty()) {
    step_graph_ = std::make_unique<StepGraph>(ctx_);
  } else if (ctx_.is_cuda() && rank_ == 0) {
    DT_LOG_INFO(kRuntime, "CUDA graphs off: {}", graph_blocker);
  }
  const auto& s = cfg_.schedule();
  DT_RETURN_IF_ERROR(
      LrSchedule::Create(s.kind(), cfg_.optim().lr(), s.warmup_steps(), ScheduleSteps(), s.min_lr_ratio(), &schedule_));

  DT_RETURN_IF_ERROR(Tensor::Empty({1, 1}, DType::kF32, ctx_.allocator(), &loss_acc_));
  DT_RETURN_IF_ERROR(loss_acc_.SetZero(ctx_.stream()));

  // What to resume from is decided (and restored) before anything is written to run.dir: a refused start writes
  // nothing there.
  CheckpointParts parts;
  parts.cfg = &cfg_;
  parts.ctx = &ctx_;
  parts.env = &env_;
  parts.host_comm = host_comm_;
  parts.model = model_.get();
  parts.updater = updater_.get();
  parts.data = data_.get();
  parts.schedule = schedule_.get();
  parts.fault = &fault_;
  parts.step_lr = [this](int64_t step) { return StepLr(step); };
  ResumePoint at;
  DT_RETURN_IF_ERROR(CheckpointCoordinator::Open(parts, &checkpoints_, &at));
  if (at.reinit_state) {
    DT_RETURN_IF_ERROR(model_->InitParams(cfg_.train().seed()));
    if (!cfg_.model().init_from().empty()) DT_RETURN_IF_ERROR(ImportParams(cfg_.model().init_from()));
    DT_RETURN_IF_ERROR(updater_->ResetState());
  }
  start_step_ = last_step_ = at.step;
  samples_seen_ = at.samples_seen;
  total_steps_ = EndStep();
  DT_LOG_INFO(kRuntime, "model {}: {} parameters in {} tensors ({} masters, {} gradients); {} steps, global batch {}",
              cfg_.model().kind(), model_->params().numel(), model_->param_infos().size(),
              updater_->options().split_masters ? "split" : DTypeName(model_->params().dtype()),
              DTypeName(model_->grads().dtype()), total_steps_, d.batch_size() * accum * world_);
  if (rank_ == 0 && !cfg_.run().final_weights()) {
    DT_LOG_WARN(kRuntime, "run.final_weights false: no {}/final.safetensors at the end; {}", cfg_.run().dir(),
                cfg_.checkpoint().enabled() ? "the last checkpoint holds the trained weights (dtrain ckpt export)"
                                            : "with checkpoint.enabled false the trained weights are kept nowhere");
  }
  if (AlreadyDone()) {
    // A finished run started again writes nothing (Run() says "already done"); with another config it is refused.
    DT_RETURN_IF_ERROR(CheckFinishedRun(at.config_yaml, cfg_, start_step_));
    // Killed after its last checkpoint and before its weights file was written (a spot reclaim at the very end):
    // the weights of that checkpoint, the run's final ones, complete it. An existing file is left as it is.
    const std::string final_path = cfg_.run().dir() + "/final.safetensors";
    if (rank_ == 0 && cfg_.run().final_weights() && !std::ifstream(final_path).good()) {
      DT_RETURN_IF_ERROR(ExportParams(final_path));
    }
    if (run_lock_ != nullptr) run_lock_->Discard();  // the lock file as it was, times included
    return Status::OK();
  }

  if (rank_ == 0) {
    DT_RETURN_IF_ERROR(MakeDirs(cfg_.run().dir()));
    std::ofstream(cfg_.run().dir() + "/config.yaml") << ConfigToYaml(cfg_);
  }
  ReporterIdentity who;
  who.rank = rank_;
  who.world = world_;
  who.cuda = ctx_.is_cuda();
  who.device_index = ctx_.device_index();
  who.model = cfg_.model().kind();
  DT_RETURN_IF_ERROR(RunReporter::Create(cfg_, who, &reporter_));
  if (cfg_.run().trace_steps() > 0) {
    DT_RETURN_IF_ERROR(MakeDirs(cfg_.run().dir() + "/trace"));
    DT_RETURN_IF_ERROR(TraceWriter::Create(TraceFilePath(cfg_.run().dir(), rank_), rank_, &trace_));
    device_trace_ = std::make_unique<DeviceTrace>(trace_.get(), ctx_);
  }
  if (checkpoints_) DT_RETURN_IF_ERROR(checkpoints_->Start(reporter_.get()));
  return reporter_->SetPlan(start_step_, total_steps_);
}

Status Trainer::TrainStep(int64_t step, double* data_seconds) {
  DT_NVTX_RANGE("train_step");
  // Blocks on peers: MPI all-reduces in backward (CPU), batch-slot syncs behind NCCL work (GPU).
  comm::WatchdogScope armed(watchdog_, "step " + std::to_string(step + 1) + " (gradient all-reduce)");
  const auto& run = cfg_.run();
  trace_now_ = trace_ && InTraceWindow(step, run.trace_start(), run.trace_steps()) ? trace_.get() : nullptr;
  // Traced steps run eagerly: their spans come from events between the kernels.
  if (step_graph_ && trace_now_ == nullptr && step_graph_->WantStep()) return GraphedStep(step, data_seconds);
  const int64_t accum = cfg_.train().grad_accum_steps();
  DeviceTrace* dev = trace_now_ ? device_trace_.get() : nullptr;
  if (dev && (step == start_step_ || !InTraceWindow(step - 1, run.trace_start(), run.trace_steps()))) {
    DT_RETURN_IF_ERROR(dev->Begin());  // the window's first step: one device sync anchors the stream clocks
    updater_->set_trace(dev);
  }
  TraceSpan step_span(trace_now_, TraceTrack::kHost, "step " + std::to_string(step + 1), "step");
  last_lr_ = StepLr(step);
  EagerStep hooks(ctx_, *data_, *phases_, *updater_, trace_now_, dev, accum, last_lr_, data_seconds);
  DT_RETURN_IF_ERROR(RunStepBody({ctx_, *model_, *updater_, loss_acc_}, accum, hooks));
  if (dev) {
    // The optimizer starts once the compute stream has joined the collectives (compute_end is earlier).
    DT_RETURN_IF_ERROR(hooks.EndOptimizer());
    if (step + 1 == total_steps_ || !InTraceWindow(step + 1, run.trace_start(), run.trace_steps())) {
      updater_->set_trace(nullptr);
      DT_RETURN_IF_ERROR(dev->Flush());  // the window's last step: one sync resolves the stream spans
    }
  }
  return phases_->EndStep();
}

Status Trainer::GraphedStep(int64_t step, double* data_seconds) {
  const int64_t accum = cfg_.train().grad_accum_steps();
  DT_RETURN_IF_ERROR(phases_->Switch(kPhaseData));
  // The graph reads the micro-batches in the loader's device buffers (they stay put for 2 * accum - 1 more batches:
  // data_source.h), no staging copy.
  std::vector<StepGraph::MicroBatch> batches(static_cast<size_t>(accum));
  for (StepGraph::MicroBatch& mb : batches) {
    data::Batch batch;
    DT_RETURN_IF_ERROR(data_->Next(&batch));
    *data_seconds += batch.wait_seconds;
    mb = {batch.inputs, batch.targets};
  }
  // One phase for the whole replay: forward, backward and the optimizer are inside the graph.
  DT_RETURN_IF_ERROR(phases_->Switch(kPhaseCompute));
  last_lr_ = StepLr(step);
  DT_RETURN_IF_ERROR(updater_->StageStep(last_lr_));
  // The step's device work, the same body TrainStep runs eagerly (no loss scaler here: see StepGraph::Blocker).
  auto body = [&](const std::vector<StepGraph::MicroBatch>& mbs) -> Status {
    CapturedStep hooks(mbs, *updater_);
    return RunStepBody({ctx_, *model_, *updater_, loss_acc_}, static_cast<int64_t>(mbs.size()), hooks);
  };
  bool captured = false;
  std::string off_reason;
  DT_RETURN_IF_ERROR(step_graph_->Run(batches, body, &captured, &off_reason));
  if (!off_reason.empty()) {
    DT_LOG_WARN(kRuntime, "CUDA graphs off for this run (rank {}): capturing step {} failed: {}; steps run eagerly",
                rank_, step + 1, off_reason);
  } else if (captured && rank_ == 0) {
    DT_LOG_INFO(kRuntime,
                "CUDA graph: step {} captured ({} nodes; graph {} for the loader's rotating input buffers, {:.1f} MiB "
                "held by all); later steps replay it",
                step + 1, step_graph_->num_nodes(), step_graph_->num_graphs(), step_graph_->held_bytes() / 1048576.0);
  }
  return phases_->EndStep();
}

Status Trainer::AllReduceHost(std::vector<double>* values, comm::ReduceOp op) {
  if (host_comm_ == nullptr || world_ == 1) return Status::OK();
  Tensor t = Tensor::Wrap(values->data(), {static_cast<int64_t>(values->size())}, DType::kF64, DeviceType::kCPU);
  return host_comm_->AllReduce(&t, op, nullptr);
}

Status Trainer::LogProgress(int64_t epoch, int64_t step, double interval_start, int64_t interval_steps, double data_s,
                            double* mean_loss) {
  comm::WatchdogScope armed(watchdog_, "step " + std::to_string(step) + " progress (device sync, loss all-reduce)");
  float acc = 0;
  Tensor host = Tensor::Wrap(&acc, {1, 1}, DType::kF32, DeviceType::kCPU);
  DT_RETURN_IF_ERROR(host.CopyFrom(loss_acc_, ctx_.stream()));
  // The last step's global gradient norm, copied behind that step's update (the same value on every rank); NaN when
  // the updater does not compute one (ZeRO-1 without clipping).
  float grad_norm = std::numeric_limits<float>::quiet_NaN();
  if (const Tensor* norm = updater_->grad_norm()) {
    Tensor norm_host = Tensor::Wrap(&grad_norm, {1}, DType::kF32, DeviceType::kCPU);
    DT_RETURN_IF_ERROR(norm_host.CopyFrom(*norm, ctx_.stream()));
  }
  DT_RETURN_IF_ERROR(ctx_.Synchronize());  // one sync for both copies
  // Measured after the sync: the host queues steps ahead of the device, so only now is the interval's work done.
  const double interval_s = MonotonicSeconds() - interval_start;
  DT_RETURN_IF_ERROR(loss_acc_.SetZero(ctx_.stream()));
  // Loss and data wait are averaged over the ranks (one slow loader stalls every rank's collectives), and so is
  // what the GPUs said (v[2..5]: summed over the ranks whose telemetry read anything).
  const GpuWindow gpu = reporter_->TakeGpuWindow(interval_s);
  const double read = gpu.samples > 0 ? 1.0 : 0.0;
  std::vector<double> v = {acc / static_cast<double>(interval_steps),
                           data_s,
                           read * gpu.util_pct,
                           read * gpu.mem_used_mib,
                           read * gpu.power_w,
                           read};
  DT_RETURN_IF_ERROR(AllReduceHost(&v));
  // Every rank's GPU telemetry for the node endpoints (each shows its node's GPUs): one gather as a sum all-reduce.
  std::vector<double> gpu_slots = reporter_->GpuSlots(gpu);
  if (!gpu_slots.empty()) DT_RETURN_IF_ERROR(AllReduceHost(&gpu_slots));
  *mean_loss = v[0] / world_;
  if (!std::isfinite(*mean_loss)) {
    return Status::FailedPrecondition("training diverged: loss is " + std::to_string(*mean_loss) + " at step " +
                                      std::to_string(step) + " (lower optim.lr or set optim.grad_clip)");
  }
  std::vector<double> phase_ms;
  int64_t timed_steps = 0;
  DT_RETURN_IF_ERROR(phases_->Take(&phase_ms, &timed_steps));
  double comm_ms = 0;  // exposed (non-overlapped) gradient communication per step
  DT_RETURN_IF_ERROR(updater_->TakeExposedCommMs(&comm_ms));
  const double ckpt_s = checkpoints_ ? checkpoints_->TakeStallSeconds() : 0.0;
  // Peak device memory of the interval's steps (the caching allocator's high-water mark; 0 on the CPU).
  double peak_mib = 0;
  if (CudaCachingAllocator* a = ctx_.device_allocator()) {
    peak_mib = a->stats().peak_bytes_in_use / 1048576.0;
    a->ResetPeak();
  }
  if (!reporter_->wants_intervals()) return Status::OK();  // rank 0's line, and a node's endpoint
  IntervalRecord r;
  r.epoch = epoch + 1;
  r.step = step;
  r.loss = *mean_loss;
  r.lr = last_lr_;
  r.gpu_slots = std::move(gpu_slots);
  StepPhases& p = r.phases;
  const double per_step = 1.0 / static_cast<double>(std::max<int64_t>(timed_steps, 1));
  p.step_ms = 1e3 * interval_s / interval_steps;
  // Data wait: on the GPU the device time the compute stream stalled for input (its wait on the
  // loader's copy event, and any gap while the host was blocked in the loader); on the CPU the time
  // blocked in the loader. Averaged over the ranks (v[1]: host seconds blocked, summed).
  p.data_ms = ctx_.is_cuda() ? phase_ms[kPhaseData] * per_step : 1e3 * v[1] / world_ / interval_steps;
  p.comm_exposed_ms = updater_->exchanges() ? comm_ms : phase_ms[kPhaseComm] * per_step;
  // On the CPU the blocking all-reduces run inside backward: reported as communication only.
  p.fwd_bwd_ms = std::max(0.0, phase_ms[kPhaseCompute] * per_step - (ctx_.is_cuda() ? 0.0 : p.comm_exposed_ms));
  p.optim_ms = phase_ms[kPhaseOptim] * per_step;
  p.ckpt_stall_ms = 1e3 * ckpt_s / interval_steps;
  const int64_t global_batch = cfg_.data().batch_size() * cfg_.train().grad_accum_steps() * world_;
  r.samples_per_s = interval_steps * global_batch / interval_s;
  const int64_t tokens_per_sample = TokensPerSample(cfg_);
  r.tokens_per_sample = tokens_per_sample;
  r.peak_mem_mib = peak_mib;
  if (v[5] > 0) {
    r.gpu_ranks = static_cast<int>(v[5]);
    r.gpu_util_pct = v[2] / v[5];
    r.gpu_mem_used_mib = v[3] / v[5];
    r.gpu_power_w = v[4] / v[5];
  }
  r.gpu = gpu;
  r.grad_norm = grad_norm;
  return reporter_->ReportInterval(r);
}

Status Trainer::Run(TrainSummary* summary) {
  if (AlreadyDone()) {
    // A finished run started again: nothing to train, nothing to re-evaluate or re-export, no new attempt on record.
    *summary = TrainSummary();
    summary->steps = start_step_;
    summary->already_done = true;
    summary->eval_loss = summary->eval_accuracy = std::numeric_limits<double>::quiet_NaN();
    if (rank_ == 0) {
      DT_LOG_INFO(kRuntime,
                  "{}: already done at step {} of {} (its checkpoint is the last one): nothing to train. To train "
                  "longer raise train.epochs or train.max_steps; to start over use --resume never --overwrite, or "
                  "another run.dir",
                  cfg_.run().dir(), start_step_, total_steps_);
    }
    return Status::OK();
  }
  if (rank_ == 0) {
    DT_RETURN_IF_ERROR(reporter_->Write(
        JsonLine()
            .Add("kind", std::string("start"))
            .Add("time", WallSeconds())
            .Add("restart", static_cast<int64_t>(env_.restart_count))
            .Add("resume_step", start_step_)
            .Add("world", static_cast<int64_t>(world_))
            .Add("device", std::string(ctx_.is_cuda() ? "cuda" : "cpu"))
            .Add("total_steps", total_steps_)
            .Add("global_batch", cfg_.data().batch_size() * cfg_.train().grad_accum_steps() * world_)));
  }
  Status st = RunLoop(summary);
  if (rank_ == 0) {
    const char* how = st.ok() ? "done" : st.code() == Status::Code::kPreempted ? "preempted" : "failed";
    Status w = reporter_->Write(JsonLine()
                                    .Add("kind", std::string("end"))
                                    .Add("time", WallSeconds())
                                    .Add("step", last_step_)
                                    .Add("status", std::string(how)));
    if (st.ok()) st = w;
    reporter_->LogRunSummary();
  }
  if (trace_) {
    Status t = trace_->Close();
    if (st.ok()) st = t;
  }
  return st;
}

Status Trainer::RunLoop(TrainSummary* summary) {
  const int64_t accum = cfg_.train().grad_accum_steps();
  const int64_t log_every = cfg_.train().log_every();
  const int64_t global_batch = cfg_.data().batch_size() * accum * world_;
  *summary = TrainSummary();
  summary->eval_loss = summary->eval_accuracy = std::numeric_limits<double>::quiet_NaN();
  int64_t step = start_step_, last_eval_step = -1;
  int64_t epoch = data_->Position().epoch;
  double train_seconds = 0, t_interval = MonotonicSeconds(), data_s = 0;
  int64_t interval_steps = 0;
  // Evaluation every eval_every steps (at multiples of it, so a resumed run keeps the schedule), else at epoch ends;
  // and at the end of training. Each one follows a progress line of its step (interval_steps is 0 then): its time
  // is kept out of the next interval and of the training time.
  const bool eval_on = cfg_.train().eval() && data_->has_eval();
  const int64_t eval_every = eval_on ? cfg_.train().eval_every() : 0;
  auto evaluate = [&](int64_t ep) -> Status {
    if (!eval_on) return Status::OK();
    const double t0 = MonotonicSeconds();
    DT_RETURN_IF_ERROR(Evaluate(&summary->eval_loss, &summary->eval_accuracy));
    last_eval_step = step;
    if (interval_steps == 0) t_interval = MonotonicSeconds();
    return reporter_->ReportEval(
        {ep + 1, step, summary->eval_loss, summary->eval_accuracy, MonotonicSeconds() - t0, TokensPerSample(cfg_) > 0});
  };
  reporter_->StartLoop();
  ctx_.ResetMemoryPeak();  // the first step's peak, not the setup's transients (init staging, a restore)
  while (step < total_steps_) {
    data::SamplerState pos = data_->Position();
    if (pos.epoch == epoch && !data_->StepFits(pos)) {
      // The rest of the epoch cannot fill a step (kDrop with grad_accum_steps > 1): skip to the next.
      pos = {pos.seed, epoch + 1, 0};
      DT_RETURN_IF_ERROR(data_->Restore(pos));
    }
    if (pos.epoch != epoch) {  // the previous epoch is complete
      if (eval_every == 0) DT_RETURN_IF_ERROR(evaluate(epoch));
      epoch = pos.epoch;
      if (epoch >= cfg_.train().epochs()) break;
    }
    DT_RETURN_IF_ERROR(fault_.AtStep(rank_, step));
    DT_RETURN_IF_ERROR(TrainStep(step, &data_s));
    last_step_ = ++step;
    samples_seen_ += global_batch;
    ++interval_steps;
    if (step == start_step_ + 1) {
      // This attempt's first completed step (one device sync, once): where `dtrain report`'s time to recover ends.
      DT_RETURN_IF_ERROR(ctx_.Synchronize());
      if (rank_ == 0 && memory_plan_bytes_ > 0) {  // the plan against what the step took (memory_fit.h)
        const int64_t peak = ctx_.memory_stats().peak_bytes_in_use;
        DT_LOG_INFO(kRuntime,
                    "memory plan {}; measured peak {} (the {} allocator's, first step; the plan's {} through it is "
                    "{:+.1f}%)",
                    models::FormatBytes(memory_plan_bytes_), models::FormatBytes(peak),
                    ctx_.is_cuda() ? "caching" : "host", models::FormatBytes(memory_plan_allocator_bytes_),
                    100.0 * static_cast<double>(memory_plan_allocator_bytes_ - peak) /
                        static_cast<double>(std::max<int64_t>(peak, 1)));
      }
      if (rank_ == 0) {
        DT_RETURN_IF_ERROR(reporter_->Write(
            JsonLine().Add("kind", std::string("first_step")).Add("step", step).Add("time", WallSeconds())));
      }
    }
    reporter_->Tick(step);
    const data::SamplerState next = data_->Position();
    const bool epoch_end = next.epoch != epoch || !data_->StepFits(next);
    const bool eval_due = eval_every > 0 && step % eval_every == 0;
    if (step % log_every == 0 || step == total_steps_ || epoch_end || eval_due) {
      // LogProgress synchronizes, then takes the interval's wall time: it covers all of its device work.
      DT_RETURN_IF_ERROR(LogProgress(epoch, step, t_interval, interval_steps, data_s, &summary->last_train_loss));
      train_seconds += MonotonicSeconds() - t_interval;
      t_interval = MonotonicSeconds();
      data_s = 0;
      interval_steps = 0;
    }
    // Before the save: a checkpoint of this step was taken after its evaluation, so a resume does not repeat it.
    if (eval_due) DT_RETURN_IF_ERROR(evaluate(epoch));
    // Saves, the store's heartbeat, the preemption agreement (Status::Preempted once saved).
    if (checkpoints_) DT_RETURN_IF_ERROR(checkpoints_->AfterStep({step, total_steps_, next, samples_seen_}));
  }
  reporter_->ClearBar();
  if (last_eval_step != step) DT_RETURN_IF_ERROR(evaluate(std::min(epoch, cfg_.train().epochs() - 1)));
  if (checkpoints_) DT_RETURN_IF_ERROR(checkpoints_->Finish());  // the last asynchronous save is durable
  summary->steps = step;
  summary->samples = samples_seen_;
  summary->seconds = train_seconds;
  // This attempt's throughput (a resumed run's earlier steps took no time here).
  summary->samples_per_s =
      train_seconds > 0 ? static_cast<double>((step - start_step_) * global_batch) / train_seconds : 0;
  if (rank_ == 0 && cfg_.run().final_weights())
    DT_RETURN_IF_ERROR(ExportParams(cfg_.run().dir() + "/final.safetensors"));
  return Status::OK();
}

Status Trainer::ExportParams(const std::string& path) {
  // Streamed tensor by tensor (one tensor in host memory at a time: a 15B model's weights are 60 GB as f32). bf16
  // masters (train.master_weights) are written as F32, widened exactly (runtime/checkpoint/dtype_convert.h): copied
  // into the first half of the tensor's f32 buffer and widened in place; split masters joined with their low halves.
  const std::vector<models::ParamInfo>& infos = model_->param_infos();
  std::vector<NamedTensor> tensors;
  for (const models::ParamInfo& p : infos) tensors.push_back({p.name, p.shape, {}});
  const DType dtype = model_->params().dtype();
  Tensor* low = nullptr;
  DT_RETURN_IF_ERROR(updater_->MasterLow(&low));
  auto fill = [&](size_t t, float* dst) -> Status {
    if (low != nullptr) return ReadMasters(ctx_, model_->params(), *low, infos[t].offset, infos[t].numel, dst);
    Tensor src;
    DT_RETURN_IF_ERROR(model_->params().View(infos[t].offset, {infos[t].numel}, &src));
    Tensor host = Tensor::Wrap(dst, {infos[t].numel}, dtype, DeviceType::kCPU);
    DT_RETURN_IF_ERROR(host.CopyFrom(src, ctx_.stream()));
    DT_RETURN_IF_ERROR(ctx_.Synchronize());
    if (dtype == DType::kBF16) WidenBf16InPlace(dst, infos[t].numel);
    return Status::OK();
  };
  std::map<std::string, std::string> metadata;  // model kind and config, input layout and normalization
  DT_RETURN_IF_ERROR(WeightsMetadata(cfg_, &metadata));
  metadata["step"] = std::to_string(last_step_);
  return WriteSafetensors(path, tensors, fill, metadata);
}

Status Trainer::ImportParams(const std::string& path) {
  std::vector<NamedTensor> tensors;
  std::string hf_dir;  // hf:DIR (or a directory with config.json): HF's names and layout, through the model's spec
  DT_RETURN_IF_ERROR(HfInitDir(path, &hf_dir) ? ImportHuggingFace(cfg_, hf_dir, &tensors)
                                              : ReadSafetensors(path, &tensors));
  std::map<std::string, const NamedTensor*> by_name;
  for (const NamedTensor& t : tensors) by_name[t.name] = &t;
  std::vector<float> flat(model_->params().numel());
  for (const models::ParamInfo& p : model_->param_infos()) {
    auto it = by_name.find(p.name);
    if (it == by_name.end()) {
      return Status::InvalidArgument("model.init_from " + path + ": no tensor '" + p.name + "' (the model's " +
                                     std::to_string(model_->param_infos().size()) + " parameters must all be there)");
    }
    if (it->second->shape != p.shape) {
      return Status::InvalidArgument("model.init_from " + path + ": tensor '" + p.name + "' has shape " +
                                     ShapeString(it->second->shape) + ", the model expects " + ShapeString(p.shape));
    }
    std::copy(it->second->data.begin(), it->second->data.end(), flat.begin() + p.offset);
    by_name.erase(it);
  }
  if (!by_name.empty()) {
    return Status::InvalidArgument("model.init_from " + path + ": tensor '" + by_name.begin()->first +
                                   "' is not a parameter of this model (" + std::to_string(by_name.size()) +
                                   " unknown in all)");
  }
  Tensor host = Tensor::Wrap(flat.data(), {model_->params().numel()}, DType::kF32, DeviceType::kCPU);
  Tensor* low = nullptr;
  DT_RETURN_IF_ERROR(updater_->MasterLow(&low));
  if (low != nullptr) {
    DT_RETURN_IF_ERROR(CopyF32IntoMasters(ctx_, host, &model_->params(), low));  // split masters: exact
  } else {
    DT_RETURN_IF_ERROR(CopyF32Into(ctx_, host, &model_->params()));  // bf16 masters: rounded to nearest even
  }
  DT_RETURN_IF_ERROR(ctx_.Synchronize());
  if (rank_ == 0) DT_LOG_INFO(kRuntime, "parameters initialised from {} ({} tensors)", path, tensors.size());
  return Status::OK();
}

}  // namespace dtrain::runtime
