#pragma once
// MpiCommunicator: the CPU collective backend — Open MPI between real worker processes.
//
// Works on a private duplicate of MPI_COMM_WORLD (so dtrain's traffic never matches anyone else's)
// with MPI_ERRORS_RETURN, so MPI failures come back as Status instead of killing the job.
// Tensors: CPU, dtype f32, f64, i32 or bf16 (bf16 reduces through user-defined MPI ops that add in
// f32 and round back, like NCCL). kAvg = MPI sum, then a division by world size (i32: rejected).
// Every call blocks until done; `stream` arguments are ignored (see communicator.h).
// Element counts must fit in an int (MPI's count type).
// Ownership: owns the duplicated communicator and the bf16 MPI_Ops; destroy before MPI_Finalize.
// Thread-safety: as Communicator; Abort() is an atomic flag.

#include <atomic>
#include <memory>

#include "comm/communicator.h"

#if DT_HAVE_MPI
#include <mpi.h>

namespace dtrain::comm {

class MpiCommunicator final : public Communicator {
 public:
  // Collective over MPI_COMM_WORLD (MPI_Comm_dup). MPI must be initialised.
  static Status Create(std::unique_ptr<MpiCommunicator>* out);
  ~MpiCommunicator() override;
  MpiCommunicator(const MpiCommunicator&) = delete;
  MpiCommunicator& operator=(const MpiCommunicator&) = delete;

  Status AllReduce(Tensor* t, ReduceOp op, cudaStream_t stream) override;
  Status ReduceScatter(const Tensor& in, Tensor* out, ReduceOp op, cudaStream_t stream) override;
  Status AllGather(const Tensor& in, Tensor* out, cudaStream_t stream) override;
  Status Broadcast(Tensor* t, int root, cudaStream_t stream) override;
  Status Barrier() override;
  Status Abort() override;

  int rank() const override { return rank_; }
  int world_size() const override { return world_size_; }
  Backend backend() const override { return Backend::kMpi; }

 private:
  MpiCommunicator() = default;
  Status CheckUsable(const Tensor& t, const char* what) const;
  Status MpiOpFor(DType dtype, ReduceOp op, MPI_Op* out) const;
  // Divides by world size in place (the second half of kAvg).
  void DivideByWorld(Tensor* t) const;

  MPI_Comm comm_ = MPI_COMM_NULL;
  MPI_Op bf16_sum_ = MPI_OP_NULL;
  MPI_Op bf16_max_ = MPI_OP_NULL;
  int rank_ = 0;
  int world_size_ = 1;
  std::atomic<bool> aborted_{false};
};

}  // namespace dtrain::comm

#endif  // DT_HAVE_MPI
