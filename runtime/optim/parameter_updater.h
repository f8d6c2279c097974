#pragma once
// ParameterUpdater: the one seam between backward and new parameters — gradients in, new parameters out.
// The trainer holds one and never asks which strategy it is; MakeParameterUpdater picks it from the config:
//   replicated (runtime/optim/replicated_updater.h): GradientReducer all-reduce (none for one process) + Optimizer
//     on the full buffer, the optimizer state replicated on every rank;
//   sharded (runtime/optim/sharded_updater.h, dist.zero1 with world > 1): Zero1Optimizer — reduce-scatter, the
//     update over this rank's shard of the optimizer state, all-gather of the params.
// A new strategy is one more subclass here and one more branch in MakeParameterUpdater.
//
// Per optimizer step (contract):
//   1. LossScale(&s) once, before the first Backward of the step (fp16: waits for the previous step's scale
//      update — call it after the first Forward is queued so the wait overlaps it; 1 without loss scaling).
//   2. Backward(s / accum, on_ready) for each micro-batch; on the LAST one, on_ready = OnGradReady (earlier ones
//      pass no callback: their gradients only accumulate locally).
//   3. Finalize(): the step's gradient exchange is launched completely and the compute stream is ordered after
//      it (no host sync). Must run before Step.
//   4. Step(lr): the optimizer update with the scheduled LR (and the loss scaler: unscale, found-inf skip,
//      scale update). Afterwards the model's params() hold the new parameters on every rank, as far as any
//      work queued later on the compute stream can tell; grads() are unspecified until the next zeroing.
//
// Checkpoints hold the FULL optimizer state whatever the strategy, so any strategy restores any checkpoint
// at any world size: SaveState (a collective: every rank calls it) copies the full state into the writing rank's
// snapshot and fills the manifest's optimizer fields; RestoreState takes the saved files and keeps what this rank
// needs. A restore that streams the files straight into the state asks StateSlices where each file's elements go, and
// tells RestoreState which files are in place already.
//
// Ownership: borrows the DeviceContext, the model and the communicator given to the factory (all outlive the
// updater); owns the reducer/optimizer state, the comm stream and the loss scaler. Not thread-safe: call
// everything from the thread driving the compute stream.

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "comm/communicator.h"
#include "core/device_context.h"
#include "core/status.h"
#include "core/tensor.h"
#include "models/model.h"
#include "proto/checkpoint.pb.h"
#include "proto/config.pb.h"
#include "runtime/observe/device_trace.h"
#include "runtime/optim/loss_scaler.h"
#include "runtime/optim/optimizer.h"
#include "runtime/optim/state_slice.h"

namespace dtrain::runtime {

class ParameterUpdater {
 public:
  virtual ~ParameterUpdater();

  // --- The step (see the contract) ---
  // The loss scale of this step's Backward: the LossScaler's (fp16) or 1.
  Status LossScale(float* scale);
  // Model::Backward's on_ready on the step's last micro-batch.
  virtual Status OnGradReady(int param_index) = 0;
  virtual Status Finalize() = 0;
  Status Step(double lr);

  // --- CUDA graphs (runtime/train/step_graph.h) ---
  // Step(lr) in two halves: StageStep(lr) does the host part (update count, this step's LR and bias corrections
  // staged into device memory) and runs before each replay; ApplyStep() queues the device part and is what a
  // graph captures. Step == StageStep + ApplyStep.
  virtual Status StageStep(double lr) = 0;
  virtual Status ApplyStep() = 0;
  // "" when ApplyStep, OnGradReady and Finalize queue device work only (capturable once, replayable), else why
  // not, as a phrase for a log line.
  virtual std::string GraphBlocker() const = 0;

  // --- Observability ---
  // While set (not owned; nullptr to stop) the launched collectives are traced as spans on the comm track.
  virtual void set_trace(DeviceTrace* trace) = 0;
  // False when no gradient is exchanged (one process): TakeExposedCommMs then measures nothing.
  virtual bool exchanges() const = 0;
  // Exposed (non-overlapped) communication per synced step, in ms (CommStream::TakeExposedMs; log points only).
  virtual Status TakeExposedCommMs(double* ms) = 0;
  // The global L2 norm of the last step's gradient (before clipping; unscaled with loss scaling, then inf/NaN on a
  // skipped step): an f32[1] device scalar that ApplyStep writes on the compute stream (a replayed graph too), for
  // the progress line — copy it on that stream before a sync. nullptr before the first step, and with ZeRO-1 unless
  // grad_clip or loss scaling makes it compute the norm.
  virtual const Tensor* grad_norm() const = 0;
  // Bytes of optimizer state on this rank, and how it is held ("replicated", "ZeRO-1: sharded over 4 ranks").
  virtual size_t state_bytes() const = 0;
  virtual std::string placement() const = 0;

