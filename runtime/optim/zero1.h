#pragma once
// Zero1Optimizer: ZeRO stage 1 — the optimizer state is sharded across the data-parallel ranks.
// It replaces GradientReducer + Optimizer in the step loop and gives the same updates (up to the
// order of floating-point reductions; see "Equivalence" below).
//
// Layout. The flat grads/params buffer (models/model.h) is cut into buckets built from the END of
// the buffer, like GradientReducer's: a bucket grows parameter by parameter until it holds at least
// `bucket_bytes`, then its lower edge is lowered to make its size a multiple of `world` (so it may
// take the tail of the next parameter, which then belongs to two buckets). The first `total % world`
// elements form a last, tiny bucket padded to `world` elements. Rank r owns slice r of every bucket:
// elements [offset + r * s, offset + (r + 1) * s) with s = numel / world (padding: the tiny bucket's
// slice r is element r, or nothing when r >= total % world). The optimizer state shards hold these
// slices back to back (the shard layout): about total / world elements each. Gradients and params are
// NOT copied into shards: the reduce-scatter, the update and the all-gather work in place in the
// model's flat grads/params (NCCL's in-place convention: slice r of a bucket is rank r's
// recvbuff/sendbuff), so besides the state ZeRO-1 allocates only the tiny bucket's two padded
// buffers (`world` elements each) and three device scalars (shard_buffer_bytes()).
//
// Per step (contract, as GradientReducer's add/finalize):
//   [set_sync(...)]  Backward(on_ready = OnGradReady)  Finalize()  Step(ctx, lr)
//   1. OnGradReady(i): once per parameter per step. When every parameter overlapping the next
//      bucket(s) in launch order is announced, their gradients are reduce-scattered (averaged) in
//      place: this rank's slice of each bucket in grads() receives the average over the ranks.
//      Buckets launch in bucket order on every rank.
//   2. Finalize(): launches the remaining buckets and orders the compute stream after every
//      reduce-scatter. Must run before Step. Accumulation micro-steps: set_sync(false) before their
//      backward; OnGradReady then only records readiness, Finalize only resets (latched per step,
//      as in GradientReducer); grads() are untouched by unsynced steps. After a synced Finalize the
//      model's grads() hold the averaged gradient in this rank's owned ranges (slice r of every
//      bucket) and are UNSPECIFIED elsewhere: nothing may read the full grads() after it (zero them
//      before the next backward, as the trainer does).
//   3. Step(ctx, lr): over this rank's owned ranges of the model's params and grads (views, one
//      launch per bucket) with the matching views of the state shards: the sum of squared gradients
//      (accumulated per bucket) is all-reduced (only when grad_clip > 0: the global norm over ALL
//      ranks), then the optimizer algorithm's fused update (runtime/optim/optim_algorithm.h; update number step() + 1)
//      writes the owned params in place, then every bucket is all-gathered in place into the model's
//      params(). The model's params are the source of truth: a restore or broadcast of params
//      between steps is honoured. FailedPrecondition when no synced Finalize ran since the previous Step.
//
// Streams (CUDA, NCCL): collectives run on a dedicated non-blocking comm stream of the highest
// priority (runtime/optim/comm_stream.h, shared with GradientReducer). Every hand-over is an event, never a host sync:
// the comm stream waits for the compute stream's backward before a reduce-scatter, the compute stream waits for the
// reduce-scatters in Finalize, for the norm all-reduce before the clip coefficient, and for the all-gathers at the end
// of Step — so anything queued after Step (the next forward, a checkpoint copy) sees the new params.
// In place, the comm stream reads and writes grads() during the reduce-scatters: the next step's
// SetZero and backward on the compute stream come after Finalize's join, so they are ordered after
// them; likewise the update (compute) before the all-gather (comm, which waits for it) before the
// next forward (compute, which waits for the gathers).
// CPU (MPI): each collective blocks inside the call (see GradientReducer for why not MPI_I*).
//
// Checkpoints hold the FULL state: GatherStateInto all-gathers the shards bucket by bucket into the full flat
// tensors of the rank that writes (a collective: all ranks must call it); LoadState takes this rank's slices of full
// tensors saved by Optimizer or Zero1Optimizer at any world size.
//
// State dtype: the shards are f32, or bf16 with optim.state_dtype bf16 (AdamW: each range's update draws its
// stochastic rounding bits by the element's index in the whole buffer, so the shards round as a replicated
// optimizer's state would for the same f32 values). Params must be f32 (train.master_weights bf16 is refused).
//
// Offload (optim.offload cpu): the shards live in page-locked host memory (runtime/optim/offloaded_state.h, over the
// shard layout) and Step streams each owned range through the device ring — each rank moves state / W over its PCIe
// link per step. GatherStateInto copies each bucket's host slice to the device for its all-gather (CUDA), after the
// last Step's copies back; LoadState and StateSlices write the host shards.
//
// Equivalence: with W ranks the result equals GradientReducer (average) + Optimizer on the full
// buffer except (a) reduce-scatter may sum in another order than all-reduce (bitwise equal for MPI
// with 2 ranks) and (b) the norm is a sum of per-bucket, per-rank partial sums, each added into an
// f32 accumulator: relative error ~1e-7 in the clip coefficient. tests/runtime/optim/zero1_mpi_test.cc
// measures the difference.
//
// Ownership: borrows ctx, the model (its params/grads storage, written in place) and the communicator;
// all must outlive this object. Owns the state shards, the padded buffers and the CommStream;
// the destructor waits for the comm stream. Not thread-safe: call everything from the thread driving
// ctx's compute stream.

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "comm/communicator.h"
#include "core/device_context.h"
#include "core/status.h"
#include "core/tensor.h"
#include "models/model.h"
#include "runtime/observe/device_trace.h"
#include "runtime/optim/bucket_readiness.h"
#include "runtime/optim/comm_stream.h"
#include "runtime/optim/offloaded_state.h"
#include "runtime/optim/optim_algorithm.h"
#include "runtime/optim/optimizer_options.h"
#include "runtime/optim/state_slice.h"

