#include "launcher/node_link.h"

#include <poll.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <csignal>
#include <cstring>

#include "comm/auth_acceptor.h"
#include "core/check.h"
#include "core/logging.h"
#include "launcher/node_link_frame.h"

namespace dtrain::launcher {
namespace {

using Clock = std::chrono::steady_clock;

constexpr double kPeerHandshakeS = 10;  // each connection's time to prove the secret and say hello
using Frame = NodeLinkFrame;
using Message = NodeLinkMessage;

Status Send(const comm::TcpSocket& s, const Frame& f, double timeout_s, const std::string& what) {
  return s.SendAll(&f, sizeof(f), comm::DeadlineIn(timeout_s), what);
}

Status Recv(const comm::TcpSocket& s, comm::Deadline deadline, const std::string& what, Message* m) {
  Frame f;
  DT_RETURN_IF_ERROR(s.RecvAll(&f, sizeof(f), deadline, what));
  return DecodeNodeLinkFrame(f, what, m);
}

// Waits until `fd` is readable, `cancel_fd` is readable (kAborted) or `deadline` (kUnavailable).
Status WaitReadable(int fd, int cancel_fd, comm::Deadline deadline) {
  for (;;) {
    pollfd p[2] = {{fd, POLLIN, 0}, {cancel_fd, POLLIN, 0}};
    const int ms = static_cast<int>(std::min(comm::SecondsLeft(deadline) * 1000 + 1, 1e9));
    const int rc = poll(p, 2, ms);
    if (rc < 0 && errno == EINTR) continue;
    if (p[1].revents != 0) return Status::Aborted("interrupted");
    if (rc == 0) return Status::Unavailable("timed out");
    return Status::OK();
  }
}

std::string Where(const NodeLinkOptions& o) { return o.master_addr + ":" + std::to_string(o.port); }

bool IsLoopback(const std::string& address) { return address.rfind("127.", 0) == 0 || address.rfind("[::1]", 0) == 0; }

Status Interrupted(int node_rank) {
  return Status::Aborted("node " + std::to_string(node_rank) +
                         ": a signal arrived while joining the other nodes' launchers: stopped");
}

}  // namespace

// --- Join --------------------------------------------------------------------------------------

Status NodeLink::JoinAsHub(const NodeLinkOptions& opts, std::vector<Peer>* peers) {
  comm::TcpSocket listener;
  bool widened = false;
  Status st = comm::TcpSocket::ListenForPeers(opts.master_addr, opts.port, &listener, &widened);
  if (!st.ok()) {
    return Status::Unavailable("node 0: cannot listen for the other nodes' launchers on port " +
                               std::to_string(opts.port) + " (MASTER_PORT + 1): " + st.message());
  }
  const std::string bound = listener.local_address();
  if (widened) {
    DT_LOG_WARN(kLauncher, "node 0: --master-addr {} is not an address of this host: listening on every interface",
                opts.master_addr);
  }
  DT_LOG_INFO(kLauncher, "node 0: listening on {} for {} other node(s)' launchers (each must prove the job secret)",
              bound, opts.nnodes - 1);
  if (IsLoopback(bound)) {
    DT_LOG_WARN(kLauncher,
                "node 0: {} is a loopback address: launchers on other hosts cannot reach it (give --master-addr "
                "an address of this host that they reach)",
                bound);
  }
  const comm::Deadline deadline = comm::DeadlineIn(opts.join_timeout_s);
  comm::AuthAcceptorOptions ao;
  ao.context = kNodeLinkContext;
  ao.hello_bytes = sizeof(Frame);
  ao.per_peer_s = kPeerHandshakeS;
  ao.cancel_fd = opts.cancel_fd;
  ao.log_prefix = "node 0";
  comm::AuthAcceptor acceptor(&listener, &opts.secret, ao);
  std::vector<bool> joined(opts.nnodes, false);
  joined[0] = true;
  int count = 1;
  while (count < opts.nnodes) {
    comm::AuthArrival arrival;
    st = acceptor.Next(deadline, &arrival);
    if (st.code() == Status::Code::kAborted) return Interrupted(0);
    if (!st.ok()) {
      std::string missing;
      for (int n = 1; n < opts.nnodes; ++n) {
        if (!joined[n]) missing += (missing.empty() ? "" : ", ") + std::to_string(n);
      }
      const int dropped = acceptor.dropped();
      return Status::Unavailable("node 0: " + std::to_string(count - 1) + " of " + std::to_string(opts.nnodes - 1) +
                                 " other nodes' launchers arrived on " + bound + " after " +
                                 std::to_string(static_cast<int>(opts.join_timeout_s)) + " s; missing: node " +
                                 missing +
                                 (dropped > 0 ? " (" + std::to_string(dropped) +
                                                    " connection(s) dropped: see the warnings above; a node with "
                                                    "another job secret is refused)"
                                              : std::string()) +
                                 (st.code() == Status::Code::kUnavailable ? "" : " (" + st.message() + ")"));
    }
    comm::TcpSocket sock = std::move(arrival.sock);
    const std::string from = arrival.from;
    Frame frame;
    std::memcpy(&frame, arrival.hello.data(), sizeof(frame));
    Message hello;
    st = DecodeNodeLinkFrame(frame, "a launcher at " + from, &hello);
    if (!st.ok()) {
      DT_LOG_WARN(kLauncher, "node 0: ignoring a connection from {}: {}", from, st.message());
      continue;
    }
    const std::string error = CheckNodeLinkHello(hello, opts.nnodes, opts.attempt, joined, from);
    if (!error.empty()) {
      (void)Send(sock, MakeNodeLinkFrame(kError, 0, 0, 0, error), 2, "node at " + from);
      return Status::InvalidArgument("node 0: " + error);
    }
    joined[hello.node] = true;
    ++count;
    Peer p;
    p.node = hello.node;
    p.sock = std::move(sock);
    peers->push_back(std::move(p));
  }
  for (Peer& p : *peers) {
    DT_RETURN_IF_ERROR(Send(p.sock, MakeNodeLinkFrame(kReady, 0, 0, 0, ""), 10, "node " + std::to_string(p.node)));
  }
  return Status::OK();
}

Status NodeLink::JoinAsMember(const NodeLinkOptions& opts, std::vector<Peer>* peers) {
  const comm::Deadline deadline = comm::DeadlineIn(opts.join_timeout_s);
  const std::string what = "node 0's launcher at " + Where(opts);
  const std::string me = "node " + std::to_string(opts.node_rank);
  comm::TcpSocket sock;
  Status last;
  while (true) {
    last = comm::TcpSocket::Connect(opts.master_addr, opts.port, std::min(deadline, comm::DeadlineIn(5)), &sock);
    if (last.ok()) {
      last = comm::ClientHandshake(sock, opts.secret, kNodeLinkContext,
                                   std::min(deadline, comm::DeadlineIn(kPeerHandshakeS)), what);
      if (last.code() == Status::Code::kInvalidArgument) return Status::InvalidArgument(me + ": " + last.message());
    }
    if (last.ok())
      last = Send(sock, MakeNodeLinkFrame(kHello, opts.node_rank, opts.nnodes, opts.attempt, ""), 10, what);
    if (last.ok()) {
      // Node 0 answers once every node is in: wait for it, or for a signal.
      last = WaitReadable(sock.fd(), opts.cancel_fd, deadline);
      if (last.code() == Status::Code::kAborted) return Interrupted(opts.node_rank);
      Message ready;
      if (last.ok()) last = Recv(sock, deadline, what, &ready);
      if (last.ok() && ready.kind == kError)
        return Status::InvalidArgument(what + " refused node " + std::to_string(opts.node_rank) + ": " + ready.text);
      if (last.ok() && ready.kind == kReady) break;
      if (last.ok()) return Status::InvalidArgument(what + " answered with an unexpected message");
    }
    if (comm::SecondsLeft(deadline) <= 0) {
      return Status::Unavailable(me + ": no launcher of node 0 at " + Where(opts) + " after " +
                                 std::to_string(static_cast<int>(opts.join_timeout_s)) +
                                 " s (is node 0's `dtrain launch` running, with the same --master-addr and "
                                 "--master-port?): " +
                                 last.message());
    }
    // Retry in 200 ms, unless a signal comes first.
    if (WaitReadable(-1, opts.cancel_fd, std::min(deadline, comm::DeadlineIn(0.2))).code() == Status::Code::kAborted) {
      return Interrupted(opts.node_rank);
    }
  }
  Peer p;
  p.node = 0;
  p.sock = std::move(sock);
  peers->push_back(std::move(p));
  return Status::OK();
}

Status NodeLink::Join(const NodeLinkOptions& opts, std::unique_ptr<NodeLink>* out, int* stop_signal) {
  if (opts.nnodes < 1 || opts.node_rank < 0 || opts.node_rank >= opts.nnodes) {
    return Status::InvalidArgument("--node-rank " + std::to_string(opts.node_rank) + " is outside 0.." +
                                   std::to_string(opts.nnodes - 1));
  }
  if (opts.secret.empty()) return Status::InvalidArgument("node link: no job secret");
  std::unique_ptr<NodeLink> link(new NodeLink(opts));
  const Status st = opts.node_rank == 0 ? JoinAsHub(opts, &link->peers_) : JoinAsMember(opts, &link->peers_);
  if (st.code() == Status::Code::kAborted && opts.cancel_fd >= 0) {
    unsigned char byte = 0;
    if (read(opts.cancel_fd, &byte, 1) != 1) byte = 0;
    const int sig = byte != 0 ? byte : SIGTERM;
    DT_LOG_WARN(kLauncher, "node {}: {} while joining the other nodes' launchers: stopping", opts.node_rank,
                strsignal(sig));
    if (stop_signal != nullptr) *stop_signal = sig;
  }
  DT_RETURN_IF_ERROR(st);
  const auto now = Clock::now();
  for (Peer& p : link->peers_) p.last_heard = now;
  link->thread_ = std::thread([l = link.get()] { l->Run(); });
  *out = std::move(link);
  return Status::OK();
}

// --- Running -----------------------------------------------------------------------------------

NodeLink::~NodeLink() {
  quit_ = true;
  if (thread_.joinable()) thread_.join();
}

bool NodeLink::stopped(NodeStop* why) const {
  std::lock_guard<std::mutex> lock(mu_);
  if (why != nullptr) *why = stop_;
  return stop_.node >= 0;
}

void NodeLink::ReportFailure(int exit_code, const std::string& reason) {
  std::lock_guard<std::mutex> lock(mu_);
  if (stop_.node >= 0) return;  // a peer's stop came first: that is the root cause, already known everywhere
  stop_ = NodeStop{opts_.node_rank, exit_code, reason};
  outbox_.push_back({kStop, opts_.node_rank, exit_code, reason});
}

void NodeLink::ReportDone() {
  std::lock_guard<std::mutex> lock(mu_);
  outbox_.push_back({kDone, opts_.node_rank, 0, ""});
}

void NodeLink::SendTo(Peer* peer, const Outgoing& msg) {
  if (peer->gone) return;
  // A send that fails is found by the reading side (closed link) or by the silence timeout.
  (void)Send(peer->sock, MakeNodeLinkFrame(msg.kind, msg.node, msg.code, 0, msg.text), 2,
             "node " + std::to_string(peer->node));
}

void NodeLink::RecordStop(const NodeStop& stop, int from_node) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stop_.node >= 0) return;
    stop_ = stop;
  }
  DT_LOG_ERROR(kLauncher, "node {}: stopping this node's workers: {}", opts_.node_rank, stop.reason);
  if (opts_.node_rank != 0) return;
  for (Peer& p : peers_) {
    if (p.node != from_node) SendTo(&p, {kStop, stop.node, stop.exit_code, stop.reason});
  }
}

