#pragma once
// DataSource: where the trainer's batches come from, behind one interface; the trainer never asks which it holds.
//   - the loader (data/loader.h) over a sharded dataset: Fashion-MNIST's IDX files converted once into shards under
//     data.cache_dir, a local `dtrain data` dataset, or one in a remote store fetched into that cache
//     (data/remote_cache.h); with an evaluation split when train.eval and the dataset has one; each split limited to
//     its first data.limit_train / data.limit_test samples when set. The training order is
//     the data::Sampler's (seed, epoch, samples consumed globally), which is also the checkpointed data position. An
//     epoch ends when the rest of it cannot fill a whole optimizer step (grad_accum_steps global batches).
//   - synthetic tokens (data/synthetic_tokens.h, data.dataset synthetic_tokens) for throughput runs: no epochs (the
//     run ends at train.max_steps), no position to restore, no evaluation.
// A new kind of input is one more subclass in data_source.cc and one more branch in MakeDataSource.
//
// Batches: on the context's device, valid until the (2 * min(grad_accum_steps, StepGraph::kMaxAccum) - 1)-th later
// Next() (a graphed step takes all its micro-batches before queueing work on them: runtime/train/step_graph.h).
//
// Ownership: borrows the DeviceContext (outlives the source). Not thread-safe: the trainer's thread only.

#include <cstdint>
#include <memory>

#include "comm/dist_env.h"
#include "core/device_context.h"
#include "core/status.h"
#include "data/loader.h"
#include "proto/config.pb.h"

namespace dtrain::runtime {

class DataSource {
 public:
  virtual ~DataSource() = default;

  // --- Training batches ---
  // The next training micro-batch of this rank (batch.wait_seconds: host time blocked for it).
  virtual Status Next(data::Batch* b) = 0;
  // The position of the next training batch (the checkpointed data position); (train.seed, 0, 0) without epochs.
  virtual data::SamplerState Position() const = 0;
  // Continues at `pos` (a checkpoint's, or the start of the next epoch). InvalidArgument when `pos` lies beyond the
  // epoch's samples (another dataset than the checkpoint's). Without epochs: nothing to restore.
  virtual Status Restore(const data::SamplerState& pos) = 0;
  // True when a whole optimizer step fits in the rest of `pos.epoch` (always without epochs).
  virtual bool StepFits(const data::SamplerState& pos) const = 0;
  // Optimizer steps from `pos` to the end of training after `epochs` epochs; INT64_MAX without epochs.
  virtual int64_t StepsLeft(const data::SamplerState& pos, int64_t epochs) const = 0;
  // The length of `epochs` epochs in LR-schedule steps: optimizer steps, or with samples_per_step > 0 steps of that
  // many samples; INT64_MAX without epochs.
  virtual int64_t ScheduleSteps(int64_t epochs, int64_t samples_per_step) const = 0;

  // --- Evaluation ---
  // False when there is no evaluation data (train.eval off, no test split, synthetic input).
  virtual bool has_eval() const = 0;
  // Rewinds the evaluation split and sets *batches to its number of global batches (every sample once; padding rows
  // have num_real below the batch size), at most `max_batches` of them (0 = all): always the first ones, in the
  // split's order. Then NextEval() that many times. Every rank gets the same count (its share of each batch).
  virtual Status BeginEval(int64_t max_batches, int64_t* batches) = 0;
  virtual Status NextEval(data::Batch* b) = 0;
};

// The source `cfg` asks for (data.*, train.seed/grad_accum_steps/eval/max_steps, schedule.samples_per_step) for this
// worker (`env`: rank, world size; its restart count names the DTRAIN_SAMPLE_LOG file). InvalidArgument when no
// whole optimizer step fits in an epoch, or synthetic tokens without train.max_steps or a token model.
Status MakeDataSource(const proto::Config& cfg, DeviceContext& ctx, const comm::DistEnv& env,
                      std::unique_ptr<DataSource>* out);

}  // namespace dtrain::runtime
