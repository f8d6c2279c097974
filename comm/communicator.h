#pragma once
// Communicator: the collective operations dtrain needs, over one group of worker processes.
//
// Implementations (one factory, CreateCommunicator):
//   MpiCommunicator  (comm/mpi_communicator.h)  CPU tensors, Open MPI between real processes.
//   NcclCommunicator (comm/nccl_communicator.h) CUDA tensors, NCCL; bootstrapped over MPI.
// Without MPI (workers started torchrun-style), comm/tcp_bootstrap.h makes a TcpCommunicator (host
// scalars, CPU) and an NcclCommunicator bootstrapped over the TCP rendezvous instead.
//
// Stream semantics. Every collective takes a `stream`:
//   - NCCL: the collective is ENQUEUED on `stream` and the call returns at once (asynchronous with
//     respect to the host). Buffers must stay alive and unmodified until `stream` passes the op;
//     order it against other streams with events. Barrier() is the exception: it blocks the host.
//   - MPI: `stream` is ignored; the call blocks until the result is in place. CPU tensors only.
// Every rank must issue the same collectives, with the same sizes/dtypes, in the same order.
//
// Shapes: AllReduce and Broadcast work in place on `t`. AllGather: out.numel == world * in.numel,
// rank r's input lands at out[r * in.numel, ...). ReduceScatter: in.numel == world * out.numel, rank r
// receives the reduction of in[r * out.numel, ...). Tensors must be contiguous (all dtrain tensors are).
// ReduceScatter/AllGather may run in place: out (in) aliasing in's (out's) slice `rank`, NCCL's
// convention; any other overlap is undefined (MPI refuses it with InvalidArgument). An in-place
// ReduceScatter leaves the rest of `in` unspecified.
//
// Errors: a failure returns a non-OK Status; after an NCCL error the communicator is aborted first.
// Once Abort() has run, every call returns Aborted.
//
// Thread-safety: collectives from ONE thread. Abort() and CheckAsyncError() may be called from any
// other thread (a watchdog) while a collective is blocked.
// Ownership: the communicator owns its MPI communicator / NCCL communicator; it does not own tensors.

#include <memory>
#include <string>

#include "core/cuda_fwd.h"
#include "core/status.h"
#include "core/tensor.h"

namespace dtrain::comm {

enum class ReduceOp { kSum, kAvg, kMax };
enum class Backend { kMpi, kNccl, kTcp };  // kTcp: host scalars only (comm/tcp_communicator.h)

const char* ReduceOpName(ReduceOp op);
const char* BackendName(Backend b);
// "mpi" | "nccl" (case-sensitive, as written in configs).
Status ParseBackend(const std::string& name, Backend* out);

class Communicator {
 public:
  virtual ~Communicator() = default;

  virtual Status AllReduce(Tensor* t, ReduceOp op, cudaStream_t stream) = 0;
  virtual Status ReduceScatter(const Tensor& in, Tensor* out, ReduceOp op, cudaStream_t stream) = 0;
  virtual Status AllGather(const Tensor& in, Tensor* out, cudaStream_t stream) = 0;
  virtual Status Broadcast(Tensor* t, int root, cudaStream_t stream) = 0;
  // Returns when every rank has entered the barrier (blocks the host on both backends).
  virtual Status Barrier() = 0;

  // Collectives issued between GroupStart() and GroupEnd() are fused into one launch (NCCL
  // ncclGroupStart/End: nothing is enqueued on a stream until GroupEnd). MPI runs each call at once.
  virtual Status GroupStart() { return Status::OK(); }
  virtual Status GroupEnd() { return Status::OK(); }

  // Tears the communicator down so that this rank stops waiting on peers: NCCL ncclCommAbort
  // (unblocks a hung collective). MPI cannot interrupt a blocked call from inside the process; it
  // marks the communicator aborted, and the process manager (mpirun/srun) ends the job when this
  // rank exits. Idempotent.
  virtual Status Abort() = 0;
  // Polls for an asynchronous failure (NCCL: ncclCommGetAsyncError, e.g. a peer died) without
  // blocking; OK when healthy. Cheap enough to call from a watchdog every few hundred ms.
  virtual Status CheckAsyncError() { return Status::OK(); }

  virtual int rank() const = 0;
  virtual int world_size() const = 0;
  virtual Backend backend() const = 0;
  // The device whose tensors this communicator reduces.
  DeviceType device_type() const { return backend() == Backend::kNccl ? DeviceType::kCUDA : DeviceType::kCPU; }
};

struct CommOptions {
  // NCCL: the CUDA device of this rank (usually the local rank); must already be current or is set.
  int device = 0;
};

// Creates a communicator over MPI_COMM_WORLD. Needs MPI initialised (comm::MpiSession) for both
// backends: NCCL shares its ncclUniqueId over MPI_Bcast. Unavailable when the backend was not built;
// InvalidArgument for kTcp (made by comm/tcp_bootstrap.h, which needs the rendezvous address).
Status CreateCommunicator(Backend backend, const CommOptions& opts, std::unique_ptr<Communicator>* out);

}  // namespace dtrain::comm
