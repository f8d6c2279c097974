#pragma once
// Bootstrap without MPI: the communicators of a worker that no process manager started — a Kubernetes
// PyTorchJob or a per-node launcher that sets only torchrun's RANK/WORLD_SIZE/MASTER_ADDR/MASTER_PORT.
//
// CreateCommunicatorsOverTcp, on every rank, collective:
//   1. refuses the CPU path at once (InvalidArgument, before any connection): CPU gradients are reduced
//      with MPI, which these processes cannot form without mpirun/srun;
//   2. RendezvousTcp on MASTER_ADDR:MASTER_PORT (comm/tcp_rendezvous.h), with the job secret from
//      DTRAIN_JOB_SECRET or DTRAIN_JOB_SECRET_FILE (comm/job_secret.h; `dtrain launch` sets the first for its
//      workers; a Kubernetes job mounts a Secret and sets one of them): InvalidArgument without it;
//   3. host_comm = TcpCommunicator over the rendezvous' links (loss, accuracy, preemption agreement);
//   4. rank 0 creates the ncclUniqueId; host_comm->Broadcast hands it, with its success, to every rank
//      (a failure on rank 0 is an error everywhere, not a hang);
//   5. nccl_comm = NcclCommunicator(rank, world, id, device): the gradient communicator.
// Built without CUDA, the GPU path is Unavailable (before step 2). Ownership: the caller owns both communicators and
// destroys nccl_comm first. Not thread-safe; call once from the main thread.

#include <memory>

#include "comm/communicator.h"
#include "comm/dist_env.h"
#include "core/status.h"

namespace dtrain::comm {

struct TcpBootstrapOptions {
  bool cuda = false;                   // train.device is cuda: the gradient path is NCCL
  int device = 0;                      // this rank's CUDA device
  double rendezvous_timeout_s = 300;   // how long ranks wait for each other at start
  double collective_timeout_s = 1800;  // per host collective (TcpCommOptions)
};

// True when `env` came from torchrun's variables with more than one rank and this process is not one
// of an MPI world of that size: no process manager variables at all (OMPI_COMM_WORLD_SIZE, PMI_SIZE,
// PMIX_RANK, PMI_RANK), or a process manager world of another size (`srun torchrun ...`: one task per
// node, SLURM_NTASKS of them). Such a worker bootstraps over TCP, not MPI. Reads this process's
// environment.
bool NeedsTcpBootstrap(const DistEnv& env);

// Steps 1-5 above for rank env.rank of env.world_size (> 1) at env.master_addr:env.master_port.
Status CreateCommunicatorsOverTcp(const DistEnv& env, const TcpBootstrapOptions& opts,
                                  std::unique_ptr<Communicator>* host_comm, std::unique_ptr<Communicator>* nccl_comm);

}  // namespace dtrain::comm
