#pragma once
// GradientReducer: averages gradients across ranks in buckets, overlapped with backward.
//
// The model keeps all gradients in ONE flat f32 (or bf16) buffer in forward order, and its backward announces
// each parameter's gradient as final, roughly in reverse order (models/model.h). At Create the
// reducer cuts that buffer into buckets — contiguous ranges of about `bucket_bytes`, built from the
// END of the buffer — so the bucket holding the last layers fills first and its all-reduce runs while
// backward is still computing earlier layers.
//
// Contract (flashlight's Reducer add/finalize):
//   for each step:  [set_sync(...)]  Backward(on_ready = MarkReady)  Finalize()  optimizer reads grads
//   - MarkReady(i) once per parameter per step, from the thread that drives the compute stream.
//     Parameters may be announced in any order; buckets are always launched in bucket order
//     (0 = end of the buffer) — a complete bucket waits for its predecessors — so every rank issues
//     the same collectives in the same order even if announcement orders differed.
//   - Finalize() MUST run before the optimizer reads grads. It launches every bucket not launched yet
//     (parameters never announced are reduced too) and orders the compute stream after every
//     bucket's collective. Afterwards the reducer is reset for the next step.
//   - Gradient accumulation: set_sync(false) before a micro-step's backward: MarkReady only records
//     readiness, Finalize only resets, and grads stay local. The flag is latched at the first
//     MarkReady (or Finalize) of a step, so set_sync between steps.
//   - Errors: an index out of range (InvalidArgument) or announced twice in a step
//     (FailedPrecondition), or a failing collective. After a collective error the reducer and its
//     communicator are unusable (the communicator was aborted).
//
// Paths:
//   GPU (NCCL): a dedicated non-blocking comm stream of the highest priority (runtime/optim/comm_stream.h).
//     Launching a bucket makes the comm stream wait for the compute stream's tail (an event, no host
//     sync), then enqueues ncclAllReduce (ncclAvg when averaging) on the comm stream inside
//     ncclGroupStart/End; Finalize makes the compute stream wait for the comm stream's work (timed).
//   CPU (MPI): a complete bucket is reduced at once by a blocking MPI_Allreduce inside MarkReady.
//     Open MPI progresses non-blocking collectives only inside MPI calls (no progress thread by
//     default), so MPI_Iallreduce would not overlap with single-threaded CPU backward anyway.
//   bf16_compress: each bucket is rounded to bf16 into a comm buffer (as large as grads, half the
//     bytes), all-reduced in bf16, and widened back into grads. Relative error ~2^-8 per element.
//   bf16 grads (train.gradients bf16): the buckets are all-reduced in bf16 in place, as the compressed wire is (the
//     same sums; bf16_compress has nothing left to do). Buckets are cut by the grads' own bytes.
//
// Ownership: borrows `ctx`, `comm` and the grads storage (keeps a view alive); all must outlive the
// reducer. Owns the CommStream and the bf16 buffer; the destructor waits for the comm stream.
// Not thread-safe.

#include <cstddef>
#include <cstdint>
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

namespace dtrain::runtime {

class GradientReducer {
 public:
  struct Options {
    size_t bucket_bytes = 25u << 20;  // a bucket closes once it holds at least this many bytes of grads
    bool average = true;              // false: sum
    bool bf16_compress = false;
  };

  // `params` tile `grads` (f32 or bf16, on ctx's device) in increasing offset order without overlap. The
  // communicator must match the device: NCCL for CUDA grads, MPI for CPU grads.
  static Status Create(DeviceContext& ctx, comm::Communicator* comm, const std::vector<models::ParamInfo>& params,
                       Tensor* grads, const Options& opts, std::unique_ptr<GradientReducer>* out);
  ~GradientReducer();
  GradientReducer(const GradientReducer&) = delete;
  GradientReducer& operator=(const GradientReducer&) = delete;

  // Call from Model::Backward's on_ready. When every parameter of the next bucket(s) in launch order
  // is ready, launches their all-reduce (see Paths above).
  Status MarkReady(int param_index);
  // Launches any bucket not yet launched, then makes the COMPUTE stream wait for every bucket's
  // collective (GPU; no host sync). Must run before the optimizer reads grads. Resets for the next step.
  Status Finalize();

  void set_sync(bool sync) { readiness_.set_sync(sync); }
  // While set (not owned; nullptr to stop), every launched batch of buckets is traced as a span on
  // the comm track: on the GPU the comm stream's time from the batch's start to its last collective's
  // end (buckets of one batch share one fused NCCL launch), on the CPU each blocking all-reduce.
  void set_trace(DeviceTrace* trace) { trace_ = trace; }
  bool sync() const { return readiness_.sync(); }

  // [offset, numel) in grads elements, per bucket, in launch order (bucket 0 = end of the buffer).
  const std::vector<std::pair<int64_t, int64_t>>& buckets() const { return ranges_; }
  // Which bucket parameter i belongs to.
  int bucket_of(int param_index) const { return param_bucket_.at(param_index); }
  // Exposed (non-overlapped) communication per synced step, in ms: GPU — how long the compute stream
  // waited in the last synced step's Finalize for collectives still running (timing events; this
  // synchronizes with that step, so call it at log points only); CPU — the mean time spent in the
  // blocking MPI all-reduces per synced step since the previous call (all of it is exposed).
  Status TakeExposedCommMs(double* ms);

  // The comm stream (GPU path), nullptr on the CPU.
  cudaStream_t comm_stream() const;

 private:
  struct Bucket {
    Tensor grads;  // view of the bucket's range
    Tensor wire;   // bf16 view of the same range in the comm buffer (compress_ only)
  };

  GradientReducer() = default;
  // Launches buckets [from, to) as one batch.
  Status LaunchBuckets(int from, int to);
  Status LaunchCpu(int from, int to);
  Status LaunchGpu(int from, int to);
  // The trace span of buckets [from, to) between two marks.
  void TraceBuckets(int from, int to, const DeviceTrace::Mark& begin, const DeviceTrace::Mark& end);

  DeviceContext* ctx_ = nullptr;
  comm::Communicator* comm_ = nullptr;
  Options opts_;
  comm::ReduceOp op_ = comm::ReduceOp::kAvg;
  bool compress_ = false;  // bf16_compress with f32 grads
  Tensor wire_;            // bf16 comm buffer, same element count as grads (compress_ only)
  std::vector<Bucket> buckets_;
  std::vector<std::pair<int64_t, int64_t>> ranges_;
  std::vector<int> param_bucket_;
  BucketReadiness readiness_;  // per-step: announced params, launchable buckets, the sync latch
  DeviceTrace* trace_ = nullptr;
  // The comm stream, its events and the exposed-communication account. Last: destroyed first, it waits
  // for the comm stream's work on grads and wire_.
  std::unique_ptr<CommStream> stream_;
};

}  // namespace dtrain::runtime
