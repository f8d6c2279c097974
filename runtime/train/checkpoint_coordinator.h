#pragma once
// CheckpointCoordinator: everything a training run does with checkpoints, for the Trainer (runtime/train/trainer.h).
//
//   Open()      (every rank, in the trainer's setup, before config.yaml, metrics.jsonl or any other run.dir file is
//               written: the storage probe's object is written and deleted, the owner's lock taken) opens the store
//               (checkpoint.url, default <run.dir>/checkpoints), runs the storage preflight, takes the store's owner
//               object where the scheme needs one (runtime/checkpoint/store_owner.h), installs the preemption
//               handlers, decides what to resume from (PlanResume, runtime/checkpoint/resume_plan.h: refusals are
//               InvalidArgument, exit 2) and restores that checkpoint into the trainer's parts: parameters, optimizer
//               state, model buffers, data position. The ranks check that they found the same checkpoint.
//   Start()     once the run's reporter exists: writes the "restore" record of metrics.jsonl.
//   AfterStep() after every optimizer step (host work only, no device sync unless a save is due): the store
//               owner's heartbeat, the preemption agreement (one MAX all-reduce of two host scalars: a signal on any
//               rank, or run.gpu_idle_exit) with its synchronous save and Status::Preempted (exit 75), and the
//               periodic (checkpoint.every_steps) and final (checkpoint.at_end) saves.
//   Finish()    after the loop: the last asynchronous save is durable (or its error).
//
// Saves: every rank takes part (ZeRO-1 gathers the full optimizer state); rank 0 snapshots the parameters, optimizer
// state and buffers into pinned host memory (D2H on the compute stream + an event; the buffers come from a
// SnapshotPool allocated in the background from Open on) and a CheckpointWriter thread writes them while training
// continues. At most one save is in flight. The trainer's stall (waiting for the previous save + the snapshot) is
// logged, written to metrics.jsonl and handed to the progress line (TakeStallSeconds).
//
// Ownership: owns the CheckpointManager, the writer, the store owner and the snapshot buffers; borrows the parts in
// CheckpointParts and the reporter, which must outlive it. Not thread-safe: the trainer's thread only (the writer
// runs its own thread internally).

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "comm/communicator.h"
#include "comm/dist_env.h"
#include "comm/watchdog.h"
#include "core/device_context.h"
#include "data/sampler.h"
#include "models/model.h"
#include "proto/config.pb.h"
#include "runtime/checkpoint/checkpoint.h"
#include "runtime/checkpoint/checkpoint_writer.h"
#include "runtime/checkpoint/fault_injection.h"
#include "runtime/checkpoint/snapshot_pool.h"
#include "runtime/checkpoint/store_owner.h"
#include "runtime/observe/metrics.h"
#include "runtime/optim/lr_schedule.h"
#include "runtime/optim/parameter_updater.h"
#include "runtime/train/data_source.h"
#include "runtime/train/restore_sink.h"
#include "runtime/train/run_reporter.h"
#include "storage/scheme.h"

namespace dtrain {
class CudaEvent;
}  // namespace dtrain

namespace dtrain::runtime {

// The trainer's parts that a checkpoint saves and restores, borrowed for the coordinator's life.
struct CheckpointParts {
  const proto::Config* cfg = nullptr;
  DeviceContext* ctx = nullptr;
  const comm::DistEnv* env = nullptr;       // rank, world, restart counts (the resume log line)
  comm::Communicator* host_comm = nullptr;  // host scalars over the ranks; null for one process
  models::Model* model = nullptr;
  ParameterUpdater* updater = nullptr;
  DataSource* data = nullptr;
  const LrSchedule* schedule = nullptr;
  const FaultInjector* fault = nullptr;    // DTRAIN_FAULT's checkpoint phases
  std::function<double(int64_t)> step_lr;  // the LR of the step that runs after `step` steps (the manifest's next_lr)
};

// Where the run continues, from Open().
struct ResumePoint {
  bool resumed = false;      // a checkpoint was restored
  int64_t step = 0;          // optimizer steps done
  int64_t samples_seen = 0;  // global training samples of those steps
  // No checkpoint was restored, but a load that failed verification had written into the parameters or the
  // optimizer state: the trainer initialises them again.
  bool reinit_state = false;
  std::string config_yaml;  // the restored checkpoint's config (ConfigToYaml of the run that saved it); "" if none
};

// The state after an optimizer step, as AfterStep sees it.
struct StepPoint {
  int64_t step = 0;          // optimizer steps done
  int64_t total_steps = 0;   // this attempt ends after this step
  data::SamplerState next;   // the data position of the next step (what a resume continues from)
  int64_t samples_seen = 0;  // global training samples so far
};

// Logs `note`, a lock of the run (run.dir's, or the checkpoint store's owner) taken over from a holder that ended
// without releasing it: at info level after a restart by `dtrain launch` or a Slurm requeue (the holder was this
// job's own attempt before, whose rank 0 was killed: planned), else as a warning. Nothing when `note` is "".
void LogLockTakeover(const comm::DistEnv& env, const std::string& note);

class CheckpointCoordinator {
 public:
  // *out is null (and *at a fresh start) when checkpoint.enabled is false. Errors: checkpoint.resume malformed or
  // refused (InvalidArgument), the storage preflight or the store's owner, a restore that does not fit the model.
  static Status Open(const CheckpointParts& parts, std::unique_ptr<CheckpointCoordinator>* out, ResumePoint* at);
  ~CheckpointCoordinator();
  CheckpointCoordinator(const CheckpointCoordinator&) = delete;
  CheckpointCoordinator& operator=(const CheckpointCoordinator&) = delete;

