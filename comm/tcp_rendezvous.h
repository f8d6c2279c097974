#pragma once
// TCP rendezvous: how workers that no process manager (mpirun, srun) started find each other — a
// Kubernetes PyTorchJob or a per-node launcher that sets only torchrun's RANK/WORLD_SIZE/MASTER_ADDR/
// MASTER_PORT. The result is a star of TCP connections through rank 0 (StarLinks), which
// TcpCommunicator (comm/tcp_communicator.h) runs its host collectives over.
//
// Protocol (version 2; all integers big-endian):
//   1. Rank 0 listens on MASTER_ADDR:MASTER_PORT (SO_REUSEADDR; 0.0.0.0 binds every interface; an
//      address that is not this host's, e.g. a service's virtual IP, makes it listen on every interface);
//      its log says the address it really listens on.
//   2. Every other rank connects, retrying (refused, unreachable, not resolvable yet) until the timeout.
//      Each connection first proves the job secret, both ways (comm/job_secret.h, context "dtrain
//      rendezvous 2"); rank 0 runs the handshakes of all connections at once, each with its own 5 s
//      (comm/auth_acceptor.h), and drops — logging the address — any that cannot prove it: such a process
//      is never counted as a rank, never ends the rendezvous and never receives anything of the job (no
//      notice, no NCCL id). A rank refused by rank 0 (another secret) fails at once (InvalidArgument). Then
//      the rank sends a hello: magic "DTRZ", protocol version, its rank, the world size.
//   3. Rank 0 checks each hello and answers it at once with a notice {magic, code, message}: accepted,
//      or rejected with the reason. A duplicate rank, a rank out of range, a world size or protocol
//      version that differs ends the rendezvous with an error on rank 0 and on every peer (each names
//      the rank and both sides' values): they come from processes that hold the job's secret.
//   4. Once all world-1 peers are in, rank 0 sends each one a "go" notice; every rank returns its links.
//      If the timeout ends first, rank 0 fails naming the ranks still missing and sends the peers
//      that did arrive an abort notice with the same text.
// Errors name MASTER_ADDR:MASTER_PORT: rank 0 "rank 0: 1 of 2 peers arrived at H:P after 30 s;
// missing: rank 1"; a peer that never reached rank 0 "rank 1: no rendezvous at H:P after 30 s (is rank
// 0 running, and MASTER_ADDR/MASTER_PORT the same everywhere?)". World size 1 makes no connection.
// Blocking: every wait is bounded by the timeout (poll); EINTR is retried.
// Thread-safety: a plain function; call it once per process and job attempt.

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "comm/job_secret.h"
#include "comm/tcp_socket.h"
#include "core/status.h"

namespace dtrain::comm {

struct RendezvousOptions {
  std::string master_addr = "127.0.0.1";  // rank 0 binds it, the others connect to it
  int master_port = 29500;
  int rank = 0;
  int world_size = 1;
  double timeout_s = 300;  // for the whole rendezvous, on every rank
  JobSecret secret;        // the same on every rank (required when world_size > 1)
};

// The connections a finished rendezvous leaves. Rank 0: links[r] is the connection to rank r
// (links[0] unused). Other ranks: links[0] is the connection to rank 0. Owns the sockets.
struct StarLinks {
  int rank = 0;
  int world_size = 1;
  std::string where;  // "MASTER_ADDR:MASTER_PORT", for messages
  std::vector<TcpSocket> links;
};

// Runs the protocol above. `out` is filled only on success.
Status RendezvousTcp(const RendezvousOptions& opts, StarLinks* out);

// The wire checks of steps 2-3, exposed for the fuzzer (fuzz/rendezvous_fuzzer.cc). Pure functions.
namespace detail {
constexpr size_t kRendezvousHelloBytes = 16;  // magic, version, rank, world size
// Rank 0's check of a hello (kRendezvousHelloBytes bytes, magic already checked) from `from`; addrs[r] non-empty
// for the ranks already in (addrs.size() == world). "" when acceptable (then 1 <= rank < world, not yet in); else
// the reason, naming both sides' values.
std::string CheckRendezvousHello(const unsigned char* hello, const std::string& from,
                                 const std::vector<std::string>& addrs, int world);
// A notice's 12-byte head (magic, code, length): InvalidArgument for another magic or a length over 64 KiB.
Status ParseRendezvousNoticeHead(const unsigned char* head, const std::string& what, uint32_t* code, uint32_t* n);
}  // namespace detail

}  // namespace dtrain::comm
