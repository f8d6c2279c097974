#include "comm/tcp_communicator.h"

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstring>

#include "comm/tcp_wire.h"
#include "core/check.h"
#include "core/nvtx.h"

namespace dtrain::comm {
namespace {

using detail::GetU32;
using detail::GetU64;
using detail::PutU32;
using detail::PutU64;

constexpr uint32_t kMagic = 0x4454434du;  // "DTCM"
constexpr size_t kRequestBytes = 32;      // magic, kind, arg, dtype, seq, bytes
constexpr size_t kReplyBytes = 16;        // magic, code (0 ok, 1 error), bytes of data or message that follow
constexpr uint64_t kMaxMessageBytes = 1 << 16;

enum Kind : uint32_t { kAllReduce = 1, kBroadcast = 2, kBarrier = 3 };

const char* KindName(uint32_t k) {
  switch (k) {
    case kAllReduce:
      return "AllReduce";
    case kBroadcast:
      return "Broadcast";
    case kBarrier:
      return "Barrier";
    default:
      return "unknown collective";
  }
}

template <typename T>
void Combine(T* acc, const T* x, size_t n, ReduceOp op) {
  if (op == ReduceOp::kMax) {
    for (size_t i = 0; i < n; ++i) acc[i] = std::max(acc[i], x[i]);
  } else {
    for (size_t i = 0; i < n; ++i) acc[i] += x[i];
  }
}

template <typename T>
void Divide(T* acc, size_t n, int world) {
  for (size_t i = 0; i < n; ++i) acc[i] /= static_cast<T>(world);
}

// acc = acc op x, elementwise (the caller checked the dtype).
void CombineBytes(DType dtype, void* acc, const void* x, size_t bytes, ReduceOp op) {
  switch (dtype) {
    case DType::kF32:
      Combine(static_cast<float*>(acc), static_cast<const float*>(x), bytes / 4, op);
      break;
    case DType::kF64:
      Combine(static_cast<double*>(acc), static_cast<const double*>(x), bytes / 8, op);
      break;
    case DType::kI32:
      Combine(static_cast<int32_t*>(acc), static_cast<const int32_t*>(x), bytes / 4, op);
      break;
    default:
      break;
  }
}

void DivideBytes(DType dtype, void* acc, size_t bytes, int world) {
  if (dtype == DType::kF32) Divide(static_cast<float*>(acc), bytes / 4, world);
  if (dtype == DType::kF64) Divide(static_cast<double*>(acc), bytes / 8, world);
}

// "1 s", "2.5 s".
std::string Seconds(double s) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%g s", s);
  return buf;
}

void EncodeReply(uint32_t code, uint64_t bytes, unsigned char* p) {
  PutU32(kMagic, p);
  PutU32(code, p + 4);
  PutU64(bytes, p + 8);
}

}  // namespace

Status TcpCommunicator::Create(StarLinks links, const TcpCommOptions& opts, std::unique_ptr<TcpCommunicator>* out) {
  DT_CHECK_ARG(links.world_size >= 1 && links.rank >= 0 && links.rank < links.world_size,
               "TcpCommunicator: rank " << links.rank << " of world " << links.world_size);
  const size_t expected = links.world_size == 1 ? 0 : (links.rank == 0 ? links.world_size : 1);
  DT_CHECK_ARG(links.links.size() == expected,
               "TcpCommunicator: " << links.links.size() << " links for rank " << links.rank << " of "
                                   << links.world_size << " (expected " << expected << ": use RendezvousTcp)");
  DT_CHECK_ARG(opts.collective_timeout_s > 0, "TcpCommunicator: collective timeout " << opts.collective_timeout_s);
  out->reset(new TcpCommunicator(std::move(links), opts));  // private constructor
  return Status::OK();
}

std::string TcpCommunicator::Describe(const Call& c) const {
  std::string s = std::string(KindName(c.kind)) + " #" + std::to_string(c.seq);
  if (c.kind == kAllReduce) {
    s += " (" + std::string(ReduceOpName(static_cast<ReduceOp>(c.arg))) + ", " +
         DTypeName(static_cast<DType>(c.dtype)) + ", " + std::to_string(c.bytes) + " bytes)";
  } else if (c.kind == kBroadcast) {
    s += " (root " + std::to_string(c.arg) + ", " + std::to_string(c.bytes) + " bytes)";
  }
  return s;
}

Status TcpCommunicator::Fail(const Status& st) {
  std::lock_guard<std::mutex> lock(failed_mu_);
  if (aborted_.load()) return Status::Aborted("tcp communicator was aborted");
  if (failed_.ok()) failed_ = st;
  return st;
}

