#pragma once
// NcclCommunicator: the GPU collective backend (NCCL ring/tree all-reduce over NVLink, IB or TCP).
//
// Tensors: CUDA, on this communicator's device; dtype f32, bf16, f16, f64, i32 (kAvg: floating
// types only, done by ncclAvg). Collectives are enqueued on the caller's `stream` and return at once;
// Barrier() blocks the host. Every rank must call Create collectively with the same ncclUniqueId
// (comm/bootstrap.h ShareNcclUniqueId).
//
// Errors: any failing NCCL call aborts the communicator (ncclCommAbort) before the Status is
// returned, so peers waiting on this rank fail instead of hanging. A watchdog thread may poll
// CheckAsyncError() (ncclCommGetAsyncError) and call Abort() while the main thread is blocked.
// A collective that races with a concurrent Abort() is undefined in NCCL; the watchdog aborts only
// once it has decided the job is lost.
// Ownership: owns the ncclComm_t (through NcclComm) and a 4-byte device scratch for Barrier().

#include <atomic>
#include <memory>

#include "comm/communicator.h"

#if DT_HAVE_CUDA
#include <nccl.h>

#include "core/cuda_handles.h"

namespace dtrain::comm {

// Move-only RAII owner of an ncclComm_t. Abort() is separate from destruction: the destructor
// finalizes and destroys a healthy communicator (waiting for its queued work), while Abort() frees
// it at once without waiting for peers. Destruction after Abort() does nothing more.
class NcclComm {
 public:
  NcclComm() = default;
  // Collective over `world_size` ranks; the current CUDA device must be the one to use.
  static Status Create(int rank, int world_size, const ncclUniqueId& id, NcclComm* out);
  ~NcclComm();
  NcclComm(NcclComm&& o) noexcept;
  NcclComm& operator=(NcclComm&& o) noexcept;
  NcclComm(const NcclComm&) = delete;
  NcclComm& operator=(const NcclComm&) = delete;

  ncclComm_t get() const { return comm_; }
  bool aborted() const { return aborted_.load(); }
  // ncclCommAbort; idempotent; callable from another thread.
  Status Abort();
  // OK while healthy; the asynchronous NCCL error otherwise (the caller decides to Abort).
  Status AsyncError() const;

 private:
  void Destroy();
  ncclComm_t comm_ = nullptr;
  std::atomic<bool> aborted_{false};
};

class NcclCommunicator final : public Communicator {
 public:
  // Sets CUDA device `device` current and joins the communicator (blocks until all ranks joined).
  static Status Create(int rank, int world_size, const ncclUniqueId& id, int device,
                       std::unique_ptr<NcclCommunicator>* out);
  ~NcclCommunicator() override;
  NcclCommunicator(const NcclCommunicator&) = delete;
  NcclCommunicator& operator=(const NcclCommunicator&) = delete;

  Status AllReduce(Tensor* t, ReduceOp op, cudaStream_t stream) override;
  Status ReduceScatter(const Tensor& in, Tensor* out, ReduceOp op, cudaStream_t stream) override;
  Status AllGather(const Tensor& in, Tensor* out, cudaStream_t stream) override;
  Status Broadcast(Tensor* t, int root, cudaStream_t stream) override;
  // A 1-element all-reduce on an internal stream, then a host wait on that stream.
  Status Barrier() override;
  Status GroupStart() override;
  Status GroupEnd() override;
  Status Abort() override;
  // On an asynchronous error: aborts, then returns it.
  Status CheckAsyncError() override;

  int rank() const override { return rank_; }
  int world_size() const override { return world_size_; }
  Backend backend() const override { return Backend::kNccl; }
  int device() const { return device_; }
  ncclComm_t nccl_comm() const { return comm_.get(); }

 private:
  NcclCommunicator() = default;
  Status CheckUsable(const Tensor& t, const char* what) const;
  // Aborts the communicator when `st` is an error, then returns `st` (style rule: abort first).
  Status AbortOnError(Status st);
  Status EnqueueAllReduce(Tensor* t, ReduceOp op, cudaStream_t stream);
  Status EnqueueReduceScatter(const Tensor& in, Tensor* out, ReduceOp op, cudaStream_t stream);

  NcclComm comm_;
  CudaStream barrier_stream_;
  float* barrier_scratch_ = nullptr;  // device, 1 float
  int rank_ = 0;
  int world_size_ = 1;
  int device_ = 0;
};

}  // namespace dtrain::comm

#endif  // DT_HAVE_CUDA
