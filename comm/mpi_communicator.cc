#if DT_HAVE_MPI
#include "comm/mpi_communicator.h"

#include <algorithm>
#include <climits>
#include <cstdint>
#include <cstring>

#include "comm/mpi_check.h"
#include "core/bf16.h"
#include "core/nvtx.h"

namespace dtrain::comm {
namespace {

// ---- bf16 reductions: MPI has no bf16 type; values travel as MPI_UINT16_T with these ops --------
// Each element is widened to f32, combined, and rounded back (NCCL does the same per hop).
void Bf16Sum(void* in, void* inout, int* len, MPI_Datatype* /*type*/) {
  const auto* a = static_cast<const uint16_t*>(in);
  auto* b = static_cast<uint16_t*>(inout);
  for (int i = 0; i < *len; ++i) b[i] = RoundBf16Rne(Bf16BitsToF32(a[i]) + Bf16BitsToF32(b[i]));
}

void Bf16Max(void* in, void* inout, int* len, MPI_Datatype* /*type*/) {
  const auto* a = static_cast<const uint16_t*>(in);
  auto* b = static_cast<uint16_t*>(inout);
  for (int i = 0; i < *len; ++i) b[i] = Bf16BitsToF32(a[i]) > Bf16BitsToF32(b[i]) ? a[i] : b[i];
}

Status MpiTypeFor(DType dtype, MPI_Datatype* out) {
  switch (dtype) {
    case DType::kF32:
      *out = MPI_FLOAT;
      return Status::OK();
    case DType::kF64:
      *out = MPI_DOUBLE;
      return Status::OK();
    case DType::kI32:
      *out = MPI_INT32_T;
      return Status::OK();
    case DType::kBF16:
      *out = MPI_UINT16_T;
      return Status::OK();
    default:
      break;
  }
  return Status::InvalidArgument(std::string("MPI communicator: unsupported dtype ") + DTypeName(dtype) +
                                 " (f32, f64, i32, bf16)");
}

int AsCount(int64_t n) { return static_cast<int>(n); }

// How a collective's `part` (one rank's share) and `whole` (world * part) buffers relate.
enum class Alias { kNone, kInPlace, kOther };

// kInPlace when `part` is exactly `whole`'s slice `rank` (NCCL's in-place convention), kOther for any
// other overlap (undefined by the contract; refused here).
Alias AliasOf(const Tensor& part, const Tensor& whole, int rank) {
  const auto* p = static_cast<const char*>(part.data());
  const auto* w = static_cast<const char*>(whole.data());
  if (p == nullptr || w == nullptr || p + part.nbytes() <= w || w + whole.nbytes() <= p) return Alias::kNone;
  return p == w + static_cast<size_t>(rank) * part.nbytes() ? Alias::kInPlace : Alias::kOther;
}

}  // namespace

Status MpiCommunicator::Create(std::unique_ptr<MpiCommunicator>* out) {
  int initialized = 0;
  DT_MPI_CHECK(MPI_Initialized(&initialized));
  if (!initialized) return Status::FailedPrecondition("MpiCommunicator: MPI is not initialised (comm::MpiSession)");
  std::unique_ptr<MpiCommunicator> c(new MpiCommunicator());  // private constructor
  DT_MPI_CHECK(MPI_Comm_dup(MPI_COMM_WORLD, &c->comm_));
  DT_MPI_CHECK(MPI_Comm_set_errhandler(c->comm_, MPI_ERRORS_RETURN));
  DT_MPI_CHECK(MPI_Comm_rank(c->comm_, &c->rank_));
  DT_MPI_CHECK(MPI_Comm_size(c->comm_, &c->world_size_));
  DT_MPI_CHECK(MPI_Op_create(&Bf16Sum, /*commute=*/1, &c->bf16_sum_));
  DT_MPI_CHECK(MPI_Op_create(&Bf16Max, /*commute=*/1, &c->bf16_max_));
  DT_LOG_DEBUG(kComm, "MPI communicator: rank {} of {}", c->rank_, c->world_size_);
  *out = std::move(c);
  return Status::OK();
}

MpiCommunicator::~MpiCommunicator() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (finalized) {
    if (comm_ != MPI_COMM_NULL) DT_LOG_WARN(kComm, "MpiCommunicator destroyed after MPI_Finalize; handles leaked");
    return;
  }
  if (bf16_sum_ != MPI_OP_NULL) MPI_Op_free(&bf16_sum_);
  if (bf16_max_ != MPI_OP_NULL) MPI_Op_free(&bf16_max_);
  if (comm_ != MPI_COMM_NULL) {
    const int rc = MPI_Comm_free(&comm_);
    if (rc != MPI_SUCCESS) DT_LOG_WARN(kComm, "MPI_Comm_free: {}", detail::MpiErrorString(rc));
  }
}

