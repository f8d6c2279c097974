#pragma once
// Trainer: the training loop of one worker (`dtrain train`).
//
// Input: a DataSource (runtime/train/data_source.h) — the data::Loader over a sharded dataset, or synthetic tokens for
// throughput runs; the trainer never asks which. Its position (seed, epoch, samples consumed globally) is the
// checkpointed data position. An epoch ends when the rest of it cannot fill a whole optimizer step.
//
// Per optimizer step: zero grads -> for each of grad_accum_steps micro-batches {take the loader's
// next batch (already on the device; the compute stream waits on its copy event), the model's
// InputsFromBatch, Forward, Backward (announcing gradients to the ParameterUpdater on the last
// micro-batch)} -> updater Finalize (compute stream waits for the collectives) -> updater Step with the
// scheduled LR (runtime/optim/parameter_updater.h: replicated or ZeRO-1, chosen once from the config). The host
// synchronizes with the device only at log points and evaluation. Time blocked on input is logged
// per step, and a warning names the cause when it exceeds 5% of the step.
//
// Rank 0 writes <run.dir>/config.yaml (once the start is decided) and at the end the trained parameters to
// <run.dir>/final.safetensors (unless run.final_weights is false). What the run reports (progress line, metrics.jsonl,
// TensorBoard, Prometheus, GPU alarms, the live bar) goes through its RunReporter (runtime/train/run_reporter.h): one
// IntervalRecord per log interval.
//
// Checkpoints (config `checkpoint`) go through a CheckpointCoordinator (runtime/train/checkpoint_coordinator.h):
// every rank restores the checkpoint PlanResume picks in Create() (resume "auto": the newest valid one) and continues
// at its step, optimizer state and data position (epoch, global samples consumed), so the sample sequence and the
// updates are those of an uninterrupted run, also at another world size with the same global batch. After every step
// the coordinator saves (every `every_steps` steps and at the end, in the background) and handles a preemption
// request (the ranks agree, save synchronously, Run() returns Status::Preempted: exit 75).
// Create() decides before it writes: a refused start (checkpoint.resume refused, every checkpoint corrupt) and a
// finished run started again write nothing to run.dir (no config.yaml, metrics.jsonl, TensorBoard or trace files; the
// lock file keeps its times). A finished run started with another config than it was trained with is refused
// (InvalidArgument naming the keys: runtime/train/finished_run.h).
// Distributed: `grad_comm` (NCCL on GPU, MPI on CPU) reduces gradients; `host_comm` (MPI) reduces
// the few host scalars (loss, accuracy). Both null for a single process. Not thread-safe.

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "comm/communicator.h"
#include "comm/dist_env.h"
#include "comm/watchdog.h"
#include "core/device_context.h"
#include "models/model.h"
#include "proto/config.pb.h"
#include "runtime/checkpoint/fault_injection.h"
#include "runtime/checkpoint/run_lock.h"
#include "runtime/observe/device_trace.h"
#include "runtime/observe/phase_timer.h"
#include "runtime/observe/trace.h"
#include "runtime/optim/lr_schedule.h"
#include "runtime/optim/parameter_updater.h"
#include "runtime/train/checkpoint_coordinator.h"
#include "runtime/train/data_source.h"
#include "runtime/train/run_reporter.h"
#include "runtime/train/step_graph.h"

namespace dtrain::runtime {

struct TrainSummary {
  int64_t steps = 0;
  int64_t samples = 0;  // training samples processed, all ranks
  double seconds = 0;   // training wall time, evaluation excluded
  double samples_per_s = 0;
  double last_train_loss = 0;  // mean over the last log interval
  double eval_loss = 0;        // of the last evaluation (NaN when eval is off)
  double eval_accuracy = 0;
  bool already_done = false;  // the run had finished before: nothing was trained
};

class Trainer {
 public:
  // `env` is the worker's identity (rank, world, restart and requeue counts), read from the environment once by
  // comm::DetectDistEnv; the trainer reads no environment variable of its own for it.
  static Status Create(const proto::Config& cfg, DeviceContext& ctx, comm::Communicator* grad_comm,
                       comm::Communicator* host_comm, const comm::DistEnv& env, std::unique_ptr<Trainer>* out);
  ~Trainer();
  // Optional: arms `wd` around every section that may block on peers (each step, each progress sync,
  // each evaluation), so a hung collective is reported instead of waited on. Borrowed; outlives the trainer.
  void set_watchdog(comm::Watchdog* wd) {
    watchdog_ = wd;
    if (checkpoints_) checkpoints_->set_watchdog(wd);
  }
  Status Run(TrainSummary* summary);