Status TcpCommunicator::Run(const Call& call, void* data, ReduceOp op) {
  if (aborted_.load())
    return Status::Aborted(std::string("tcp communicator was aborted; ") + KindName(call.kind) + " refused");
  {
    std::lock_guard<std::mutex> lock(failed_mu_);
    if (!failed_.ok()) return failed_;
  }
  if (links_.world_size == 1) return Status::OK();  // every collective of one rank is the identity
  in_call_ = call.kind;
  in_seq_ = call.seq;
  waiting_for_ = 0;  // a peer waits for rank 0; rank 0 sets the rank it reads from
  Status st = links_.rank == 0 ? RunRankZero(call, data, op) : RunPeer(call, data);
  waiting_for_ = -1;
  if (!st.ok()) return Fail(st);
  return Status::OK();
}

// Rank 0: steps 2 and 3 of the protocol (header).
Status TcpCommunicator::RunRankZero(const Call& call, void* data, ReduceOp op) {
  const Deadline deadline = DeadlineIn(opts_.collective_timeout_s);
  const std::string mine = Describe(call);
  const DType dtype = static_cast<DType>(call.dtype);
  Status err;
  int r = 1;
  for (; r < links_.world_size && err.ok(); ++r) {
    const std::string peer = "rank " + std::to_string(r);
    unsigned char req[kRequestBytes];
    waiting_for_ = r;
    Status st = links_.links[r].RecvAll(req, sizeof(req), deadline, peer);
    if (!st.ok()) {
      const bool closed = st.message().find("closed by the peer") != std::string::npos;
      err = Status::Unavailable(
          "rank 0: " + mine + ": " + peer +
          (closed ? " closed its connection (did it fail? see its log)"
                  : " did not arrive within " + Seconds(opts_.collective_timeout_s) + " (" + st.message() + ")"));
      break;
    }
    Call theirs;
    theirs.kind = GetU32(req + 4);
    theirs.arg = GetU32(req + 8);
    theirs.dtype = GetU32(req + 12);
    theirs.seq = GetU64(req + 16);
    theirs.bytes = GetU64(req + 24);
    if (GetU32(req) != kMagic || theirs.kind != call.kind || theirs.arg != call.arg || theirs.dtype != call.dtype ||
        theirs.seq != call.seq || theirs.bytes != call.bytes) {
      err = Status::FailedPrecondition("rank 0 is at " + mine + " but " + peer + " is at " + Describe(theirs) +
                                       ": the ranks issued different host collectives");
      break;
    }
    const bool carries = call.kind == kAllReduce || (call.kind == kBroadcast && static_cast<int>(call.arg) == r);
    if (!carries || call.bytes == 0) continue;
    void* dst = data;
    if (call.kind == kAllReduce) {
      scratch_.resize(call.bytes);
      dst = scratch_.data();
    }
    st = links_.links[r].RecvAll(dst, call.bytes, deadline, peer);
    if (!st.ok()) {
      err = Status::Unavailable("rank 0: " + mine + ": receiving " + peer + "'s data: " + st.message());
      break;
    }
    // Rank order: ((x0 op x1) op x2) ..., the same association on every run.
    if (call.kind == kAllReduce) CombineBytes(dtype, data, scratch_.data(), call.bytes, op);
  }
  if (err.ok() && call.kind == kAllReduce && op == ReduceOp::kAvg) {
    DivideBytes(dtype, data, call.bytes, links_.world_size);
  }
  // Step 3: the result (or the error) to every rank still connected; the root of a Broadcast has it.
  unsigned char reply[kReplyBytes];
  const Deadline send_deadline = err.ok() ? deadline : DeadlineIn(2);
  for (int p = 1; p < links_.world_size; ++p) {
    const std::string peer = "rank " + std::to_string(p);
    if (!err.ok()) {
      const std::string msg = err.message().substr(0, kMaxMessageBytes);
      EncodeReply(1, msg.size(), reply);
      if (links_.links[p].SendAll(reply, sizeof(reply), send_deadline, peer).ok()) {
        (void)links_.links[p].SendAll(msg.data(), msg.size(), send_deadline, peer);
      }
      continue;
    }
    const bool send_data = call.kind == kAllReduce || (call.kind == kBroadcast && static_cast<int>(call.arg) != p);
    const uint64_t n = send_data ? call.bytes : 0;
    EncodeReply(0, n, reply);
    Status st = links_.links[p].SendAll(reply, sizeof(reply), deadline, peer);
    if (st.ok() && n > 0) st = links_.links[p].SendAll(data, n, deadline, peer);
    if (!st.ok())
      err = Status::Unavailable("rank 0: " + mine + ": sending the result to " + peer + ": " + st.message());
  }
  return err;
}

