#if DT_HAVE_CUDA
#include "comm/nccl_communicator.h"

#include "comm/nccl_check.h"
#include "comm/nccl_features.h"
#include "core/cuda_check.h"
#include "core/device_context.h"
#include "core/nvtx.h"

namespace dtrain::comm {
namespace {

Status NcclTypeFor(DType dtype, ncclDataType_t* out) {
  switch (dtype) {
    case DType::kF32:
      *out = ncclFloat32;
      return Status::OK();
    case DType::kBF16:
      *out = ncclBfloat16;
      return Status::OK();
    case DType::kF16:
      *out = ncclFloat16;
      return Status::OK();
    case DType::kF64:
      *out = ncclFloat64;
      return Status::OK();
    case DType::kI32:
      *out = ncclInt32;
      return Status::OK();
    case DType::kU8:
      *out = ncclUint8;
      return Status::OK();
  }
  return Status::InvalidArgument("NCCL communicator: unsupported dtype");
}

Status NcclOpFor(DType dtype, ReduceOp op, ncclRedOp_t* out) {
  switch (op) {
    case ReduceOp::kSum:
      *out = ncclSum;
      return Status::OK();
    case ReduceOp::kMax:
      *out = ncclMax;
      return Status::OK();
    case ReduceOp::kAvg:
      if (dtype == DType::kI32 || dtype == DType::kU8) {
        return Status::InvalidArgument(std::string("NCCL communicator: average of ") + DTypeName(dtype) +
                                       " is not defined (use sum)");
      }
      *out = ncclAvg;
      return Status::OK();
  }
  return Status::InvalidArgument("NCCL communicator: unknown reduce op");
}

}  // namespace

// ---- NcclComm --------------------------------------------------------------------------------

Status NcclComm::Create(int rank, int world_size, const ncclUniqueId& id, NcclComm* out) {
  NcclComm c;
  DT_NCCL_CHECK(ncclCommInitRank(&c.comm_, world_size, id, rank));
  *out = std::move(c);
  return Status::OK();
}

NcclComm::~NcclComm() { Destroy(); }

NcclComm::NcclComm(NcclComm&& o) noexcept : comm_(o.comm_), aborted_(o.aborted_.load()) { o.comm_ = nullptr; }

NcclComm& NcclComm::operator=(NcclComm&& o) noexcept {
  if (this != &o) {
    Destroy();
    comm_ = o.comm_;
    aborted_.store(o.aborted_.load());
    o.comm_ = nullptr;
  }
  return *this;
}

void NcclComm::Destroy() {
  if (comm_ == nullptr || aborted_.load()) return;  // ncclCommAbort already freed it
#if DT_NCCL_HAS_COMM_FINALIZE
  // Finalize flushes queued operations so that destroy does not free resources still in use.
  ncclResult_t r = ncclCommFinalize(comm_);
  if (r != ncclSuccess) DT_LOG_WARN(kComm, "ncclCommFinalize: {}", ncclGetErrorString(r));
#endif
  ncclResult_t d = ncclCommDestroy(comm_);
  if (d != ncclSuccess) DT_LOG_WARN(kComm, "ncclCommDestroy: {}", ncclGetErrorString(d));
  comm_ = nullptr;
}

Status NcclComm::Abort() {
  if (comm_ == nullptr || aborted_.exchange(true)) return Status::OK();
  DT_NCCL_CHECK(ncclCommAbort(comm_));
  return Status::OK();
}

Status NcclComm::AsyncError() const {
  if (aborted_.load()) return Status::Aborted("NCCL communicator was aborted");
  if (comm_ == nullptr) return Status::FailedPrecondition("NCCL communicator not created");
  ncclResult_t async = ncclSuccess;
  DT_NCCL_CHECK(ncclCommGetAsyncError(comm_, &async));
  if (async != ncclSuccess && async != ncclInProgress) {
    return Status::Unavailable(std::string("NCCL asynchronous error: ") + ncclGetErrorString(async) + " (" +
                               ncclGetLastError(comm_) + ")");
  }
  return Status::OK();
}

// ---- NcclCommunicator ------------------------------------------------------------------------

Status NcclCommunicator::Create(int rank, int world_size, const ncclUniqueId& id, int device,
                                std::unique_ptr<NcclCommunicator>* out) {
  DT_CHECK_ARG(world_size > 0 && rank >= 0 && rank < world_size, "rank " << rank << " of " << world_size);
  const int n = CudaDeviceCount();
  if (device < 0 || device >= n) {
    return Status::Unavailable("NCCL communicator: GPU " + std::to_string(device) + " requested but " +
                               std::to_string(n) + " CUDA device(s) are visible");
  }
  DT_CUDA_CHECK(cudaSetDevice(device));
  std::unique_ptr<NcclCommunicator> c(new NcclCommunicator());  // private constructor
  c->rank_ = rank;
  c->world_size_ = world_size;
  c->device_ = device;
  DT_RETURN_IF_ERROR(CudaStream::Create(&c->barrier_stream_));
  DT_CUDA_CHECK(cudaMalloc(reinterpret_cast<void**>(&c->barrier_scratch_), sizeof(float)));
  DT_RETURN_IF_ERROR(NcclComm::Create(rank, world_size, id, &c->comm_));
  DT_LOG_DEBUG(kComm, "NCCL {}.{}.{} communicator: rank {} of {} on GPU {}", NCCL_MAJOR, NCCL_MINOR, NCCL_PATCH, rank,
               world_size, device);
  *out = std::move(c);
  return Status::OK();
}

NcclCommunicator::~NcclCommunicator() {
  if (barrier_scratch_ != nullptr) {
    // Barrier() waited for its stream, so nothing still reads the scratch.
    cudaError_t e = cudaFree(barrier_scratch_);
    if (e != cudaSuccess) DT_LOG_WARN(kComm, "cudaFree(barrier scratch): {}", cudaGetErrorString(e));
  }
}

Status NcclCommunicator::CheckUsable(const Tensor& t, const char* what) const {
  if (comm_.aborted()) return Status::Aborted(std::string("NCCL communicator was aborted; ") + what + " refused");
  DT_CHECK_ARG(t.is_cuda(), what << ": NCCL communicator takes CUDA tensors, got " << t.ToString());
  DT_CHECK_ARG(t.defined() || t.numel() == 0, what << ": undefined tensor");
  ncclDataType_t type;
  return NcclTypeFor(t.dtype(), &type);
}

Status NcclCommunicator::AbortOnError(Status st) {
  if (!st.ok()) {
    DT_LOG_ERROR(kComm, "rank {}: {}; aborting the NCCL communicator", rank_, st.ToString());
    Status a = comm_.Abort();
    if (!a.ok()) DT_LOG_WARN(kComm, "ncclCommAbort after error: {}", a.ToString());
  }
  return st;
}

Status NcclCommunicator::EnqueueAllReduce(Tensor* t, ReduceOp op, cudaStream_t stream) {
  ncclDataType_t type;
  ncclRedOp_t nccl_op;
  DT_RETURN_IF_ERROR(NcclTypeFor(t->dtype(), &type));
  DT_RETURN_IF_ERROR(NcclOpFor(t->dtype(), op, &nccl_op));
  DT_NCCL_CHECK(
      ncclAllReduce(t->data(), t->data(), static_cast<size_t>(t->numel()), type, nccl_op, comm_.get(), stream));
  return Status::OK();
}

Status NcclCommunicator::AllReduce(Tensor* t, ReduceOp op, cudaStream_t stream) {
  DT_NVTX_FN();
  DT_RETURN_IF_ERROR(CheckUsable(*t, "AllReduce"));
  if (t->numel() == 0) return Status::OK();
  return AbortOnError(EnqueueAllReduce(t, op, stream));
}

Status NcclCommunicator::EnqueueReduceScatter(const Tensor& in, Tensor* out, ReduceOp op, cudaStream_t stream) {
  ncclDataType_t type;
  ncclRedOp_t nccl_op;
  DT_RETURN_IF_ERROR(NcclTypeFor(in.dtype(), &type));
  DT_RETURN_IF_ERROR(NcclOpFor(in.dtype(), op, &nccl_op));
  DT_NCCL_CHECK(
      ncclReduceScatter(in.data(), out->data(), static_cast<size_t>(out->numel()), type, nccl_op, comm_.get(), stream));
  return Status::OK();
}

Status NcclCommunicator::ReduceScatter(const Tensor& in, Tensor* out, ReduceOp op, cudaStream_t stream) {
  DT_NVTX_FN();
  DT_RETURN_IF_ERROR(CheckUsable(in, "ReduceScatter"));
  DT_RETURN_IF_ERROR(CheckUsable(*out, "ReduceScatter"));
  DT_CHECK_ARG(in.dtype() == out->dtype(), "ReduceScatter: dtype " << in.ToString() << " vs " << out->ToString());
  DT_CHECK_ARG(in.numel() == out->numel() * world_size_, "ReduceScatter: input "
                                                             << in.ToString() << " must hold world_size ("
                                                             << world_size_ << ") x output " << out->ToString());
  if (out->numel() == 0) return Status::OK();
  return AbortOnError(EnqueueReduceScatter(in, out, op, stream));
}

Status NcclCommunicator::AllGather(const Tensor& in, Tensor* out, cudaStream_t stream) {
  DT_NVTX_FN();
  DT_RETURN_IF_ERROR(CheckUsable(in, "AllGather"));
  DT_RETURN_IF_ERROR(CheckUsable(*out, "AllGather"));
  DT_CHECK_ARG(in.dtype() == out->dtype(), "AllGather: dtype " << in.ToString() << " vs " << out->ToString());
  DT_CHECK_ARG(out->numel() == in.numel() * world_size_, "AllGather: output "
                                                             << out->ToString() << " must hold world_size ("
                                                             << world_size_ << ") x input " << in.ToString());
  if (in.numel() == 0) return Status::OK();
  ncclDataType_t type;
  DT_RETURN_IF_ERROR(NcclTypeFor(in.dtype(), &type));
  return AbortOnError([&]() -> Status {
    DT_NCCL_CHECK(ncclAllGather(in.data(), out->data(), static_cast<size_t>(in.numel()), type, comm_.get(), stream));
    return Status::OK();
  }());
}

Status NcclCommunicator::Broadcast(Tensor* t, int root, cudaStream_t stream) {
  DT_NVTX_FN();
  DT_RETURN_IF_ERROR(CheckUsable(*t, "Broadcast"));
  DT_CHECK_ARG(root >= 0 && root < world_size_, "Broadcast: root " << root << " not in [0, " << world_size_ << ")");
  if (t->numel() == 0) return Status::OK();
  ncclDataType_t type;
  DT_RETURN_IF_ERROR(NcclTypeFor(t->dtype(), &type));
  return AbortOnError([&]() -> Status {
    DT_NCCL_CHECK(
        ncclBroadcast(t->data(), t->data(), static_cast<size_t>(t->numel()), type, root, comm_.get(), stream));
    return Status::OK();
  }());
}

Status NcclCommunicator::Barrier() {
  DT_NVTX_FN();
  if (comm_.aborted()) return Status::Aborted("NCCL communicator was aborted; Barrier refused");
  return AbortOnError([&]() -> Status {
    DT_NCCL_CHECK(
        ncclAllReduce(barrier_scratch_, barrier_scratch_, 1, ncclFloat32, ncclSum, comm_.get(), barrier_stream_.get()));
    // Host sync on purpose: a barrier returns only when every rank has reached it.
    DT_CUDA_CHECK(cudaStreamSynchronize(barrier_stream_.get()));
    return Status::OK();
  }());
}

Status NcclCommunicator::GroupStart() {
  DT_NCCL_CHECK(ncclGroupStart());
  return Status::OK();
}

Status NcclCommunicator::GroupEnd() {
  return AbortOnError([&]() -> Status {
    DT_NCCL_CHECK(ncclGroupEnd());
    return Status::OK();
  }());
}

Status NcclCommunicator::Abort() {
  if (!comm_.aborted()) DT_LOG_WARN(kComm, "NCCL communicator aborted on rank {}", rank_);
  return comm_.Abort();
}

Status NcclCommunicator::CheckAsyncError() {
  Status st = comm_.AsyncError();
  if (st.code() == Status::Code::kAborted) return st;
  return AbortOnError(st);
}

}  // namespace dtrain::comm
#endif  // DT_HAVE_CUDA
