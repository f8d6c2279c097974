#include "runtime/optim/zero1.h"

#include <algorithm>
#include <cmath>

#include "core/check.h"
#include "core/logging.h"
#include "core/nvtx.h"
#include "kernels/optim_update.h"
#include "kernels/reduce.h"
#include "runtime/optim/loss_scaler.h"

namespace dtrain::runtime {
namespace {

// The compute-stream waits timed for TakeExposedCommMs (GPU); kUntimed for GatherStateInto's.
enum Gap { kFinalizeGap, kNormGap, kGatherGap, kNumGaps, kUntimed = CommStream::kUntimed };

// Runs `fn` (which issues collectives) between GroupStart and GroupEnd; the group is always closed.
template <typename Fn>
Status Grouped(comm::Communicator* comm, Fn&& fn) {
  DT_RETURN_IF_ERROR(comm->GroupStart());
  const Status st = fn();
  const Status end = comm->GroupEnd();
  DT_RETURN_IF_ERROR(st);
  return end;
}

bool Padded(const Zero1Bucket& b, int world) { return b.numel != b.shard_numel * world; }

}  // namespace

Status PlanZero1Buckets(const std::vector<models::ParamInfo>& params, int64_t total, int world, size_t bucket_bytes,
                        std::vector<Zero1Bucket>* out) {
  DT_CHECK_ARG(out != nullptr, "out is null");
  DT_CHECK_ARG(world >= 1, "world must be >= 1, got " << world);
  DT_CHECK_ARG(total >= 0, "negative buffer size " << total);
  int64_t prev_end = 0;
  for (size_t i = 0; i < params.size(); ++i) {
    const auto& p = params[i];
    DT_CHECK_ARG(p.numel >= 0 && p.offset >= prev_end && p.offset + p.numel <= total,
                 "param " << i << " '" << p.name << "' [" << p.offset << ", " << p.offset + p.numel
                          << ") overlaps its predecessor or leaves the buffer of " << total << " elements");
    prev_end = p.offset + p.numel;
  }
  // Ranges from the end: grow by whole parameters up to bucket_bytes, then round the size up to a
  // multiple of world. (hi - rem) stays a multiple of world, so rounding never passes `rem`.
  const int64_t rem = total % world;
  std::vector<std::pair<int64_t, int64_t>> ranges;  // [lo, hi)
  int64_t hi = total;
  int j = static_cast<int>(params.size()) - 1;
  while (hi > rem) {
    int64_t lo = hi;
    do {
      while (j >= 0 && params[j].offset >= lo) --j;  // parameters wholly inside [lo, hi) already
      lo = std::max(j >= 0 ? params[j].offset : int64_t{0}, rem);
    } while (static_cast<size_t>(hi - lo) * sizeof(float) < bucket_bytes && lo > rem);
    const int64_t n = (hi - lo + world - 1) / world * world;
    lo = std::max(hi - n, rem);
    ranges.emplace_back(lo, hi);
    hi = lo;
  }
  if (rem > 0) ranges.emplace_back(0, rem);  // the tiny bucket, padded to `world`

  out->clear();
  int64_t shard_offset = 0;
  for (const auto& [lo, end] : ranges) {
    Zero1Bucket b;
    b.offset = lo;
    b.numel = end - lo;
    b.shard_numel = (b.numel + world - 1) / world;
    b.shard_offset = shard_offset;
    shard_offset += b.shard_numel;
    for (size_t i = 0; i < params.size(); ++i) {
      const auto& p = params[i];
      if (p.numel > 0 && p.offset < end && p.offset + p.numel > lo) b.params.push_back(static_cast<int>(i));
    }
    out->push_back(std::move(b));
  }
  return Status::OK();
}

Status Zero1Optimizer::Create(DeviceContext& ctx, const OptimizerOptions& opts, models::Model& model,
                              comm::Communicator* grad_comm, int rank, int world, double bucket_mb,
                              std::unique_ptr<Zero1Optimizer>* out) {
  DT_CHECK_ARG(out != nullptr, "out is null");
  DT_CHECK_ARG(grad_comm != nullptr, "Zero1Optimizer needs a communicator");
  DT_CHECK_ARG(grad_comm->rank() == rank && grad_comm->world_size() == world,
               "rank " << rank << " of " << world << " but the communicator says " << grad_comm->rank() << " of "
                       << grad_comm->world_size());
  DT_CHECK_ARG(std::isfinite(bucket_mb) && bucket_mb >= 0.0, "bucket_mb must be finite and >= 0, got " << bucket_mb);
  const Tensor& params = model.params();
  const Tensor& grads = model.grads();
  DT_CHECK_ARG(params.dtype() == DType::kF32 && grads.dtype() == DType::kF32 && params.numel() == grads.numel(),
               "params " << params.ToString() << " and grads " << grads.ToString()
                         << " must be f32 of one size (ZeRO-1 does not take train.master_weights bf16)");
  DT_CHECK_ARG(params.device() == ctx.type() && grads.device() == ctx.type(),
               "params " << params.ToString() << " are not on the context's device");
  DT_CHECK_ARG(grad_comm->device_type() == ctx.type(), "the " << comm::BackendName(grad_comm->backend())
                                                              << " communicator cannot reduce " << grads.ToString()
                                                              << " (CUDA grads need nccl, CPU grads need mpi)");
  std::unique_ptr<Zero1Optimizer> z(new Zero1Optimizer());  // private constructor
  DT_RETURN_IF_ERROR(CreateOptimAlgorithm(opts, &z->spec_, &z->algo_));
  z->ctx_ = &ctx;
  z->model_ = &model;
  z->comm_ = grad_comm;
  z->opts_ = opts;
  z->rank_ = rank;
  z->world_ = world;
  const auto& infos = model.param_infos();
  const size_t bucket_bytes = static_cast<size_t>(bucket_mb * (1 << 20));
  DT_RETURN_IF_ERROR(PlanZero1Buckets(infos, params.numel(), world, bucket_bytes, &z->buckets_));
  std::vector<std::vector<int>> param_buckets(infos.size());
  for (size_t k = 0; k < z->buckets_.size(); ++k) {
    for (int i : z->buckets_[k].params) param_buckets[i].push_back(static_cast<int>(k));
    z->shard_numel_ += z->buckets_[k].shard_numel;
  }
  std::vector<std::string> names;
  for (const auto& p : infos) names.push_back(p.name);
  z->readiness_ = BucketReadiness("Zero1Optimizer", std::move(param_buckets), static_cast<int>(z->buckets_.size()),
                                  std::move(names));

  // The state starts at zero (torch's lazy init). Its padding slot (the tiny bucket's, on ranks that own
  // no element of it) is never read or written by the update.
  const int64_t s = z->shard_numel_;
  const int n_state = static_cast<int>(z->spec_->state_names.size());
  if (opts.offload && s > 0) {
    const std::vector<DType> dtypes(static_cast<size_t>(n_state), opts.state_dtype);
    const int64_t keep = OffloadedState::KeepNumel(opts.offload_keep_bytes, dtypes, s);
    DT_RETURN_IF_ERROR(OffloadedState::Create(ctx, s, dtypes, opts.offload_chunk, keep, &z->offload_));
  } else {
    z->state_.resize(n_state);
    for (Tensor& t : z->state_) {
      DT_RETURN_IF_ERROR(Tensor::Empty({s}, opts.state_dtype, ctx.allocator(), &t));
      DT_RETURN_IF_ERROR(t.SetZero(ctx.stream()));
    }
  }
  if (params.numel() % world != 0) {
    for (Tensor* t : {&z->grad_pad_, &z->param_pad_}) {
      DT_RETURN_IF_ERROR(Tensor::Empty({world}, DType::kF32, ctx.allocator(), t));
      DT_RETURN_IF_ERROR(t->SetZero(ctx.stream()));
    }
  }
  for (Tensor* t : {&z->sum_squares_, &z->norm_, &z->clip_coef_}) {
    DT_RETURN_IF_ERROR(Tensor::Empty({1}, DType::kF32, ctx.allocator(), t));
  }

  DT_RETURN_IF_ERROR(CommStream::Create(ctx, "Zero1Optimizer", kNumGaps, &z->stream_));
  if (rank == 0) {
    DT_LOG_INFO(kRuntime,
                "Zero1Optimizer ({}): {} elements in {} buckets (target {:.1f} KiB), {} per rank shard, {}, {} ranks, "
                "in place ({} B besides the state){}",
                opts.name, params.numel(), z->buckets_.size(), bucket_bytes / 1024.0, s,
                comm::BackendName(grad_comm->backend()), world, z->shard_buffer_bytes(),
                z->offload_ ? "; the shards in host memory (optim.offload cpu)" : "");
  }
  *out = std::move(z);
  return Status::OK();
}

// The comm stream may still read or write the model's grads and params and the padded buffers: stream_,
// the last member, is destroyed first and waits for it.
Zero1Optimizer::~Zero1Optimizer() = default;

cudaStream_t Zero1Optimizer::comm_stream() const { return stream_->stream(); }

template <typename Fn>
Status Zero1Optimizer::Traced(const char* op, bool per_bucket, int from, int to, cudaStream_t stream, Fn&& fn) {
  if (trace_ == nullptr) return fn();
  std::string name = op;
  if (per_bucket) {
    name += to - from == 1 ? " bucket " + std::to_string(from)
                           : " buckets " + std::to_string(from) + "-" + std::to_string(to - 1);
  }
  DeviceTrace::Mark begin, end;
  DT_RETURN_IF_ERROR(trace_->Record(stream, &begin));
  DT_RETURN_IF_ERROR(fn());
  DT_RETURN_IF_ERROR(trace_->Record(stream, &end));
  int64_t numel = 0;
  for (int k = from; k < to; ++k) numel += buckets_[k].numel;
  trace_->Span(TraceTrack::kComm, name, "comm", begin, end,
               JsonLine()
                   .Add("buckets", static_cast<int64_t>(to - from))
                   .Add("MiB", numel * 4.0 / 1048576.0)
                   .Add("elements", numel));
  return Status::OK();
}

Status Zero1Optimizer::ShardView(const Tensor& shard, const Zero1Bucket& b, Tensor* out) const {
  return shard.View(b.shard_offset, {b.shard_numel}, out);
}

void Zero1Optimizer::OwnedRange(const Zero1Bucket& b, int64_t* first, int64_t* count) const {
  *first = b.offset + rank_ * b.shard_numel;
  *count = std::clamp<int64_t>(b.numel - rank_ * b.shard_numel, 0, b.shard_numel);
}

Status Zero1Optimizer::OnGradReady(int param_index) {
  DT_RETURN_IF_ERROR(readiness_.Mark(param_index));
  if (!readiness_.step_sync()) return Status::OK();  // accumulation micro-step: nothing is exchanged
  const auto [from, to] = readiness_.TakeReady();
  return from == to ? Status::OK() : ReduceScatter(from, to);
}

Status Zero1Optimizer::ReduceScatter(int from, int to) {
  DT_NVTX_RANGE("Zero1Optimizer::ReduceScatter");
  DT_LOG_TRACE(kRuntime, "reduce-scatter buckets [{}, {})", from, to);
  cudaStream_t stream = comm_stream();
  DT_RETURN_IF_ERROR(stream_->WaitForCompute());
  Tensor& grads = model_->grads();
  // In place: bucket b's view of grads is the input, its slice `rank` (this rank's owned range) the output.
  std::vector<Tensor> in(to - from), out(to - from);
  const Zero1Bucket* padded = nullptr;
  for (int k = from; k < to; ++k) {
    const Zero1Bucket& b = buckets_[k];
    Tensor src;
    DT_RETURN_IF_ERROR(grads.View(b.offset, {b.numel}, &src));
    if (!Padded(b, world_)) {
      in[k - from] = src;
      DT_RETURN_IF_ERROR(grads.View(b.offset + rank_ * b.shard_numel, {b.shard_numel}, &out[k - from]));
      continue;
    }
    // The tiny bucket: its elements into the padded buffer (outside the group: NCCL enqueues grouped
    // collectives only at GroupEnd, after this copy on the same stream), reduced in place there. The
    // padding's values do not matter: only elements < numel are copied back.
    padded = &b;
    Tensor dst;
    DT_RETURN_IF_ERROR(grad_pad_.View(0, {b.numel}, &dst));
    DT_RETURN_IF_ERROR(dst.CopyFrom(src, stream));
    in[k - from] = grad_pad_;
    DT_RETURN_IF_ERROR(grad_pad_.View(rank_, {1}, &out[k - from]));
  }
  auto run = [&]() -> Status {
    DT_RETURN_IF_ERROR(Grouped(comm_, [&]() -> Status {
      for (size_t i = 0; i < in.size(); ++i) {
        DT_RETURN_IF_ERROR(comm_->ReduceScatter(in[i], &out[i], comm::ReduceOp::kAvg, stream));
      }
      return Status::OK();
    }));
    int64_t first = 0, count = 0;
    if (padded != nullptr) OwnedRange(*padded, &first, &count);
    if (count == 0) return Status::OK();
    // After the group: this rank's averaged element of the tiny bucket into its owned range of grads.
    Tensor src, dst;
    DT_RETURN_IF_ERROR(grad_pad_.View(rank_, {1}, &src));
    DT_RETURN_IF_ERROR(grads.View(first, {1}, &dst));
    return dst.CopyFrom(src, stream);
  };
  return Traced("reduce-scatter", /*per_bucket=*/true, from, to, stream, [&] { return stream_->Exposed(run); });
}

Status Zero1Optimizer::Finalize() {
  DT_NVTX_FN();
  const auto [from, nb] = readiness_.Finish();
  const bool synced = readiness_.step_sync();
  if (synced) {
    if (from < nb) DT_RETURN_IF_ERROR(ReduceScatter(from, nb));
    // The update reads the reduced grads on the compute stream, and the next step's SetZero/backward
    // (also on it) must not overwrite grads before the in-place reduce-scatters have read them.
    DT_RETURN_IF_ERROR(stream_->JoinCompute(kFinalizeGap));
    grads_reduced_ = true;
    stream_->CountSyncedStep();
  }
  return Status::OK();
}

Status Zero1Optimizer::AllGatherGroup(Tensor* params, cudaStream_t stream) {
  return Grouped(comm_, [&]() -> Status {
    for (const Zero1Bucket& b : buckets_) {
      Tensor in, out;
      if (Padded(b, world_)) {
        out = param_pad_;
      } else {
        DT_RETURN_IF_ERROR(params->View(b.offset, {b.numel}, &out));
      }
      // In place: the input is this rank's slice of the output.
      DT_RETURN_IF_ERROR(out.View(rank_ * b.shard_numel, {b.shard_numel}, &in));
      DT_RETURN_IF_ERROR(comm_->AllGather(in, &out, stream));
    }
    return Status::OK();
  });
}

Status Zero1Optimizer::AllGather(Tensor* params) {
  DT_NVTX_RANGE("Zero1Optimizer::AllGather");
  cudaStream_t stream = comm_stream();
  DT_RETURN_IF_ERROR(stream_->WaitForCompute());
  auto run = [&]() -> Status {
    for (const Zero1Bucket& b : buckets_) {
      int64_t first = 0, count = 0;
      if (Padded(b, world_)) OwnedRange(b, &first, &count);
      if (count == 0) continue;
      // The tiny bucket's owned element into its slot of the padded buffer (before the group, on the same stream).
      Tensor src, dst;
      DT_RETURN_IF_ERROR(params->View(first, {1}, &src));
      DT_RETURN_IF_ERROR(param_pad_.View(rank_, {1}, &dst));
      DT_RETURN_IF_ERROR(dst.CopyFrom(src, stream));
    }
    DT_RETURN_IF_ERROR(AllGatherGroup(params, stream));
    for (const Zero1Bucket& b : buckets_) {
      if (!Padded(b, world_)) continue;
      // After the group: the gathered tiny bucket minus its padding into place.
      Tensor src, dst;
      DT_RETURN_IF_ERROR(param_pad_.View(0, {b.numel}, &src));
      DT_RETURN_IF_ERROR(params->View(b.offset, {b.numel}, &dst));
      DT_RETURN_IF_ERROR(dst.CopyFrom(src, stream));
    }
    return Status::OK();
  };
  DT_RETURN_IF_ERROR(stream_->Exposed([&]() -> Status {
    return Traced("all-gather", /*per_bucket=*/false, 0, static_cast<int>(buckets_.size()), stream, run);
  }));
  return stream_->JoinCompute(kGatherGap);
}

Status Zero1Optimizer::Step(DeviceContext& ctx, double lr, LossScaler* scaler) {
  DT_NVTX_RANGE("zero1_step");
  DT_CHECK_ARG(&ctx == ctx_, "Zero1Optimizer::Step must use the DeviceContext it was created with");
  DT_CHECK_ARG(std::isfinite(lr) && lr >= 0.0, "lr must be finite and >= 0, got " << lr);
  if (!grads_reduced_) {
    return Status::FailedPrecondition("Zero1Optimizer::Step without a synced Finalize since the previous step");
  }
  grads_reduced_ = false;
  Tensor& params = model_->params();
  const Tensor& grads = model_->grads();

  // 1. Global norm (for clipping, and for the loss scaler's found-inf check): the sum of squares over this
  // rank's owned ranges (accumulated bucket by bucket), summed over the ranks. A non-finite element on any
  // rank makes the all-reduced sum non-finite on every rank: that sum is the all-reduced found-inf flag,
  // so every rank skips the same steps and keeps the same scale.
  const Tensor* scale = nullptr;
  const Tensor* skip = nullptr;
  int64_t skipped = 0;
  if (opts_.grad_clip > 0.0 || scaler != nullptr) {
    DT_RETURN_IF_ERROR(sum_squares_.SetZero(ctx.stream()));
    for (const Zero1Bucket& b : buckets_) {
      int64_t first = 0, count = 0;
      OwnedRange(b, &first, &count);
      if (count == 0) continue;
      Tensor g;
      DT_RETURN_IF_ERROR(grads.View(first, {count}, &g));
      DT_RETURN_IF_ERROR(ops::SumSquares(ctx, g, &sum_squares_, /*accumulate=*/true));
    }
    DT_RETURN_IF_ERROR(stream_->WaitForCompute());
    DT_RETURN_IF_ERROR(
        stream_->Exposed([&] { return comm_->AllReduce(&sum_squares_, comm::ReduceOp::kSum, comm_stream()); }));
    DT_RETURN_IF_ERROR(stream_->JoinCompute(kNormGap));
    if (scaler != nullptr) {
      // As Optimizer::Step: the multiplier (1 / loss scale, times the clip coefficient of the unscaled norm)
      // and the skip flag; the update number counts applied updates only.
      LossScalerState before;
      DT_RETURN_IF_ERROR(scaler->state(&before));
      skipped = before.skipped_steps;
      DT_RETURN_IF_ERROR(scaler->Update(ctx, sum_squares_, opts_.grad_clip, &norm_, &clip_coef_));
      skip = &scaler->found_inf();
    } else {
      DT_RETURN_IF_ERROR(ops::GradClipCoef(ctx, sum_squares_, opts_.grad_clip, &norm_, &clip_coef_));
    }
    scale = &clip_coef_;
    has_norm_ = true;
  }

  // 2. The fused update in place over each bucket's owned range of params and grads, with the state
  // shards' matching slices. The constants go to the kernels as arguments (no staged buffer: ZeRO-1's step
  // is not captured in a CUDA graph).
  // Offloaded: the same ranges, as the segments of one streamed update.
  algo_->Prepare(lr, step_ + 1 - skipped, /*staged=*/nullptr);
  std::vector<Tensor> views(state_.size()), p(buckets_.size()), g(buckets_.size());
  std::vector<Tensor*> state;
  for (Tensor& v : views) state.push_back(&v);
  std::vector<OffloadedState::Segment> segments;
  for (size_t k = 0; k < buckets_.size(); ++k) {
    const Zero1Bucket& b = buckets_[k];
    int64_t first = 0, count = 0;
    OwnedRange(b, &first, &count);
    if (count == 0) continue;
    DT_RETURN_IF_ERROR(params.View(first, {count}, &p[k]));
    DT_RETURN_IF_ERROR(grads.View(first, {count}, &g[k]));
    if (offload_) {
      segments.push_back({&p[k], &g[k], first, b.shard_offset});
      continue;
    }
    for (size_t i = 0; i < state_.size(); ++i) DT_RETURN_IF_ERROR(state_[i].View(b.shard_offset, {count}, &views[i]));
    DT_RETURN_IF_ERROR(algo_->Update(ctx, &p[k], g[k], state, scale, skip, /*staged=*/nullptr, /*offset=*/first));
  }
  if (offload_) DT_RETURN_IF_ERROR(offload_->Update(ctx, *algo_, segments, scale, skip, /*staged=*/nullptr));
  ++step_;

  // 3. Every bucket all-gathered in place into the model's params; the compute stream waits for them.
  return AllGather(&params);
}

Status Zero1Optimizer::GatherStateInto(const std::vector<Tensor*>& dst) {
  const size_t n_state = spec_->state_names.size();
  const int64_t total = model_->params().numel();
  DT_CHECK_ARG(dst.empty() || dst.size() == n_state,
               "GatherStateInto: " << dst.size() << " destinations for " << n_state << " state tensors");
  for (const Tensor* d : dst) {
    DT_CHECK_ARG(d != nullptr && d->dtype() == opts_.state_dtype && d->numel() == total,
                 "GatherStateInto: each destination must be " << DTypeName(opts_.state_dtype) << "[" << total << "]");
  }
  if (offload_) DT_RETURN_IF_ERROR(offload_->Settle());  // sync point: the last Step's shards back in host memory
  // One bucket at a time through `staging` (the largest bucket, padded): the full state never exists on the device.
  // The collective reads device memory: an offloaded shard's slice is copied in first (`stage_in`, CUDA).
  int64_t most = 0, most_shard = 0;
  for (const Zero1Bucket& b : buckets_) {
    most = std::max(most, b.shard_numel * world_);
    most_shard = std::max(most_shard, b.shard_numel);
  }
  const bool stage = offload_ != nullptr && ctx_->is_cuda();
  Tensor staging, stage_in;
  DT_RETURN_IF_ERROR(Tensor::Empty({most}, opts_.state_dtype, ctx_->allocator(), &staging));
  if (stage) DT_RETURN_IF_ERROR(Tensor::Empty({most_shard}, opts_.state_dtype, ctx_->allocator(), &stage_in));
  for (size_t i = 0; i < n_state; ++i) {
    for (const Zero1Bucket& b : buckets_) {
      Tensor in, out;
      DT_RETURN_IF_ERROR(ShardView(Shard(i), b, &in));
      if (stage) {
        Tensor slice;
        DT_RETURN_IF_ERROR(stage_in.View(0, {b.shard_numel}, &slice));
        DT_RETURN_IF_ERROR(slice.CopyFrom(in, ctx_->stream()));
        in = slice;
      }
      DT_RETURN_IF_ERROR(staging.View(0, {b.shard_numel * world_}, &out));
      // The gather after the compute stream's tail (the previous bucket's copies out of `staging` and into
      // `stage_in`), the copies after the gather.
      DT_RETURN_IF_ERROR(stream_->WaitForCompute());
      DT_RETURN_IF_ERROR(comm_->AllGather(in, &out, comm_stream()));
      DT_RETURN_IF_ERROR(stream_->JoinCompute(kUntimed));
      if (dst.empty()) continue;
      Tensor from, to;  // the bucket's real elements (the tiny bucket's padding stays behind)
      DT_RETURN_IF_ERROR(staging.View(0, {b.numel}, &from));
      DT_RETURN_IF_ERROR(dst[i]->View(b.offset, {b.numel}, &to));
      DT_RETURN_IF_ERROR(to.CopyFrom(from, ctx_->stream()));
    }
  }
  return Status::OK();
}

Status Zero1Optimizer::LoadState(const std::map<std::string, Tensor>& full) {
  const int64_t total = model_->params().numel();
  if (offload_) DT_RETURN_IF_ERROR(offload_->Settle());  // (nothing in flight at a restore; kept for the contract)
  for (size_t i = 0; i < spec_->state_names.size(); ++i) {
    const std::string& name = spec_->state_names[i];
    const auto it = full.find(name);
    if (it == full.end()) return Status::InvalidArgument("LoadState: no '" + name + "' for optimizer " + opts_.name);
    const Tensor& src = it->second;
    DT_CHECK_ARG(src.dtype() == opts_.state_dtype && src.numel() == total,
                 "LoadState: '" << name << "' " << src.ToString() << " must be " << DTypeName(opts_.state_dtype) << "["
                                << total << "]");
    for (const Zero1Bucket& b : buckets_) {
      int64_t first = 0, count = 0;
      OwnedRange(b, &first, &count);
      if (count == 0) continue;
      Tensor from, to;
      DT_RETURN_IF_ERROR(src.View(first, {count}, &from));
      DT_RETURN_IF_ERROR(Shard(i).View(b.shard_offset, {count}, &to));
      DT_RETURN_IF_ERROR(to.CopyFrom(from, ctx_->stream()));
    }
  }
  // Sync point (restore only): the caller may free `full` once this returns.
  return ctx_->Synchronize();
}

void Zero1Optimizer::StateSlices(std::vector<StateSlice>* out) {
  out->clear();
  const int64_t total = model_->params().numel();
  for (size_t i = 0; i < spec_->state_names.size(); ++i) {
    for (const Zero1Bucket& b : buckets_) {
      int64_t first = 0, count = 0;
      OwnedRange(b, &first, &count);
      if (count > 0) out->push_back({spec_->state_names[i] + ".bin", total, first, count, &Shard(i), b.shard_offset});
    }
  }
}

size_t Zero1Optimizer::state_bytes() const {
  return static_cast<size_t>(shard_numel_) * DTypeSize(opts_.state_dtype) * spec_->state_names.size();
}

size_t Zero1Optimizer::shard_buffer_bytes() const {
  size_t bytes = 0;
  for (const Tensor* t : {&grad_pad_, &param_pad_, &sum_squares_, &norm_, &clip_coef_}) bytes += t->nbytes();
  return bytes;
}

Status Zero1Optimizer::TakeExposedCommMs(double* ms) { return stream_->TakeExposedMs(ms); }

}  // namespace dtrain::runtime