  // Once, before the first step: the reporter (saves report to it; run.gpu_idle_exit asks through it) and the
  // "restore" record of a resumed run.
  Status Start(RunReporter* reporter);
  // Optional: arms `wd` around the preemption agreement. Borrowed.
  void set_watchdog(comm::Watchdog* wd) { watchdog_ = wd; }

  // After every optimizer step, on every rank. Returns Status::Preempted once every rank has agreed to stop and rank
  // 0's checkpoint of p.step is durable.
  Status AfterStep(const StepPoint& p);
  // After the loop: waits for the save in flight.
  Status Finish();

  // Seconds the training thread stalled for saves since the last call (the progress line's ckpt_stall).
  double TakeStallSeconds() {
    const double s = stall_s_;
    stall_s_ = 0;
    return s;
  }
  const std::string& url() const { return ckpt_->url(); }

 private:
  explicit CheckpointCoordinator(const CheckpointParts& parts);
  Status OpenStore();              // the manager, the preflight, the store's owner
  Status Resume(ResumePoint* at);  // PlanResume, then Restore
  Status Restore(const LoadedCheckpoint& ck, RestoreSink& sink, ResumePoint* at);
  // Saves the state of `p` (rank 0 writes; other ranks return after their part of SaveState). `sync` waits until
  // the checkpoint is durable.
  Status Save(const StepPoint& p, bool sync);
  proto::CheckpointManifest BuildManifest(const StepPoint& p) const;
  void StartSnapshotPool();  // rank 0, after the restore
  // The files a save snapshots, in order, as f32 elements: params, each full optimizer state (numel of the params),
  // the model's buffers.
  SnapshotPool::Layout SnapshotLayout() const;
  // Fills snapshot_ for `layout`: from the pool (waiting for it: *alloc_wait_s), else allocated now.
  Status TakeSnapshotBuffers(const SnapshotPool::Layout& layout, double* alloc_wait_s);
  // Why every rank stops after `step` ("" = it does not).
  Status AgreePreempted(int64_t step, std::string* why);
  Status AllReduceHost(std::vector<double>* values, comm::ReduceOp op);

  const CheckpointParts parts_;
  const int rank_, world_;
  RunReporter* reporter_ = nullptr;
  comm::Watchdog* watchdog_ = nullptr;
  std::unique_ptr<CheckpointManager> ckpt_;
  storage::TransferPlan transfer_;           // how the store is read (the restore's chunks and threads)
  std::unique_ptr<StoreOwner> store_owner_;  // rank 0, stores whose scheme needs an owner (borrows ckpt_'s store)
  std::vector<std::pair<std::string, Tensor>> snapshot_;  // rank 0: pinned host copies, file name -> data
  std::unique_ptr<SnapshotPool> snapshot_pool_;           // rank 0: allocates snapshot_ in the background
  bool snapshot_checked_ = false;                         // snapshot_ checked against the first save's layout
#if DT_HAVE_CUDA
  std::unique_ptr<CudaEvent> snapshot_done_;
#endif
  double stall_s_ = 0;                        // since the last TakeStallSeconds
  std::unique_ptr<JsonLine> restore_record_;  // the "restore" record, written by Start (null: nothing restored)
  std::unique_ptr<CheckpointWriter> writer_;  // last: destroyed (joined) before the snapshot it reads
};

}  // namespace dtrain::runtime
