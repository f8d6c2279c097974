#include "runtime/optim/comm_stream.h"

#include <utility>
#include <vector>

#include "core/check.h"
#if DT_HAVE_CUDA
#include "core/cuda_check.h"
#include "core/cuda_handles.h"
#endif

namespace dtrain::runtime {

#if DT_HAVE_CUDA
struct CommStream::GpuState {
  CudaStream stream;
  CudaEvent to_comm;     // recorded on the compute stream, waited on by the comm stream
  CudaEvent to_compute;  // recorded on the comm stream, waited on by the compute stream
  // Timing events on the compute stream around each timed join: their gaps are the exposed comm.
  std::vector<CudaEvent> begin, end;
  std::vector<bool> timed;  // the gap was recorded at least once
};
#else
struct CommStream::GpuState {};
#endif

Status CommStream::Create(DeviceContext& ctx, std::string owner, int num_gaps, std::unique_ptr<CommStream>* out) {
  DT_CHECK_ARG(out != nullptr, "out is null");
  DT_CHECK_ARG(num_gaps >= 1, "CommStream needs at least one timed gap, got " << num_gaps);
  std::unique_ptr<CommStream> c(new CommStream());  // private constructor
  c->ctx_ = &ctx;
  c->owner_ = std::move(owner);
  c->num_gaps_ = num_gaps;
  if (ctx.is_cuda()) {
#if DT_HAVE_CUDA
    c->gpu_ = std::make_unique<GpuState>();
    DT_RETURN_IF_ERROR(CudaStream::CreateHighestPriority(&c->gpu_->stream));
    DT_RETURN_IF_ERROR(CudaEvent::Create(&c->gpu_->to_comm));
    DT_RETURN_IF_ERROR(CudaEvent::Create(&c->gpu_->to_compute));
    c->gpu_->begin.resize(num_gaps);
    c->gpu_->end.resize(num_gaps);
    c->gpu_->timed.assign(num_gaps, false);
    for (int g = 0; g < num_gaps; ++g) {
      DT_RETURN_IF_ERROR(CudaEvent::Create(&c->gpu_->begin[g], /*timing=*/true));
      DT_RETURN_IF_ERROR(CudaEvent::Create(&c->gpu_->end[g], /*timing=*/true));
    }
#else
    return Status::Unavailable(c->owner_ + ": CUDA context in a build without CUDA");
#endif
  }
  *out = std::move(c);
  return Status::OK();
}

CommStream::~CommStream() {
#if DT_HAVE_CUDA
  // The comm stream may still read or write the owner's buffers (grads, params, comm buffers).
  if (gpu_) gpu_->stream.SynchronizeForTeardown(owner_.c_str());
#endif
}

cudaStream_t CommStream::stream() const {
#if DT_HAVE_CUDA
  if (gpu_) return gpu_->stream.get();
#endif
  return nullptr;
}

Status CommStream::WaitForCompute() {
#if DT_HAVE_CUDA
  if (!gpu_) return Status::OK();
  // Sync point: the comm stream waits (on the device) for everything queued on the compute stream so
  // far — the backward kernels that produced a bucket's grads, or the update that produced the params.
  DT_RETURN_IF_ERROR(gpu_->to_comm.Record(ctx_->stream()));
  return gpu_->to_comm.Block(gpu_->stream.get());
#else
  return Status::OK();
#endif
}

Status CommStream::JoinCompute(int gap) {
  DT_CHECK_ARG(gap == kUntimed || (gap >= 0 && gap < num_gaps_), owner_ << ": no timed gap " << gap);
#if DT_HAVE_CUDA
  if (!gpu_) return Status::OK();
  // Sync point: the compute stream waits (on the device, no host sync) for the comm stream's work so
  // far, the collectives whose results it reads next. The comm stream is in order: one event covers all.
  cudaStream_t compute = ctx_->stream();
  if (gap != kUntimed) DT_RETURN_IF_ERROR(gpu_->begin[gap].Record(compute));
  DT_RETURN_IF_ERROR(gpu_->to_compute.Record(gpu_->stream.get()));
  DT_RETURN_IF_ERROR(gpu_->to_compute.Block(compute));
  if (gap != kUntimed) {
    DT_RETURN_IF_ERROR(gpu_->end[gap].Record(compute));
    gpu_->timed[gap] = true;
  }
#endif
  return Status::OK();
}

Status CommStream::TakeExposedMs(double* ms) {
  DT_CHECK_ARG(ms != nullptr, "ms is null");
  *ms = 0;
#if DT_HAVE_CUDA
  if (gpu_) {
    for (int g = 0; g < num_gaps_; ++g) {
      if (!gpu_->timed[g]) continue;
      // Sync point: only at log time — waits for the last step's join.
      DT_RETURN_IF_ERROR(gpu_->end[g].Synchronize());
      float gap = 0;
      DT_CUDA_CHECK(cudaEventElapsedTime(&gap, gpu_->begin[g].get(), gpu_->end[g].get()));
      *ms += gap;
    }
    return Status::OK();
  }
#endif
  if (synced_steps_ > 0) *ms = 1e3 * cpu_exposed_s_ / static_cast<double>(synced_steps_);
  cpu_exposed_s_ = 0;
  synced_steps_ = 0;
  return Status::OK();
}

}  // namespace dtrain::runtime