  // --- Checkpoints ---
  virtual const OptimizerOptions& options() const = 0;
  virtual int64_t step() const = 0;  // optimizer updates so far
  // The full state's names: the algorithm's (OptimAlgorithmSpec::state_names; e.g. adamw {"exp_avg", "exp_avg_sq"}).
  std::vector<std::string> state_names() const;
  // A collective (every rank calls it): the full optimizer state copied into `dst` — one tensor per state_names(),
  // in that order, of num_params elements of optim.state_dtype (a checkpoint's pinned host snapshot) — on the rank
  // that writes; the others pass none. The copies are queued on the compute stream after the last Step (an event
  // recorded there afterwards completes after them; host memory, as an offloaded state, is copied at once). Also
  // the manifest's optimizer, optimizer_step, sharding and loss_scaler fields.
  Status SaveState(const std::vector<Tensor*>& dst, proto::CheckpointManifest* m);
  // From a checkpoint saved by any strategy at any world size: `files` maps file names ("exp_avg.bin") to
  // their contents as f32 host tensors; `where` names the checkpoint in errors. Checks the optimizer name and
  // each state file's size (numel of the params), loads this rank's part, the update count and the loss scaler
  // state. The work is queued on the compute stream: the caller synchronizes it before `files` go away.
  // `in_place` names the state files whose StateSlices were written already (they need no entry in `files`).
  Status RestoreState(const proto::CheckpointManifest& m, const std::map<std::string, Tensor>& files,
                      const std::string& where, const std::set<std::string>& in_place = {});
  // Where this rank keeps the elements of each full state file ("exp_avg.bin", ...; the tensors are the state
  // itself, valid for the updater's lifetime). A restore may write them directly, on any stream, while nothing
  // else runs on the state; it then calls RestoreState with those files in `in_place`.
  virtual void StateSlices(std::vector<StateSlice>* out) = 0;
  // The state as created (zeros; split masters' low halves too) and the update count 0, for a run that starts afresh
  // after a restore that failed had written into the StateSlices. Queued on the compute stream.
  Status ResetState();

  // --- Split masters (train.master_weights split) ---
  // The fp32 masters' low halves, whose high halves are the model's bf16 params (Optimizer::master_low), settled
  // (optim.offload: back in host memory after the last update); *out null without split masters. For the paths that
  // read or write the masters whole — checkpoints, weight export and import — which join and split them with
  // runtime/train/master_halves.h.
  virtual Status MasterLow(Tensor** out) = 0;

 protected:
  ParameterUpdater(DeviceContext& ctx, int64_t numel, std::unique_ptr<LossScaler> scaler);
  LossScaler* scaler() const { return scaler_.get(); }

  // Strategy hooks of SaveState / RestoreState.
  virtual Status CopyStateTo(const std::vector<Tensor*>& dst) = 0;  // SaveState's copies (a collective)
  virtual void DescribeSharding(proto::ShardingState* out) const = 0;
  // `full`: every state name -> [numel] host tensor of the state's dtype (optim.state_dtype: RestoreState narrows).
  virtual Status LoadState(const std::map<std::string, Tensor>& full) = 0;
  virtual void set_step(int64_t step) = 0;

  DeviceContext& ctx_;

 private:
  int64_t numel_ = 0;
  std::unique_ptr<LossScaler> scaler_;  // train.precision fp16 only
};

// The updater for `cfg` (optim.*, dist.zero1, dist.bucket_mb, dist.bf16_compress, train.precision): sharded
// when dist.zero1 and world > 1 (grad_comm non-null), replicated otherwise (without exchange when grad_comm is
// null or world == 1). InvalidArgument for bad optimizer hyper-parameters.
Status MakeParameterUpdater(const proto::Config& cfg, DeviceContext& ctx, models::Model& model,
                            comm::Communicator* grad_comm, int rank, int world, std::unique_ptr<ParameterUpdater>* out);

// The Optimizer options of the config's `optim` section.
OptimizerOptions OptimizerOptionsFromConfig(const proto::OptimConfig& o);

// Whether the strategies take the storage `train` sets at `world_size` ranks with dist.zero1 `zero1`: ZeRO-1 (more than
// one rank) reduce-scatters fp32 gradients and all-gathers fp32 params, so train.gradients bf16 and
// train.master_weights bf16 or split run replicated (the all-reduce takes bf16 gradients as they are). InvalidArgument
// naming the keys and the world size otherwise. The one statement of the rule: the run check (before any rank
// starts), the memory fit (a knob whose config this refuses is not named) and MakeParameterUpdater ask here.
Status CheckZeroOneStorage(const proto::TrainConfig& train, int world_size, bool zero1);

}  // namespace dtrain::runtime