Status MpiCommunicator::CheckUsable(const Tensor& t, const char* what) const {
  if (aborted_.load()) return Status::Aborted(std::string("MPI communicator was aborted; ") + what + " refused");
  DT_CHECK_ARG(t.device() == DeviceType::kCPU, what << ": MPI communicator takes CPU tensors, got " << t.ToString());
  DT_CHECK_ARG(t.defined() || t.numel() == 0, what << ": undefined tensor");
  DT_CHECK_ARG(t.numel() <= INT_MAX, what << ": " << t.numel() << " elements exceed MPI's int count");
  MPI_Datatype type;
  return MpiTypeFor(t.dtype(), &type);
}

Status MpiCommunicator::MpiOpFor(DType dtype, ReduceOp op, MPI_Op* out) const {
  if (op == ReduceOp::kAvg && dtype == DType::kI32) {
    return Status::InvalidArgument("MPI communicator: average of i32 is not defined (use sum)");
  }
  const bool bf16 = dtype == DType::kBF16;
  *out = op == ReduceOp::kMax ? (bf16 ? bf16_max_ : MPI_MAX) : (bf16 ? bf16_sum_ : MPI_SUM);
  return Status::OK();
}

void MpiCommunicator::DivideByWorld(Tensor* t) const {
  const int64_t n = t->numel();
  switch (t->dtype()) {
    case DType::kF32: {
      const float inv = 1.0f / static_cast<float>(world_size_);
      float* p = t->data<float>();
      for (int64_t i = 0; i < n; ++i) p[i] *= inv;
      break;
    }
    case DType::kF64: {
      const double w = static_cast<double>(world_size_);
      double* p = t->data<double>();
      for (int64_t i = 0; i < n; ++i) p[i] /= w;
      break;
    }
    case DType::kBF16: {
      const float inv = 1.0f / static_cast<float>(world_size_);
      auto* p = static_cast<uint16_t*>(t->data());
      for (int64_t i = 0; i < n; ++i) p[i] = RoundBf16Rne(Bf16BitsToF32(p[i]) * inv);
      break;
    }
    default:
      break;  // i32 rejected by MpiOpFor
  }
}

Status MpiCommunicator::AllReduce(Tensor* t, ReduceOp op, cudaStream_t /*stream*/) {
  DT_NVTX_FN();
  DT_RETURN_IF_ERROR(CheckUsable(*t, "AllReduce"));
  MPI_Datatype type;
  MPI_Op mpi_op;
  DT_RETURN_IF_ERROR(MpiTypeFor(t->dtype(), &type));
  DT_RETURN_IF_ERROR(MpiOpFor(t->dtype(), op, &mpi_op));
  if (t->numel() == 0) return Status::OK();
  DT_MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, t->data(), AsCount(t->numel()), type, mpi_op, comm_));
  if (op == ReduceOp::kAvg) DivideByWorld(t);
  return Status::OK();
}

