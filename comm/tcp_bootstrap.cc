#include "comm/tcp_bootstrap.h"

#include <cstdlib>
#include <cstring>
#include <string>

#include "comm/job_secret.h"
#include "comm/nccl_communicator.h"
#include "comm/tcp_communicator.h"
#include "comm/tcp_rendezvous.h"
#include "core/check.h"
#if DT_HAVE_CUDA
#include "comm/nccl_check.h"
#endif

namespace dtrain::comm {
namespace {

#if DT_HAVE_CUDA
// Step 4: rank 0's id and whether creating it worked, in one broadcast.
Status ShareNcclIdOverTcp(Communicator* host, ncclUniqueId* id) {
  struct Payload {
    int32_t ok;
    ncclUniqueId id;
  } payload;
  std::memset(&payload, 0, sizeof(payload));
  Status created;
  if (host->rank() == 0) {
    created = [&]() -> Status {
      DT_NCCL_CHECK(ncclGetUniqueId(&payload.id));
      return Status::OK();
    }();
    payload.ok = created.ok() ? 1 : 0;
  }
  Tensor t = Tensor::Wrap(&payload, {static_cast<int64_t>(sizeof(payload))}, DType::kU8, DeviceType::kCPU);
  DT_RETURN_IF_ERROR(host->Broadcast(&t, 0, nullptr));
  if (!created.ok()) return created;
  if (!payload.ok) return Status::Unavailable("rank 0 could not create the ncclUniqueId (see rank 0's log)");
  *id = payload.id;
  return Status::OK();
}
#endif

}  // namespace

bool NeedsTcpBootstrap(const DistEnv& env) {
  if (env.source != "torchrun" || env.world_size <= 1) return false;
  // The size of the world a process manager made, if one started this process: Open MPI's, PMI's, or
  // (PMIx under srun) the Slurm step's. 0: no process manager; -1: one whose size is not known.
  auto size_of = [](const char* var) {
    const char* v = std::getenv(var);
    return v == nullptr ? -1 : std::atoi(v);
  };
  int pm_size = 0;
  if (std::getenv("OMPI_COMM_WORLD_SIZE") != nullptr) {
    pm_size = size_of("OMPI_COMM_WORLD_SIZE");
  } else if (std::getenv("PMI_SIZE") != nullptr) {
    pm_size = size_of("PMI_SIZE");
  } else if (std::getenv("PMIX_RANK") != nullptr || std::getenv("PMI_RANK") != nullptr) {
    pm_size = size_of("SLURM_NTASKS");
  }
  // An MPI world of exactly WORLD_SIZE processes (mpirun -np N with RANK exported) is joined over MPI;
  // one of another size (`srun torchrun`: one task per node, torchrun's workers below it) is not ours.
  return pm_size == 0 || (pm_size > 0 && pm_size != env.world_size);
}

Status CreateCommunicatorsOverTcp(const DistEnv& env, const TcpBootstrapOptions& opts,
                                  std::unique_ptr<Communicator>* host_comm, std::unique_ptr<Communicator>* nccl_comm) {
  if (!opts.cuda) {
    return Status::InvalidArgument(
        "rank " + std::to_string(env.rank) + ": train.device cpu with WORLD_SIZE=" + std::to_string(env.world_size) +
        " reduces gradients with MPI, but this worker was started without a process manager (only torchrun's "
        "RANK/WORLD_SIZE are set): start the workers with `dtrain launch`, mpirun or srun --mpi=pmix, or train on "
        "GPUs (train.device: cuda), whose torchrun-style start needs no MPI");
  }
#if !DT_HAVE_CUDA
  (void)host_comm;
  (void)nccl_comm;
  return Status::Unavailable("train.device cuda was requested but dtrain was built without CUDA");
#else
  RendezvousOptions ro;
  // The job secret that `dtrain launch` exports, or DTRAIN_JOB_SECRET[_FILE] set by whoever started the workers.
  Status secret = JobSecret::Resolve("", /*may_generate=*/false, &ro.secret, nullptr);
  if (!secret.ok()) {
    return Status::InvalidArgument("rank " + std::to_string(env.rank) + ": the TCP rendezvous at " + env.master_addr +
                                   ":" + std::to_string(env.master_port) +
                                   " admits only processes of this job: " + secret.message());
  }
  ro.master_addr = env.master_addr;
  ro.master_port = env.master_port;
  ro.rank = env.rank;
  ro.world_size = env.world_size;
  ro.timeout_s = opts.rendezvous_timeout_s;
  StarLinks links;
  DT_RETURN_IF_ERROR(RendezvousTcp(ro, &links));
  TcpCommOptions co;
  co.collective_timeout_s = opts.collective_timeout_s;
  std::unique_ptr<TcpCommunicator> host;
  DT_RETURN_IF_ERROR(TcpCommunicator::Create(std::move(links), co, &host));
  ncclUniqueId id;
  DT_RETURN_IF_ERROR(ShareNcclIdOverTcp(host.get(), &id));
  std::unique_ptr<NcclCommunicator> nccl;
  DT_RETURN_IF_ERROR(NcclCommunicator::Create(env.rank, env.world_size, id, opts.device, &nccl));
  *host_comm = std::move(host);
  *nccl_comm = std::move(nccl);
  return Status::OK();
#endif
}

}  // namespace dtrain::comm