 private:
  Trainer(const proto::Config& cfg, DeviceContext& ctx);
  Status Setup();
  Status RunLoop(TrainSummary* summary);  // Run() without the start/end metrics records
  // The run had finished before this start (resumed at or past its end step): nothing to train or write.
  bool AlreadyDone() const { return start_step_ > 0 && start_step_ >= total_steps_; }
  Status TrainStep(int64_t step, double* data_seconds);
  // TrainStep through the step's CUDA graphs (step_graph_): take the micro-batches, replay (or capture).
  Status GraphedStep(int64_t step, double* data_seconds);
  // One evaluation: the first train.eval_batches global batches of the test split (0 = all of it) on every rank,
  // the sums all-reduced; loss and accuracy are means over the scored rows (tokens for token models). The training
  // loader, the parameters and the RNG are untouched; the step graph is re-captured afterwards.
  Status Evaluate(double* loss, double* accuracy);

  // Length of the run (runtime/train/trainer_data.cc).
  // The LR schedule's length in schedule steps: train.epochs x the steps of an epoch (of schedule.samples_per_step
  // samples when set), capped at train.max_steps.
  int64_t ScheduleSteps() const;
  // The step this attempt ends after, from the restored position at this world size's global batch: the end of the
  // last epoch, or where train.max_steps is reached (optimizer steps; with schedule.samples_per_step, samples seen).
  int64_t EndStep() const;
  // The LR of the step about to run (the schedule at `step`, or at samples seen / schedule.samples_per_step).
  double StepLr(int64_t step) const;
  // Sets every parameter from model.init_from: a safetensors file of dtrain's names, or hf:DIR (hf_import.h); all
  // names present, shapes equal, no extras.
  Status ImportParams(const std::string& path);
  // Writes the parameters as <name>: tensor to a safetensors file (loadable by PyTorch).
  Status ExportParams(const std::string& path);
  // Waits for the device, then measures the interval that began at `interval_start` (MonotonicSeconds()) with
  // `interval_steps` steps (its wall time covers all of their device work), reduces it over the ranks and hands it to
  // the reporter.
  Status LogProgress(int64_t epoch, int64_t step, double interval_start, int64_t interval_steps, double data_s,
                     double* mean_loss);
  // Sums `values` across ranks (no-op for one process).
  Status AllReduceHost(std::vector<double>* values, comm::ReduceOp op = comm::ReduceOp::kSum);

  proto::Config cfg_;
  DeviceContext& ctx_;
  comm::Communicator* grad_comm_ = nullptr;
  comm::Communicator* host_comm_ = nullptr;
  comm::Watchdog* watchdog_ = nullptr;
  int rank_ = 0, world_ = 1;
  comm::DistEnv env_;  // rank_ and world_ come from it; its restart/requeue counts go to metrics and logs

  std::unique_ptr<DataSource> data_;  // training and evaluation batches: the loader's or synthetic
  std::unique_ptr<models::Model> model_;
  // Gradients in, new parameters out: the exchange, the optimizer and its state, loss scaling (fp16).
  std::unique_ptr<ParameterUpdater> updater_;
  std::unique_ptr<LrSchedule> schedule_;
  // Progress line, metrics.jsonl, TensorBoard, Prometheus, GPU telemetry and alarms, the live bar.
  std::unique_ptr<RunReporter> reporter_;
  std::unique_ptr<TraceWriter> trace_;         // every rank with run.trace_steps > 0
  TraceWriter* trace_now_ = nullptr;           // trace_ while the current step is in the trace window
  std::unique_ptr<DeviceTrace> device_trace_;  // stream spans (compute, per-bucket collectives) into trace_
  FaultInjector fault_;
  int64_t total_steps_ = 0;  // this attempt ends after this step (EndStep())
  std::unique_ptr<PhaseTimer> phases_;
  std::unique_ptr<StepGraph> step_graph_;  // null when steps cannot be graphed (StepGraph::Blocker)

  int64_t memory_plan_bytes_ = 0;            // the run's memory plan per rank (memory_fit.h); 0 when the model has none
  int64_t memory_plan_allocator_bytes_ = 0;  // of it, what goes through the allocator (its peak's counterpart)
  Tensor loss_acc_;  // [1,1] += mean loss of each micro-batch / accum (Model::AddMeanLoss, on the device)

  // Where Run() starts (after a resume): optimizer steps done; the loaders are restored already.
  int64_t start_step_ = 0;
  int64_t last_step_ = 0;     // optimizer steps done so far
  int64_t samples_seen_ = 0;  // global training samples of those steps (the batch may have changed at a resume)
  double last_lr_ = 0;        // the LR of the last step (StepLr)
  std::unique_ptr<RunLock> run_lock_;  // rank 0: run.dir is this job's
  // Resume, saves, preemption; null when checkpointing is off. Last: it borrows the parts above and its writer
  // thread is joined first.
  std::unique_ptr<CheckpointCoordinator> checkpoints_;
};

}  // namespace dtrain::runtime
