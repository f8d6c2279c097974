#include "comm/bootstrap.h"

#include <cstring>

#include "core/check.h"
#if DT_HAVE_MPI
#include "comm/mpi_check.h"
#endif
#if DT_HAVE_CUDA
#include "comm/nccl_check.h"
#endif

namespace dtrain::comm {

Status MpiSession::Init(int* argc, char*** argv, std::unique_ptr<MpiSession>* out) {
  std::unique_ptr<MpiSession> s(new MpiSession());  // private constructor
#if DT_HAVE_MPI
  int initialized = 0;
  DT_MPI_CHECK(MPI_Initialized(&initialized));
  if (!initialized) {
    int provided = 0;
    // MULTIPLE: the collective watchdog's thread talks MPI while the main thread may be blocked in
    // a collective (comm/watchdog.h). With less, the watchdog still fires but cannot name the
    // ranks that did not arrive.
    DT_MPI_CHECK(MPI_Init_thread(argc, argv, MPI_THREAD_MULTIPLE, &provided));
    s->owns_mpi_ = true;
    if (provided < MPI_THREAD_MULTIPLE) {
      DT_LOG_WARN(kComm, "MPI provides thread level {} < MPI_THREAD_MULTIPLE: the watchdog will not name missing ranks",
                  provided);
    }
  }
  DT_MPI_CHECK(MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN));
  DT_MPI_CHECK(MPI_Comm_rank(MPI_COMM_WORLD, &s->rank_));
  DT_MPI_CHECK(MPI_Comm_size(MPI_COMM_WORLD, &s->world_size_));
  MPI_Comm node = MPI_COMM_NULL;
  DT_MPI_CHECK(MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, s->rank_, MPI_INFO_NULL, &node));
  const int rc_rank = MPI_Comm_rank(node, &s->local_rank_);
  const int rc_size = MPI_Comm_size(node, &s->local_world_size_);
  DT_MPI_CHECK(MPI_Comm_free(&node));
  DT_MPI_CHECK(rc_rank);
  DT_MPI_CHECK(rc_size);
  DT_LOG_DEBUG(kComm, "MPI session: rank {}/{} local {}/{}", s->rank_, s->world_size_, s->local_rank_,
               s->local_world_size_);
#else
  (void)argc;
  (void)argv;
#endif
  *out = std::move(s);
  return Status::OK();
}

MpiSession::~MpiSession() {
#if DT_HAVE_MPI
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (owns_mpi_ && !finalized) {
    const int rc = MPI_Finalize();
    if (rc != MPI_SUCCESS) DT_LOG_WARN(kComm, "MPI_Finalize: {}", detail::MpiErrorString(rc));
  }
#endif
}

#if DT_HAVE_CUDA
Status ShareNcclUniqueId(ncclUniqueId* id) {
#if DT_HAVE_MPI
  // 1. Rank 0 creates the id and records whether that worked.
  // 2. One MPI_Bcast carries {ok, id} to everyone, so no rank waits for an id that never comes.
  struct Payload {
    int32_t ok;
    ncclUniqueId id;
  } payload;
  std::memset(&payload, 0, sizeof(payload));
  int rank = 0;
  DT_MPI_CHECK(MPI_Comm_rank(MPI_COMM_WORLD, &rank));
  Status created;
  if (rank == 0) {
    created = [&]() -> Status {
      DT_NCCL_CHECK(ncclGetUniqueId(&payload.id));
      return Status::OK();
    }();
    payload.ok = created.ok() ? 1 : 0;
  }
  DT_MPI_CHECK(MPI_Bcast(&payload, sizeof(payload), MPI_BYTE, 0, MPI_COMM_WORLD));
  if (!created.ok()) return created;
  if (!payload.ok) return Status::Unavailable("rank 0 could not create the ncclUniqueId (see rank 0's log)");
  *id = payload.id;
  return Status::OK();
#else
  DT_NCCL_CHECK(ncclGetUniqueId(id));
  return Status::OK();
#endif
}
#endif

}  // namespace dtrain::comm
