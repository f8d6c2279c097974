#include "comm/communicator.h"

#include "comm/bootstrap.h"
#include "comm/mpi_communicator.h"
#include "comm/nccl_communicator.h"
#include "core/check.h"
#if DT_HAVE_MPI
#include "comm/mpi_check.h"
#endif

namespace dtrain::comm {

const char* ReduceOpName(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum:
      return "sum";
    case ReduceOp::kAvg:
      return "avg";
    case ReduceOp::kMax:
      return "max";
  }
  return "?";
}

const char* BackendName(Backend b) {
  switch (b) {
    case Backend::kMpi:
      return "mpi";
    case Backend::kNccl:
      return "nccl";
    case Backend::kTcp:
      return "tcp";
  }
  return "?";
}

Status ParseBackend(const std::string& name, Backend* out) {
  if (name == "mpi") {
    *out = Backend::kMpi;
  } else if (name == "nccl") {
    *out = Backend::kNccl;
  } else {
    return Status::InvalidArgument("unknown communication backend '" + name + "' (expected mpi or nccl)");
  }
  return Status::OK();
}

Status CreateCommunicator(Backend backend, const CommOptions& opts, std::unique_ptr<Communicator>* out) {
  if (backend == Backend::kTcp) {
    return Status::InvalidArgument(
        "CreateCommunicator: a tcp communicator comes from CreateCommunicatorsOverTcp "
        "(comm/tcp_bootstrap.h), after the rendezvous");
  }
  if (backend == Backend::kMpi) {
#if DT_HAVE_MPI
    std::unique_ptr<MpiCommunicator> c;
    DT_RETURN_IF_ERROR(MpiCommunicator::Create(&c));
    *out = std::move(c);
    return Status::OK();
#else
    return Status::Unavailable("the mpi backend was requested but dtrain was built with -DDT_WITH_MPI=OFF");
#endif
  }
#if DT_HAVE_CUDA
  int rank = 0;
  int world_size = 1;
#if DT_HAVE_MPI
  int initialized = 0;
  DT_MPI_CHECK(MPI_Initialized(&initialized));
  if (!initialized)
    return Status::FailedPrecondition("the nccl backend bootstraps over MPI: create an MpiSession first");
  DT_MPI_CHECK(MPI_Comm_rank(MPI_COMM_WORLD, &rank));
  DT_MPI_CHECK(MPI_Comm_size(MPI_COMM_WORLD, &world_size));
#endif
  ncclUniqueId id;
  DT_RETURN_IF_ERROR(ShareNcclUniqueId(&id));
  std::unique_ptr<NcclCommunicator> c;
  DT_RETURN_IF_ERROR(NcclCommunicator::Create(rank, world_size, id, opts.device, &c));
  *out = std::move(c);
  return Status::OK();
#else
  (void)opts;
  (void)out;
  return Status::Unavailable("the nccl backend was requested but dtrain was built without CUDA");
#endif
}

}  // namespace dtrain::comm
