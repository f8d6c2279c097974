#pragma once
// Trainer: the training loop of one worker (`dtrain train`).
//
// Per optimizer step: zero grads -> for each of grad_accum_steps micro-batches {gather a batch into
// pinned host memory, copy it to the device on the compute stream, Forward, Backward (announcing
// gradients to the GradientReducer on the last micro-batch)} -> reducer Finalize (compute stream
// waits for the collectives) -> optimizer Step with the scheduled LR. The host synchronizes with
// the device only at log points and evaluation.
//
// Rank 0 prints the progress line, writes <run.dir>/metrics.jsonl and <run.dir>/config.yaml, and at
// the end the trained parameters to <run.dir>/final.safetensors.
//
// Checkpoints (runtime/checkpoint.h, config `checkpoint`): every rank restores the newest valid
// checkpoint in Create() (resume "auto") and continues at its step, optimizer state and data position
// (epoch, global samples consumed), so the sample sequence and the updates are those of an
// uninterrupted run, also at another world size with the same global batch. Every `every_steps` steps
// and at the end, rank 0 snapshots params and optimizer state into pinned host memory (D2H on the
// compute stream + an event) and a CheckpointWriter thread writes them while training continues; the
// trainer's stall (waiting for the previous save + the snapshot) is logged and written to metrics.
// Preemption (runtime/preemption.h): the ranks agree on the signal flag after every step, save
// synchronously and Run() returns Status::Preempted (exit 75).
// Distributed: `grad_comm` (NCCL on GPU, MPI on CPU) reduces gradients; `host_comm` (MPI) reduces
// the few host scalars (loss, accuracy). Both null for a single process. Not thread-safe.

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "comm/communicator.h"
#include "comm/watchdog.h"
#include "data/batch_sampler.h"
#include "data/fashion_mnist.h"
#include "models/model.h"
#include "proto/config.pb.h"
#include "runtime/checkpoint.h"
#include "runtime/checkpoint_writer.h"
#include "runtime/core/device_context.h"
#include "runtime/fault_injection.h"
#include "runtime/gradient_reducer.h"
#include "runtime/lr_schedule.h"
#include "runtime/metrics.h"
#include "runtime/optimizer.h"

namespace dtrain {
class CudaEvent;
}  // namespace dtrain

namespace dtrain::runtime {

struct TrainSummary {
  int64_t steps = 0;
  int64_t samples = 0;  // training samples processed, all ranks
  double seconds = 0;   // training wall time, evaluation excluded
  double samples_per_s = 0;
  double last_train_loss = 0;  // mean over the last log interval
  double eval_loss = 0;        // after the last epoch (NaN when eval is off)
  double eval_accuracy = 0;
};

class Trainer {
 public:
  static Status Create(const proto::Config& cfg, DeviceContext& ctx, comm::Communicator* grad_comm,
                       comm::Communicator* host_comm, int rank, int world, std::unique_ptr<Trainer>* out);
  ~Trainer();
  // Optional: arms `wd` around every section that may block on peers (each step, each progress sync,
  // each evaluation), so a hung collective is reported instead of waited on. Borrowed; outlives the trainer.
  void set_watchdog(comm::Watchdog* wd) { watchdog_ = wd; }
  Status Run(TrainSummary* summary);

 private:
  Trainer(const proto::Config& cfg, DeviceContext& ctx);  // out of line: CudaEvent is incomplete here
  Status Setup();
  Status TrainStep(int64_t step, int64_t* batch_cursor, double* data_seconds);
  Status LoadBatch(const data::Split& split, const std::vector<int64_t>& idx, int slot, Tensor* x, Tensor* y);
  Status Evaluate(double* loss, double* accuracy);
  // Writes the parameters as <name>: tensor to a safetensors file (loadable by PyTorch).
  Status ExportParams(const std::string& path);
  Status LogProgress(int64_t epoch, int64_t step, double interval_s, int64_t interval_steps, double data_s,
                     double* mean_loss);
  // Sums `values` across ranks (no-op for one process).
  Status AllReduceHost(std::vector<double>* values, comm::ReduceOp op = comm::ReduceOp::kSum);

  // Checkpointing (runtime/checkpoint_trainer.cc).
  Status SetupCheckpoint();
  Status Restore(const LoadedCheckpoint& ck);
  // Saves the state after `step` steps, the data position being (epoch, cursor). Rank 0 writes; other
  // ranks return at once. `sync` waits until the checkpoint is durable.
  Status SaveCheckpoint(int64_t step, int64_t epoch, int64_t cursor, bool sync);
  // True on every rank when any rank received a preemption signal (a MAX all-reduce after `step`).
  Status AgreePreempted(int64_t step, bool* preempted);
  proto::CheckpointManifest BuildManifest(int64_t step, int64_t epoch, int64_t cursor) const;

  proto::Config cfg_;
  DeviceContext& ctx_;
  comm::Communicator* grad_comm_ = nullptr;
  comm::Communicator* host_comm_ = nullptr;
  comm::Watchdog* watchdog_ = nullptr;
  int rank_ = 0, world_ = 1;

  data::Split train_, test_;
  std::unique_ptr<data::BatchSampler> sampler_;
  std::unique_ptr<models::Model> model_;
  std::unique_ptr<Optimizer> optimizer_;
  std::unique_ptr<LrSchedule> schedule_;
  std::unique_ptr<GradientReducer> reducer_;
  MetricsWriter metrics_;
  FaultInjector fault_;
  int64_t total_steps_ = 0;

  // Two pinned staging slots per input, so the host fills one while the device copies the other.
  Tensor pinned_x_[2], pinned_y_[2];
  Tensor dev_x_, dev_y_;
  Tensor ones_, loss_acc_;  // loss_acc_ [1,1] += mean loss of each micro-batch (on the device)
#if DT_HAVE_CUDA
  std::unique_ptr<CudaEvent> copy_done_[2];
#endif
  int slot_ = 0;

  // Where Run() starts (after a resume): optimizer steps done, epoch, batch cursor within it.
  int64_t start_step_ = 0, start_epoch_ = 0, start_cursor_ = 0;
  std::unique_ptr<CheckpointManager> ckpt_;               // null when checkpointing is off
  std::vector<std::pair<std::string, Tensor>> snapshot_;  // rank 0: pinned host copies, file name -> data
#if DT_HAVE_CUDA
  std::unique_ptr<CudaEvent> snapshot_done_;
#endif
  std::unique_ptr<CheckpointWriter> writer_;  // last: destroyed (joined) before the snapshot it reads
};

}  // namespace dtrain::runtime