namespace dtrain::runtime {

class LossScaler;

// One bucket of the layout above, in flat elements.
struct Zero1Bucket {
  int64_t offset = 0;        // first element of the bucket in grads/params
  int64_t numel = 0;         // elements of the bucket (shard_numel * world, except the padded tiny bucket)
  int64_t shard_numel = 0;   // elements of each rank's slice: ceil(numel / world)
  int64_t shard_offset = 0;  // where the slice lives in the state shards (same on every rank)
  std::vector<int> params;   // indices of the parameters overlapping the bucket (non-empty ones)
};

// The bucket layout for `params` (forward order, increasing offsets, no overlap) tiling a flat buffer
// of `total` elements, in launch order (bucket 0 = end of the buffer). Pure function (tested alone).
Status PlanZero1Buckets(const std::vector<models::ParamInfo>& params, int64_t total, int world, size_t bucket_bytes,
                        std::vector<Zero1Bucket>* out);

class Zero1Optimizer {
 public:
  // `opts` as for Optimizer. `grad_comm` must be on the model's device (NCCL for CUDA, MPI for CPU)
  // with comm->rank() == rank and world_size() == world. Buckets close at `bucket_mb` MiB (>= 0).
  static Status Create(DeviceContext& ctx, const OptimizerOptions& opts, models::Model& model,
                       comm::Communicator* grad_comm, int rank, int world, double bucket_mb,
                       std::unique_ptr<Zero1Optimizer>* out);
  ~Zero1Optimizer();
  Zero1Optimizer(const Zero1Optimizer&) = delete;
  Zero1Optimizer& operator=(const Zero1Optimizer&) = delete;

  // Model::Backward's on_ready. InvalidArgument for an index out of range, FailedPrecondition for a
  // parameter announced twice in one step.
  Status OnGradReady(int param_index);
  // Launches every bucket not launched yet; the compute stream then waits for all reduce-scatters.
  Status Finalize();
  void set_sync(bool sync) { readiness_.set_sync(sync); }
  bool sync() const { return readiness_.sync(); }
  // While set (not owned; nullptr to stop), every launched batch of reduce-scatters and each step's
  // all-gather are traced as spans on the comm track (GPU: comm-stream marks; CPU: the blocking calls).
  void set_trace(DeviceTrace* trace) { trace_ = trace; }

  // The sharded update with the scheduled `lr`, then the parameter all-gather (see the contract). With
  // `scaler` (fp16, nullable) as Optimizer::Step: the grads are loss-scaled, the update unscales them, clips on
  // the unscaled global norm and is skipped on every rank when any rank's shard holds an inf/NaN (the
  // all-reduced sum of squares is the shared found-inf flag); the update number counts applied updates.
  Status Step(DeviceContext& ctx, double lr, LossScaler* scaler = nullptr);

  // Optimizer::step() semantics: updates so far; set_step for a restore.
  int64_t step() const { return step_; }
  // The global gradient norm of the last Step (f32[1] on the device, the same on every rank); nullptr when Step does
  // not compute it: without grad_clip and loss scaling it would cost one more all-reduce per step.
  const Tensor* grad_norm() const { return has_norm_ ? &norm_ : nullptr; }
  void set_step(int64_t s) { step_ = s < 0 ? 0 : s; }
  const OptimizerOptions& options() const { return opts_; }
  const OffloadedState* offloaded() const { return offload_.get(); }  // null: the shards are on the device