Status MpiCommunicator::ReduceScatter(const Tensor& in, Tensor* out, ReduceOp op, cudaStream_t /*stream*/) {
  DT_NVTX_FN();
  DT_RETURN_IF_ERROR(CheckUsable(in, "ReduceScatter"));
  DT_RETURN_IF_ERROR(CheckUsable(*out, "ReduceScatter"));
  DT_CHECK_ARG(in.dtype() == out->dtype(), "ReduceScatter: dtype " << in.ToString() << " vs " << out->ToString());
  DT_CHECK_ARG(in.numel() == out->numel() * world_size_, "ReduceScatter: input "
                                                             << in.ToString() << " must hold world_size ("
                                                             << world_size_ << ") x output " << out->ToString());
  MPI_Datatype type;
  MPI_Op mpi_op;
  DT_RETURN_IF_ERROR(MpiTypeFor(in.dtype(), &type));
  DT_RETURN_IF_ERROR(MpiOpFor(in.dtype(), op, &mpi_op));
  if (out->numel() == 0) return Status::OK();
  const Alias alias = AliasOf(*out, in, rank_);
  DT_CHECK_ARG(alias != Alias::kOther, "ReduceScatter: output "
                                           << out->ToString() << " overlaps the input other than as its slice " << rank_
                                           << " (in place)");
  if (alias == Alias::kInPlace) {
    // MPI's in-place form reads `in` and writes the result at the START of it, not at this rank's
    // slice as NCCL does: move it there (slice 0 of `in` is left unspecified, as NCCL leaves the rest).
    DT_MPI_CHECK(MPI_Reduce_scatter_block(MPI_IN_PLACE, in.data(), AsCount(out->numel()), type, mpi_op, comm_));
    if (rank_ != 0) std::memcpy(out->data(), in.data(), out->nbytes());  // disjoint: slice 0 vs slice rank
  } else {
    DT_MPI_CHECK(MPI_Reduce_scatter_block(in.data(), out->data(), AsCount(out->numel()), type, mpi_op, comm_));
  }
  if (op == ReduceOp::kAvg) DivideByWorld(out);
  return Status::OK();
}

Status MpiCommunicator::AllGather(const Tensor& in, Tensor* out, cudaStream_t /*stream*/) {
  DT_NVTX_FN();
  DT_RETURN_IF_ERROR(CheckUsable(in, "AllGather"));
  DT_RETURN_IF_ERROR(CheckUsable(*out, "AllGather"));
  DT_CHECK_ARG(in.dtype() == out->dtype(), "AllGather: dtype " << in.ToString() << " vs " << out->ToString());
  DT_CHECK_ARG(out->numel() == in.numel() * world_size_, "AllGather: output "
                                                             << out->ToString() << " must hold world_size ("
                                                             << world_size_ << ") x input " << in.ToString());
  MPI_Datatype type;
  DT_RETURN_IF_ERROR(MpiTypeFor(in.dtype(), &type));
  if (in.numel() == 0) return Status::OK();
  const Alias alias = AliasOf(in, *out, rank_);
  DT_CHECK_ARG(alias != Alias::kOther, "AllGather: input " << in.ToString()
                                                           << " overlaps the output other than as its slice " << rank_
                                                           << " (in place)");
  // In place, MPI takes this rank's contribution from its slice of the output: NCCL's convention.
  const void* send = alias == Alias::kInPlace ? MPI_IN_PLACE : in.data();
  DT_MPI_CHECK(MPI_Allgather(send, AsCount(in.numel()), type, out->data(), AsCount(in.numel()), type, comm_));
  return Status::OK();
}

Status MpiCommunicator::Broadcast(Tensor* t, int root, cudaStream_t /*stream*/) {
  DT_NVTX_FN();
  DT_RETURN_IF_ERROR(CheckUsable(*t, "Broadcast"));
  DT_CHECK_ARG(root >= 0 && root < world_size_, "Broadcast: root " << root << " not in [0, " << world_size_ << ")");
  MPI_Datatype type;
  DT_RETURN_IF_ERROR(MpiTypeFor(t->dtype(), &type));
  if (t->numel() == 0) return Status::OK();
  DT_MPI_CHECK(MPI_Bcast(t->data(), AsCount(t->numel()), type, root, comm_));
  return Status::OK();
}

Status MpiCommunicator::Barrier() {
  DT_NVTX_FN();
  if (aborted_.load()) return Status::Aborted("MPI communicator was aborted; Barrier refused");
  DT_MPI_CHECK(MPI_Barrier(comm_));
  return Status::OK();
}

Status MpiCommunicator::Abort() {
  if (!aborted_.exchange(true)) DT_LOG_WARN(kComm, "MPI communicator aborted on rank {}", rank_);
  return Status::OK();
}

}  // namespace dtrain::comm
#endif  // DT_HAVE_MPI