// Ranks 1..world-1: step 1, then wait for rank 0's answer.
Status TcpCommunicator::RunPeer(const Call& call, void* data) {
  const Deadline deadline = DeadlineIn(opts_.collective_timeout_s);
  const std::string me = "rank " + std::to_string(links_.rank) + ": " + Describe(call);
  const std::string zero = "rank 0 at " + links_.where;
  const TcpSocket& s = links_.links[0];
  unsigned char req[kRequestBytes];
  PutU32(kMagic, req);
  PutU32(call.kind, req + 4);
  PutU32(call.arg, req + 8);
  PutU32(call.dtype, req + 12);
  PutU64(call.seq, req + 16);
  PutU64(call.bytes, req + 24);
  Status st = s.SendAll(req, sizeof(req), deadline, zero);
  const bool carries =
      call.kind == kAllReduce || (call.kind == kBroadcast && static_cast<int>(call.arg) == links_.rank);
  if (st.ok() && carries && call.bytes > 0) st = s.SendAll(data, call.bytes, deadline, zero);
  unsigned char reply[kReplyBytes];
  if (st.ok()) st = s.RecvAll(reply, sizeof(reply), deadline, zero);
  if (!st.ok()) {
    const bool closed = st.message().find("closed by the peer") != std::string::npos;
    return Status::Unavailable(me + ": " +
                               (closed ? "rank 0 closed the connection (did it fail? see its log)" : st.message()));
  }
  const uint32_t code = GetU32(reply + 4);
  const uint64_t n = GetU64(reply + 8);
  if (GetU32(reply) != kMagic || (code == 0 && n != 0 && n != call.bytes) || (code != 0 && n > kMaxMessageBytes)) {
    return Status::Internal(me + ": malformed answer from " + zero);
  }
  if (code != 0) {
    std::string msg(n, '\0');
    if (n > 0) (void)s.RecvAll(&msg[0], n, DeadlineIn(2), zero);
    return Status::FailedPrecondition(me + ": failed on rank 0: " + msg);
  }
  if (n > 0) {
    st = s.RecvAll(data, n, deadline, zero);
    if (!st.ok()) return Status::Unavailable(me + ": receiving the result: " + st.message());
  }
  return Status::OK();
}

Status TcpCommunicator::AllReduce(Tensor* t, ReduceOp op, cudaStream_t /*stream*/) {
  DT_NVTX_FN();
  DT_CHECK_ARG(t->device() == DeviceType::kCPU,
               "AllReduce: the tcp communicator takes CPU tensors, got " << t->ToString());
  const DType d = t->dtype();
  DT_CHECK_ARG(d == DType::kF32 || d == DType::kF64 || d == DType::kI32,
               "AllReduce: the tcp communicator reduces f32, f64 or i32, got " << t->ToString());
  DT_CHECK_ARG(!(op == ReduceOp::kAvg && d == DType::kI32), "AllReduce: average of i32 is not defined (use sum)");
  Call c{kAllReduce, static_cast<uint32_t>(op), static_cast<uint32_t>(d), seq_++, t->nbytes()};
  return Run(c, t->data(), op);
}

Status TcpCommunicator::Broadcast(Tensor* t, int root, cudaStream_t /*stream*/) {
  DT_NVTX_FN();
  DT_CHECK_ARG(t->device() == DeviceType::kCPU,
               "Broadcast: the tcp communicator takes CPU tensors, got " << t->ToString());
  DT_CHECK_ARG(root >= 0 && root < world_size(), "Broadcast: root " << root << " outside 0.." << world_size() - 1);
  Call c{kBroadcast, static_cast<uint32_t>(root), static_cast<uint32_t>(t->dtype()), seq_++, t->nbytes()};
  return Run(c, t->data(), ReduceOp::kSum);
}

Status TcpCommunicator::Barrier() {
  Call c{kBarrier, 0, 0, seq_++, 0};
  return Run(c, nullptr, ReduceOp::kSum);
}

Status TcpCommunicator::ReduceScatter(const Tensor& /*in*/, Tensor* /*out*/, ReduceOp /*op*/, cudaStream_t /*stream*/) {
  return Status::Unimplemented(
      "ReduceScatter: the tcp communicator carries host scalars only; gradients are reduced by NCCL (GPU) or MPI "
      "(CPU: start workers with `dtrain launch`, mpirun or srun --mpi=pmix)");
}

Status TcpCommunicator::AllGather(const Tensor& /*in*/, Tensor* /*out*/, cudaStream_t /*stream*/) {
  return Status::Unimplemented(
      "AllGather: the tcp communicator carries host scalars only; gradients and parameters travel over NCCL (GPU) "
      "or MPI (CPU: start workers with `dtrain launch`, mpirun or srun --mpi=pmix)");
}

Status TcpCommunicator::Abort() {
  if (aborted_.exchange(true)) return Status::OK();
  // shutdown (not close): a thread blocked in poll/recv on these sockets wakes and fails; the
  // descriptors stay ours until the destructor, so none is reused under it.
  for (const TcpSocket& s : links_.links) s.Shutdown();
  const int waiting = waiting_for_.load();
  if (waiting < 0) {
    DT_LOG_WARN(kComm, "tcp communicator aborted (rank {} of {}) between collectives", rank(), world_size());
  } else {
    // Rank 0 reads the ranks in order: the first it still waits for is one that did not arrive.
    DT_LOG_WARN(kComm, "tcp communicator aborted (rank {} of {}) while waiting for rank {} in {} #{}", rank(),
                world_size(), waiting, KindName(in_call_.load()), in_seq_.load());
  }
  return Status::OK();
}

}  // namespace dtrain::comm
