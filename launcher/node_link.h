#pragma once
// NodeLink: how the per-node launchers of one job (`dtrain launch --nnodes N --node-rank R --master-addr H`)
// agree that the job has failed, without mpirun, ssh or Slurm.
//
// A star over TCP through node 0's launcher, on port MASTER_PORT + 1 (the workers' own rendezvous holds
// MASTER_PORT, comm/tcp_rendezvous.h). One link per attempt:
//  1. Join (before this node's workers start): node 0 listens on master_addr:port (every interface only when
//     master_addr is not an address of this host; the log says where it really listens); node k > 0 connects,
//     retrying until join_timeout_s. Every connection first proves the job secret, both ways
//     (comm/job_secret.h, context "dtrain node-link 2"): node 0 handshakes with all connections at once, each
//     with its own 10 s, and drops (logging the address) any that cannot prove it — such a peer is never
//     counted as a node and never hears anything of the job; a node k that is refused stops with an error
//     (different secrets), it does not retry. Then node k says hello (node rank, nnodes, attempt). Node 0
//     refuses a node rank out of range, a duplicate, another nnodes or another attempt with an error on both
//     sides, and when its timeout ends names the nodes still missing. Then it tells every node "ready"; the
//     listener closes (a launcher of another attempt is refused at connect time and retries). cancel_fd
//     readable (the launcher's signal pipe: SIGINT/SIGTERM) ends the join at once on either side.
//  2. While the workers run, a thread sends a heartbeat every heartbeat_s on every link and reads the peers:
//     - ReportFailure(code, reason): this node's workers failed first; node k tells node 0, node 0 tells every
//       node (and relays a node's stop to all the others). A peer's stop becomes stopped(): the supervising loop
//       stops the local workers and ends the attempt with the code the stop carries, so every node decides
//       the same about restarting.
//     - a link silent for peer_timeout_s, or closed without "done", is a lost node (its host or its launcher
//       is gone): node 0 stops and tells the others; node k stops (node 0's launcher is the job's hub).
//     - ReportDone(): this node's workers finished with 0; a link closed after "done" is no failure.
//  Nothing more: no election, no membership changes; node 0 is the hub for the attempt's whole life.
// Thread-safety: stopped(), ReportFailure() and ReportDone() may be called from any thread; all socket I/O
// after Join happens on the link's own thread. The destructor sends what is queued, then closes the links.

#include <atomic>
#include <chrono>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "comm/job_secret.h"
#include "comm/tcp_socket.h"
#include "core/status.h"

namespace dtrain::launcher {

struct NodeLinkOptions {
  int node_rank = 0;
  int nnodes = 1;
  std::string master_addr;  // node 0's host, as node k > 0 reaches it
  int port = 0;             // MASTER_PORT + 1
  int attempt = 0;          // DTRAIN_RESTART_COUNT: both sides must be at the same attempt
  double join_timeout_s = 300;
  double heartbeat_s = 1;
  double peer_timeout_s = 5;
  comm::JobSecret secret;  // the same on every node (required)
  int cancel_fd = -1;      // readable: stop joining (one byte, a signal number, is read from it)
};

// Why the job stops, as a peer said (or as the link found out).
struct NodeStop {
  int node = -1;       // the node where the failure started (-1: none)
  int exit_code = 1;   // the root cause's exit code (1 for a lost node)
  std::string reason;  // one line, e.g. "rank 3 on host b failed first: exit code 1"
};

class NodeLink {
 public:
  // Step 1 above; on success the heartbeat thread runs. Unavailable when the peers do not come (or node 0 is
  // not there) within the timeout, InvalidArgument when a peer disagrees (nnodes, attempt, duplicate rank) or
  // the secrets differ, Aborted when cancel_fd became readable: then *stop_signal (if not null) is the byte
  // read from it (the signal's number; SIGTERM for a 0 byte).
  static Status Join(const NodeLinkOptions& opts, std::unique_ptr<NodeLink>* out, int* stop_signal = nullptr);
  ~NodeLink();
  NodeLink(const NodeLink&) = delete;
  NodeLink& operator=(const NodeLink&) = delete;

  // True once a peer asked to stop or a peer was lost; *why (if not null) says which and why.
  bool stopped(NodeStop* why) const;
  // This node's workers failed (and no stop came from a peer before): tell the other nodes.
  void ReportFailure(int exit_code, const std::string& reason);
  // This node's workers all exited 0.
  void ReportDone();

 private:
  struct Peer {
    int node = -1;
    comm::TcpSocket sock;
    std::chrono::steady_clock::time_point last_heard;
    bool done = false;
    bool gone = false;
  };
  struct Outgoing {
    int kind;
    int node;
    int code;
    std::string text;
  };
  explicit NodeLink(const NodeLinkOptions& opts) : opts_(opts) {}
  static Status JoinAsHub(const NodeLinkOptions& opts, std::vector<Peer>* peers);
  static Status JoinAsMember(const NodeLinkOptions& opts, std::vector<Peer>* peers);
  void Run();
  void SendTo(Peer* peer, const Outgoing& msg);
  void PeerLost(Peer* peer, const std::string& why);
  void RecordStop(const NodeStop& stop, int from_node);  // relays it on node 0

  NodeLinkOptions opts_;
  std::vector<Peer> peers_;  // node 0: every other node; node k: node 0
  mutable std::mutex mu_;
  NodeStop stop_;                 // guarded by mu_
  std::vector<Outgoing> outbox_;  // guarded by mu_
  std::atomic<bool> quit_{false};
  std::thread thread_;
};

}  // namespace dtrain::launcher
