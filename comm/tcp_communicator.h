#pragma once
// TcpCommunicator: the host-side Communicator (loss, accuracy, the preemption MAX-agreement, barriers)
// for workers started without MPI (comm/tcp_rendezvous.h), over the rendezvous' star through rank 0.
//
// Every collective is one round trip through rank 0:
//   1. each other rank sends rank 0 a request {kind, op or root, dtype, bytes, sequence number} and
//      its data when it contributes (AllReduce: always; Broadcast: the root only);
//   2. rank 0 reads the requests in rank order 1, 2, ..., checks each against its own (a rank that is at
//      another collective, dtype or size is an error naming both ranks and calls), and reduces in rank
//      order: ((x0 op x1) op x2) ...; kAvg divides that sum by the world size on rank 0;
//   3. rank 0 sends every rank the result (or the error). Every rank thus holds bitwise rank 0's value.
// Meant for a few scalars per step: the star moves world x bytes through rank 0. Tensors: CPU;
// AllReduce takes f32, f64 or i32 (kAvg: floats only); Broadcast any dtype (raw bytes, e.g. a u8
// ncclUniqueId). ReduceScatter and AllGather return Unimplemented: gradients never travel here (the
// GPU path reduces them with NCCL; the CPU gradient path needs MPI). `stream` arguments are ignored;
// every call blocks until done.
//
// Failure: each collective must finish within `collective_timeout_s`; a peer that died, closed its
// connection or does not arrive in time fails the call on rank 0 naming that rank, and rank 0 passes
// the error to the ranks still connected. After any failure the group is out of step: every later
// call returns the same error. Abort() (from any thread, e.g. the watchdog) shuts the connections
// down, which wakes a blocked call; it and every later call return Aborted. Its log line names the
// rank the blocked call was waiting for (on rank 0: the first rank that did not arrive).
// Ownership: owns the StarLinks it was created from. Thread-safety: as Communicator.

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "comm/communicator.h"
#include "comm/tcp_rendezvous.h"

namespace dtrain::comm {

struct TcpCommOptions {
  double collective_timeout_s = 1800;  // per collective; the trainer's watchdog usually fires first
};

class TcpCommunicator final : public Communicator {
 public:
  // Takes the links of a finished rendezvous (RendezvousTcp). Makes no network call.
  static Status Create(StarLinks links, const TcpCommOptions& opts, std::unique_ptr<TcpCommunicator>* out);
  ~TcpCommunicator() override = default;
  TcpCommunicator(const TcpCommunicator&) = delete;
  TcpCommunicator& operator=(const TcpCommunicator&) = delete;

  Status AllReduce(Tensor* t, ReduceOp op, cudaStream_t stream) override;
  Status ReduceScatter(const Tensor& in, Tensor* out, ReduceOp op, cudaStream_t stream) override;
  Status AllGather(const Tensor& in, Tensor* out, cudaStream_t stream) override;
  Status Broadcast(Tensor* t, int root, cudaStream_t stream) override;
  Status Barrier() override;
  Status Abort() override;

  int rank() const override { return links_.rank; }
  int world_size() const override { return links_.world_size; }
  Backend backend() const override { return Backend::kTcp; }

 private:
  // One collective as every rank describes it (step 1 above).
  struct Call {
    uint32_t kind = 0;  // kAllReduce | kBroadcast | kBarrier (tcp_communicator.cc)
    uint32_t arg = 0;   // ReduceOp for AllReduce, the root for Broadcast
    uint32_t dtype = 0;
    uint64_t seq = 0;
    uint64_t bytes = 0;
  };

  explicit TcpCommunicator(StarLinks links, const TcpCommOptions& opts) : links_(std::move(links)), opts_(opts) {}
  // Runs `call` on `data` (the tensor's bytes, in place): rank 0 reduces with `op` (AllReduce) or
  // forwards the root's data (Broadcast).
  Status Run(const Call& call, void* data, ReduceOp op);
  Status RunRankZero(const Call& call, void* data, ReduceOp op);
  Status RunPeer(const Call& call, void* data);
  // Records the first failure (later calls return it); Aborted once Abort() ran.
  Status Fail(const Status& st);
  std::string Describe(const Call& c) const;

  StarLinks links_;
  TcpCommOptions opts_;
  uint64_t seq_ = 0;
  std::vector<unsigned char> scratch_;  // rank 0: one peer's contribution
  std::atomic<bool> aborted_{false};
  // What the collective thread is blocked on, for Abort()'s log line: the rank it waits for (-1: none).
  std::atomic<int> waiting_for_{-1};
  std::atomic<uint32_t> in_call_{0};
  std::atomic<uint64_t> in_seq_{0};
  std::mutex failed_mu_;
  Status failed_;
};

}  // namespace dtrain::comm