  // The full optimizer state into `dst` (one tensor per state name, in Optimizer::state()'s order, each
  // optim.state_dtype [the model's numel], on any device — a checkpoint's pinned host snapshot), or, with `dst` empty,
  // only this rank's part of the collective. A collective: every rank calls it. Bucket by bucket through a device
  // buffer of the largest bucket (the full state never exists on the device), each all-gather after the compute
  // stream's tail, each bucket's copy into `dst` queued on the compute stream after its gather: a copy queued on
  // the compute stream afterwards, or an event recorded there, comes after them all.
  Status GatherStateInto(const std::vector<Tensor*>& dst);
  // Takes this rank's slices of full flat tensors of the state's dtype (any device; names as above, all required).
  // Synchronizes the compute stream before returning, so `full` may be freed afterwards. No collective.
  Status LoadState(const std::map<std::string, Tensor>& full);
  // Where LoadState puts each full state file's elements ("exp_avg.bin", ...): one slice per bucket this rank owns
  // a part of, into the shards (ParameterUpdater::StateSlices).
  void StateSlices(std::vector<StateSlice>* out);

  // Bytes of optimizer state held by this rank (a shard of each state tensor).
  size_t state_bytes() const;
  // Bytes of the other buffers this object allocates on ctx's device: the tiny bucket's padded grad
  // and param buffers (world elements each, only when numel % world != 0) and three f32 scalars — well under 1 KiB.
  // (Per-call temporaries, e.g. SumSquares' workspace and GatherStateInto's bucket, come from the allocator.)
  size_t shard_buffer_bytes() const;
  // Elements of each state shard on this rank (sum of the buckets' shard_numel).
  int64_t shard_numel() const { return shard_numel_; }
  const std::vector<Zero1Bucket>& buckets() const { return buckets_; }

  // Exposed (non-overlapped) communication per synced step, in ms, as GradientReducer's: GPU — the
  // compute stream's waits of the last step (reduce-scatters in Finalize, the norm all-reduce and the
  // all-gathers in Step; synchronizes with that step, call at log points only); CPU — the mean time in
  // blocking collectives per step since the previous call.
  Status TakeExposedCommMs(double* ms);

  cudaStream_t comm_stream() const;  // nullptr on the CPU

 private:
  Zero1Optimizer() = default;
  Status ReduceScatter(int from, int to);
  // All-gathers every bucket of `params` in place (each rank's slice into the others') on the comm stream after the
  // compute stream's current tail; the compute stream waits for it (timed as kGatherGap). CPU: blocking.
  Status AllGather(Tensor* params);
  Status AllGatherGroup(Tensor* params, cudaStream_t stream);
  Status ShardView(const Tensor& shard, const Zero1Bucket& b, Tensor* out) const;
  // Runs `fn` (collectives on `stream`) inside a comm-track span over buckets [from, to) when tracing: named
  // `op`, followed by the bucket numbers when `per_bucket`. Without a trace it only runs `fn`.
  template <typename Fn>
  Status Traced(const char* op, bool per_bucket, int from, int to, cudaStream_t stream, Fn&& fn);
  // This rank's real (unpadded) part of bucket b: [first, first + count) in flat elements.
  void OwnedRange(const Zero1Bucket& b, int64_t* first, int64_t* count) const;

  DeviceContext* ctx_ = nullptr;
  models::Model* model_ = nullptr;
  comm::Communicator* comm_ = nullptr;
  OptimizerOptions opts_;
  const OptimAlgorithmSpec* spec_ = nullptr;
  std::unique_ptr<OptimAlgorithm> algo_;
  int rank_ = 0, world_ = 1;
  std::vector<Zero1Bucket> buckets_;
  int64_t shard_numel_ = 0;
  std::vector<Tensor> state_;                // one per spec_->state_names, in the shard layout (empty: offload_)
  std::unique_ptr<OffloadedState> offload_;  // optim.offload cpu: the shards in host memory
  Tensor& Shard(size_t i) { return offload_ ? offload_->host()[i] : state_[i]; }
  Tensor grad_pad_, param_pad_;            // the tiny bucket's padded buffers (world elements)
  Tensor sum_squares_, norm_, clip_coef_;  // device scalars
  bool has_norm_ = false;                  // norm_ was written by a Step (only with grad_clip or loss scaling)
  DeviceTrace* trace_ = nullptr;
  int64_t step_ = 0;

  // Per-step state.
  BucketReadiness readiness_;   // announced params, launchable buckets, the sync latch
  bool grads_reduced_ = false;  // a synced Finalize ran since the last Step
  // The comm stream, its events and the exposed-communication account. Last: destroyed first, it waits for
  // the comm stream's work on the model's grads/params and the padded buffers.
  std::unique_ptr<CommStream> stream_;
};

}  // namespace dtrain::runtime
