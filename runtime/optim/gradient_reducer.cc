#include "runtime/optim/gradient_reducer.h"

#include <string>

#include "core/bf16.h"
#include "core/check.h"
#include "core/nvtx.h"
#if DT_HAVE_CUDA
#include "comm/bf16_cast.h"
#endif

namespace dtrain::runtime {

Status GradientReducer::Create(DeviceContext& ctx, comm::Communicator* comm,
                               const std::vector<models::ParamInfo>& params, Tensor* grads, const Options& opts,
                               std::unique_ptr<GradientReducer>* out) {
  DT_CHECK_ARG(comm != nullptr, "GradientReducer needs a communicator");
  DT_CHECK_ARG(grads != nullptr && (grads->defined() || grads->numel() == 0), "GradientReducer needs grads");
  DT_CHECK_ARG(grads->dtype() == DType::kF32 || grads->dtype() == DType::kBF16,
               "grads must be f32 or bf16, got " << grads->ToString());
  DT_CHECK_ARG(grads->device() == ctx.type(), "grads " << grads->ToString() << " are not on the context's device");
  DT_CHECK_ARG(comm->device_type() == grads->device(), "the " << comm::BackendName(comm->backend())
                                                              << " communicator cannot reduce " << grads->ToString()
                                                              << " (CUDA grads need nccl, CPU grads need mpi)");
  int64_t prev_end = 0;
  for (size_t i = 0; i < params.size(); ++i) {
    const auto& p = params[i];
    DT_CHECK_ARG(p.numel >= 0 && p.offset >= prev_end && p.offset + p.numel <= grads->numel(),
                 "param " << i << " '" << p.name << "' [" << p.offset << ", " << p.offset + p.numel
                          << ") overlaps its predecessor or leaves grads " << grads->ToString());
    prev_end = p.offset + p.numel;
  }

  std::unique_ptr<GradientReducer> r(new GradientReducer());  // private constructor
  r->ctx_ = &ctx;
  r->comm_ = comm;
  r->opts_ = opts;
  r->op_ = opts.average ? comm::ReduceOp::kAvg : comm::ReduceOp::kSum;
  r->compress_ = opts.bf16_compress && grads->dtype() == DType::kF32;  // bf16 grads are their own wire
  if (r->compress_) DT_RETURN_IF_ERROR(Tensor::Empty({grads->numel()}, DType::kBF16, ctx.allocator(), &r->wire_));

  // Buckets from the end of the buffer: backward finishes the last parameters first.
  const int n = static_cast<int>(params.size());
  r->param_bucket_.assign(n, 0);
  std::vector<std::vector<int>> param_buckets(n);
  size_t bytes = 0;
  int hi = n - 1;
  for (int i = n - 1; i >= 0; --i) {
    bytes += static_cast<size_t>(params[i].numel) * DTypeSize(grads->dtype());
    if (bytes < opts.bucket_bytes && i > 0) continue;
    Bucket b;
    const int64_t offset = params[i].offset;
    const int64_t numel = params[hi].offset + params[hi].numel - offset;
    DT_RETURN_IF_ERROR(grads->View(offset, {numel}, &b.grads));
    if (r->compress_) DT_RETURN_IF_ERROR(r->wire_.View(offset, {numel}, &b.wire));
    for (int j = i; j <= hi; ++j) {
      r->param_bucket_[j] = static_cast<int>(r->buckets_.size());
      param_buckets[j] = {r->param_bucket_[j]};
    }
    r->buckets_.push_back(std::move(b));
    r->ranges_.emplace_back(offset, numel);
    hi = i - 1;
    bytes = 0;
  }
  std::vector<std::string> names;
  for (const auto& p : params) names.push_back(p.name);
  r->readiness_ = BucketReadiness("GradientReducer", std::move(param_buckets), static_cast<int>(r->buckets_.size()),
                                  std::move(names));

  DT_RETURN_IF_ERROR(CommStream::Create(ctx, "GradientReducer", /*num_gaps=*/1, &r->stream_));
  if (comm->rank() == 0) {
    DT_LOG_INFO(kRuntime, "GradientReducer: {} params, {} elements in {} buckets (target {:.1f} KiB), {}{}, {} ranks",
                n, grads->numel(), r->buckets_.size(), opts.bucket_bytes / 1024.0, comm::BackendName(comm->backend()),
                r->compress_ || grads->dtype() == DType::kBF16 ? " bf16" : "", comm->world_size());
  }
  *out = std::move(r);
  return Status::OK();
}

// The comm stream may still read grads and the bf16 buffer: stream_, the last member, is destroyed first and
// waits for it.
GradientReducer::~GradientReducer() = default;

cudaStream_t GradientReducer::comm_stream() const { return stream_->stream(); }

Status GradientReducer::MarkReady(int param_index) {
  DT_RETURN_IF_ERROR(readiness_.Mark(param_index));
  if (!readiness_.step_sync()) return Status::OK();  // accumulation micro-step: nothing is exchanged
  const auto [from, to] = readiness_.TakeReady();
  return from == to ? Status::OK() : LaunchBuckets(from, to);
}

Status GradientReducer::LaunchBuckets(int from, int to) {
  DT_NVTX_RANGE("GradientReducer::LaunchBuckets");
  DT_LOG_TRACE(kRuntime, "launching buckets [{}, {})", from, to);
  if (stream_->on_device()) return LaunchGpu(from, to);
  // CPU: MPI_Allreduce blocks the only thread, so all of its time is exposed.
  return stream_->Exposed([&] { return LaunchCpu(from, to); });
}

Status GradientReducer::LaunchCpu(int from, int to) {
  for (int k = from; k < to; ++k) {
    Bucket& b = buckets_[k];
    DeviceTrace::Mark begin, end;
    if (trace_) DT_RETURN_IF_ERROR(trace_->Record(nullptr, &begin));
    if (!compress_) {
      DT_RETURN_IF_ERROR(comm_->AllReduce(&b.grads, op_, nullptr));
      if (trace_) DT_RETURN_IF_ERROR(trace_->Record(nullptr, &end));
      if (trace_) TraceBuckets(k, k + 1, begin, end);
      continue;
    }
    const float* g = b.grads.data<float>();
    auto* w = static_cast<uint16_t*>(b.wire.data());
    const int64_t n = b.grads.numel();
    for (int64_t i = 0; i < n; ++i) w[i] = RoundBf16Rne(g[i]);
    DT_RETURN_IF_ERROR(comm_->AllReduce(&b.wire, op_, nullptr));
    float* out = b.grads.data<float>();
    for (int64_t i = 0; i < n; ++i) out[i] = Bf16BitsToF32(w[i]);
    if (trace_) DT_RETURN_IF_ERROR(trace_->Record(nullptr, &end));
    if (trace_) TraceBuckets(k, k + 1, begin, end);
  }
  return Status::OK();
}

void GradientReducer::TraceBuckets(int from, int to, const DeviceTrace::Mark& begin, const DeviceTrace::Mark& end) {
  int64_t numel = 0;
  for (int k = from; k < to; ++k) numel += ranges_[k].second;
  const double bytes = compress_ ? 2.0 : static_cast<double>(DTypeSize(buckets_[from].grads.dtype()));
  const double mib = numel * bytes / 1048576.0;
  const std::string name = to - from == 1 ? "all-reduce bucket " + std::to_string(from)
                                          : "all-reduce buckets " + std::to_string(from) + "-" + std::to_string(to - 1);
  trace_->Span(TraceTrack::kComm, name, "comm", begin, end,
               JsonLine().Add("buckets", static_cast<int64_t>(to - from)).Add("MiB", mib).Add("elements", numel));
}

Status GradientReducer::LaunchGpu(int from, int to) {
#if DT_HAVE_CUDA
  cudaStream_t comm_stream = stream_->stream();
  // Sync point 1: the comm stream waits (on the device) for the backward kernels that produced these
  // gradients; one event covers the whole batch because it marks the compute stream's current tail.
  DT_RETURN_IF_ERROR(stream_->WaitForCompute());
  DeviceTrace::Mark begin;
  if (trace_) DT_RETURN_IF_ERROR(trace_->Record(comm_stream, &begin));
  if (compress_) {
    for (int k = from; k < to; ++k) {
      Bucket& b = buckets_[k];
      DT_RETURN_IF_ERROR(comm::LaunchF32ToBf16(b.grads.data<float>(), static_cast<uint16_t*>(b.wire.data()),
                                               b.grads.numel(), comm_stream));
    }
  }
  // One fused NCCL launch for the batch. Casts stay outside the group: NCCL enqueues grouped
  // collectives only at GroupEnd, so a kernel enqueued inside the group would run before them.
  DT_RETURN_IF_ERROR(comm_->GroupStart());
  Status st;
  for (int k = from; k < to && st.ok(); ++k) {
    Bucket& b = buckets_[k];
    st = comm_->AllReduce(compress_ ? &b.wire : &b.grads, op_, comm_stream);
  }
  Status end = comm_->GroupEnd();  // always close the group, even after an error
  DT_RETURN_IF_ERROR(st);
  DT_RETURN_IF_ERROR(end);
  for (int k = from; k < to && compress_; ++k) {
    Bucket& b = buckets_[k];
    DT_RETURN_IF_ERROR(comm::LaunchBf16ToF32(static_cast<const uint16_t*>(b.wire.data()), b.grads.data<float>(),
                                             b.grads.numel(), comm_stream));
  }
  if (trace_) {
    DeviceTrace::Mark end;
    DT_RETURN_IF_ERROR(trace_->Record(comm_stream, &end));
    TraceBuckets(from, to, begin, end);
  }
  return Status::OK();
#else
  (void)from;
  (void)to;
  return Status::Unavailable("GradientReducer: GPU path in a build without CUDA");
#endif
}

Status GradientReducer::Finalize() {
  DT_NVTX_FN();
  const auto [from, nb] = readiness_.Finish();
  if (!readiness_.step_sync()) return Status::OK();
  if (from < nb) DT_RETURN_IF_ERROR(LaunchBuckets(from, nb));
  // Sync point 2 (GPU): the optimizer runs on the compute stream; it must see every reduced bucket.
  // Device-side wait only — the host never blocks here. Timed: the exposed communication.
  DT_RETURN_IF_ERROR(stream_->JoinCompute(0));
  stream_->CountSyncedStep();
  return Status::OK();
}

Status GradientReducer::TakeExposedCommMs(double* ms) { return stream_->TakeExposedMs(ms); }

}  // namespace dtrain::runtime