void NodeLink::PeerLost(Peer* peer, const std::string& why) {
  peer->gone = true;
  if (peer->done) return;
  const std::string who = peer->node == 0 ? "node 0's launcher (at " + Where(opts_) + ")"
                                          : "node " + std::to_string(peer->node) + "'s launcher";
  RecordStop(NodeStop{peer->node, 1, who + " " + why + ": its host, its network or its launcher is gone"}, peer->node);
}

void NodeLink::Run() {
  const auto heartbeat = std::chrono::duration<double>(opts_.heartbeat_s);
  const auto silence = std::chrono::duration<double>(opts_.peer_timeout_s);
  auto next_beat = Clock::now();
  while (true) {
    const bool quitting = quit_.load();
    std::vector<Outgoing> out;
    {
      std::lock_guard<std::mutex> lock(mu_);
      out.swap(outbox_);
    }
    for (const Outgoing& m : out) {
      for (Peer& p : peers_) SendTo(&p, m);
    }
    if (quitting) break;
    auto now = Clock::now();
    if (now >= next_beat) {
      for (Peer& p : peers_) SendTo(&p, {kAlive, opts_.node_rank, 0, ""});
      next_beat = now + std::chrono::duration_cast<Clock::duration>(heartbeat);
    }
    std::vector<pollfd> fds;
    std::vector<Peer*> polled;
    for (Peer& p : peers_) {
      if (p.gone) continue;
      fds.push_back({p.sock.fd(), POLLIN, 0});
      polled.push_back(&p);
    }
    if (fds.empty()) {
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
      continue;
    }
    poll(fds.data(), fds.size(), 100);
    now = Clock::now();
    for (size_t i = 0; i < fds.size(); ++i) {
      Peer* p = polled[i];
      if (fds[i].revents != 0) {
        Message m;
        const Status st = Recv(p->sock, comm::DeadlineIn(2), "node " + std::to_string(p->node), &m);
        if (!st.ok()) {
          PeerLost(p, "closed its link");
          continue;
        }
        p->last_heard = now;
        if (m.kind == kDone) p->done = true;
        if (m.kind == kStop) RecordStop(NodeStop{m.node, m.a, m.text}, p->node);
      } else if (!p->done && now - p->last_heard > silence) {
        PeerLost(p, "sent nothing for " + std::to_string(static_cast<int>(opts_.peer_timeout_s)) + " s");
      }
    }
  }
}

}  // namespace dtrain::launcher
