#pragma once
// Bootstrap: MPI process setup and the NCCL rendezvous over MPI.
//
// Workers are started by `mpirun` (one node too) or `srun --mpi=pmix`. Each worker:
//   1. MpiSession::Init          -> MPI_Init_thread; rank, world size, node-local rank from MPI.
//   2. ShareNcclUniqueId         -> rank 0 creates the ncclUniqueId, MPI_Bcast hands it to all ranks.
//   3. NcclCommunicator::Create  -> ncclCommInitRank with that id (comm/nccl_communicator.h).
//
// Built without MPI (-DDT_WITH_MPI=OFF), MpiSession describes a single-process world (rank 0 of 1).
// Ownership: exactly one MpiSession per process, created first in main and destroyed last — every
// Communicator must be destroyed before it (MPI objects cannot be freed after MPI_Finalize).
// Not thread-safe; call from the main thread.

#include <memory>

#include "core/status.h"
#if DT_HAVE_CUDA
#include <nccl.h>
#endif

namespace dtrain::comm {

class MpiSession {
 public:
  // Initialises MPI (thread level MPI_THREAD_MULTIPLE, so that the collective watchdog's thread can
  // track which ranks arrived while the main thread is blocked in a collective) and sets MPI_ERRORS_RETURN on
  // MPI_COMM_WORLD. If MPI is already initialised (by a test harness, say) the session adopts it and will not finalize
  // it. argc/argv may be null.
  static Status Init(int* argc, char*** argv, std::unique_ptr<MpiSession>* out);
  // MPI_Finalize when this session initialised MPI (unless SkipFinalize() was called).
  ~MpiSession();
  // After a fatal error on this rank: the destructor will not call MPI_Finalize, which would wait
  // for peers that may be blocked in a collective this rank never joins. The process then exits
  // with its error and the process manager (mpirun, srun) ends the job.
  void SkipFinalize() { owns_mpi_ = false; }
  MpiSession(const MpiSession&) = delete;
  MpiSession& operator=(const MpiSession&) = delete;

  int rank() const { return rank_; }
  int world_size() const { return world_size_; }
  // Rank and size within this node (MPI_COMM_TYPE_SHARED): the GPU index to use.
  int local_rank() const { return local_rank_; }
  int local_world_size() const { return local_world_size_; }

 private:
  MpiSession() = default;
  bool owns_mpi_ = false;
  int rank_ = 0;
  int world_size_ = 1;
  int local_rank_ = 0;
  int local_world_size_ = 1;
};

#if DT_HAVE_CUDA
// Collective over MPI_COMM_WORLD: rank 0 calls ncclGetUniqueId and broadcasts it, with its success,
// so a failure on rank 0 becomes an error on every rank instead of a hang. Without MPI (single
// process) it just creates the id.
Status ShareNcclUniqueId(ncclUniqueId* id);
#endif

}  // namespace dtrain::comm
