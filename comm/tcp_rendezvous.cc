#include "comm/tcp_rendezvous.h"

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <thread>

#include "comm/auth_acceptor.h"
#include "comm/tcp_wire.h"
#include "core/check.h"

namespace dtrain::comm {
namespace {

using detail::GetU32;
using detail::PutU32;

constexpr uint32_t kMagic = 0x4454525au;                 // "DTRZ"
constexpr uint32_t kVersion = 2;                         // 2: the job-secret handshake comes first
constexpr const char* kContext = "dtrain rendezvous 2";  // in the job-secret proofs
constexpr size_t kHelloBytes = 16;                       // magic, version, rank, world size
constexpr uint32_t kMaxNoticeBytes = 1 << 16;
constexpr double kHelloWaitS = 5;  // each connection's time to prove the secret and say hello

// What a notice from rank 0 says (step 3 and 4 of the protocol in the header).
enum NoticeCode : uint32_t { kAccepted = 0, kGo = 1, kInvalid = 2, kGaveUp = 3 };

// "30 s", "1.5 s".
std::string Secs(double s) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%g s", s);
  return buf;
}

Status SendNotice(const TcpSocket& s, NoticeCode code, const std::string& msg, Deadline deadline,
                  const std::string& what) {
  const uint32_t n = static_cast<uint32_t>(std::min<size_t>(msg.size(), kMaxNoticeBytes));
  std::string frame(12 + n, '\0');
  auto* p = reinterpret_cast<unsigned char*>(&frame[0]);
  PutU32(kMagic, p);
  PutU32(code, p + 4);
  PutU32(n, p + 8);
  std::copy(msg.begin(), msg.begin() + n, frame.begin() + 12);
  return s.SendAll(frame.data(), frame.size(), deadline, what);
}

Status RecvNotice(const TcpSocket& s, Deadline deadline, const std::string& what, uint32_t* code, std::string* msg) {
  unsigned char head[12];
  DT_RETURN_IF_ERROR(s.RecvAll(head, sizeof(head), deadline, what));
  uint32_t n = 0;
  DT_RETURN_IF_ERROR(detail::ParseRendezvousNoticeHead(head, what, code, &n));
  msg->assign(n, '\0');
  if (n > 0) DT_RETURN_IF_ERROR(s.RecvAll(&(*msg)[0], n, deadline, what));
  return Status::OK();
}

// "rank 1" | "ranks 1, 3, 4" (at most 16 named, then how many more).
std::string MissingRanks(const std::vector<TcpSocket>& links) {
  std::vector<int> missing;
  for (size_t r = 1; r < links.size(); ++r) {
    if (!links[r].valid()) missing.push_back(static_cast<int>(r));
  }
  std::string s = missing.size() == 1 ? "rank " : "ranks ";
  for (size_t i = 0; i < missing.size() && i < 16; ++i) s += (i ? ", " : "") + std::to_string(missing[i]);
  if (missing.size() > 16) s += " (and " + std::to_string(missing.size() - 16) + " more)";
  return s;
}

// Tells every peer already in that the rendezvous is over (best effort: they may be gone).
void NotifyArrived(const std::vector<TcpSocket>& links, NoticeCode code, const std::string& msg) {
  const Deadline d = DeadlineIn(2);
  for (size_t r = 1; r < links.size(); ++r) {
    if (links[r].valid()) (void)SendNotice(links[r], code, msg, d, "rank " + std::to_string(r));
  }
}

Status RunRankZero(const RendezvousOptions& o, const std::string& where, Deadline deadline, StarLinks* out) {
  TcpSocket listener;
  bool widened = false;
  Status st = TcpSocket::ListenForPeers(o.master_addr, o.master_port, &listener, &widened);
  if (!st.ok()) {
    return Status::Unavailable("rank 0: " + st.message() +
                               " (is another job or an earlier attempt using MASTER_PORT? choose another MASTER_PORT)");
  }
  if (widened) {
    // MASTER_ADDR is not an address of this host (a service's virtual IP, say, that forwards here):
    // listen on every interface, as torchrun's store does.
    DT_LOG_WARN(kComm, "rendezvous: MASTER_ADDR {} is not an address of this host; rank 0 listens on every interface",
                o.master_addr);
  }
  DT_LOG_INFO(kComm, "rendezvous: rank 0 listening on {} for {} peer(s) proving the job secret, timeout {}",
              listener.local_address(), o.world_size - 1, Secs(o.timeout_s));
  AuthAcceptorOptions ao;
  ao.context = kContext;
  ao.hello_bytes = kHelloBytes;
  ao.per_peer_s = kHelloWaitS;
  ao.log_prefix = "rendezvous";
  AuthAcceptor acceptor(&listener, &o.secret, ao);
  std::vector<TcpSocket> links(o.world_size);
  std::vector<std::string> addrs(o.world_size);
  int arrived = 0;
  while (arrived < o.world_size - 1) {
    AuthArrival arrival;
    st = acceptor.Next(deadline, &arrival);
    if (!st.ok()) {
      const int dropped = acceptor.dropped();
      const std::string msg = "rank 0: " + std::to_string(arrived) + " of " + std::to_string(o.world_size - 1) +
                              " peers arrived at " + where + " after " + Secs(o.timeout_s) +
                              "; missing: " + MissingRanks(links) +
                              (dropped > 0 ? " (" + std::to_string(dropped) +
                                                 " connection(s) dropped: see the warnings above; a process with "
                                                 "another job secret is refused)"
                                           : std::string()) +
                              (st.code() == Status::Code::kUnavailable ? "" : " (" + st.message() + ")");
      NotifyArrived(links, kGaveUp, msg);
      return Status::Unavailable(msg);
    }
    TcpSocket conn = std::move(arrival.sock);
    const std::string from = arrival.from;
    const auto* hello = reinterpret_cast<const unsigned char*>(arrival.hello.data());
    if (GetU32(hello) != kMagic) {
      DT_LOG_WARN(kComm, "rendezvous: dropped a connection from {} that sent no dtrain hello (bad magic)", from);
      continue;
    }
    const std::string bad = detail::CheckRendezvousHello(hello, from, addrs, o.world_size);
    if (!bad.empty()) {
      const std::string msg = "rendezvous at " + where + ": " + bad;
      (void)SendNotice(conn, kInvalid, "rank 0 refused this rank: " + msg, DeadlineIn(2), from);
      NotifyArrived(links, kInvalid, "rank 0 ended the rendezvous: " + msg);
      return Status::InvalidArgument("rank 0: " + msg);
    }
    const int rank = static_cast<int32_t>(GetU32(hello + 8));
    st = SendNotice(conn, kAccepted, "", deadline, "rank " + std::to_string(rank) + " at " + from);
    if (!st.ok()) {
      DT_LOG_WARN(kComm, "rendezvous: rank {} at {} went away while joining ({}); waiting for it again", rank, from,
                  st.message());
      continue;
    }
    DT_LOG_DEBUG(kComm, "rendezvous: rank {} joined from {}", rank, from);
    links[rank] = std::move(conn);
    addrs[rank] = from;
    ++arrived;
  }
  for (int r = 1; r < o.world_size; ++r) {
    st = SendNotice(links[r], kGo, "", deadline, "rank " + std::to_string(r) + " at " + addrs[r]);
    if (!st.ok()) {
      const std::string msg = "rank 0: rank " + std::to_string(r) + " left the rendezvous at " + where +
                              " before it completed: " + st.message();
      NotifyArrived(links, kGaveUp, msg);
      return Status::Unavailable(msg);
    }
  }
  DT_LOG_INFO(kComm, "rendezvous: all {} ranks in at {}", o.world_size, where);
  out->links = std::move(links);
  return Status::OK();
}

Status RunPeer(const RendezvousOptions& o, const std::string& where, Deadline deadline, StarLinks* out) {
  const std::string me = "rank " + std::to_string(o.rank);
  const std::string zero = "rank 0 at " + where;
  TcpSocket conn;
  double pause_s = 0.05;
  for (;;) {
    Status st = TcpSocket::Connect(o.master_addr, o.master_port, std::min(deadline, DeadlineIn(5)), &conn);
    if (st.ok()) {
      st = ClientHandshake(conn, o.secret, kContext, std::min(deadline, DeadlineIn(kHelloWaitS)), zero);
      if (st.code() == Status::Code::kInvalidArgument)
        return Status::InvalidArgument(me + ": rendezvous: " + st.message());
    }
    if (st.ok()) break;
    const double left = SecondsLeft(deadline);
    if (left <= 0) {
      return Status::Unavailable(me + ": no rendezvous at " + where + " after " + Secs(o.timeout_s) +
                                 " (is rank 0 running, and MASTER_ADDR/MASTER_PORT the same everywhere?); last "
                                 "attempt: " +
                                 st.message());
    }
    std::this_thread::sleep_for(std::chrono::duration<double>(std::min(pause_s, left)));
    pause_s = std::min(1.0, pause_s * 2);
  }
  unsigned char hello[kHelloBytes];
  PutU32(kMagic, hello);
  PutU32(kVersion, hello + 4);
  PutU32(static_cast<uint32_t>(o.rank), hello + 8);
  PutU32(static_cast<uint32_t>(o.world_size), hello + 12);
  uint32_t code = 0;
  std::string msg;
  Status st = conn.SendAll(hello, sizeof(hello), deadline, zero);
  if (st.ok()) st = RecvNotice(conn, deadline, zero, &code, &msg);
  if (!st.ok())
    return Status::Unavailable(me + ": rendezvous at " + where + ": no answer to the hello: " + st.message());
  if (code == kAccepted) {
    st = RecvNotice(conn, deadline, zero, &code, &msg);
    if (!st.ok()) {
      return Status::Unavailable(me + ": joined the rendezvous at " + where + " but not all ranks arrived within " +
                                 Secs(o.timeout_s) + " (rank 0's log names the missing ranks): " + st.message());
    }
  }
  if (code == kGo) {
    out->links.clear();
    out->links.push_back(std::move(conn));
    DT_LOG_DEBUG(kComm, "rendezvous: {} in at {}", me, where);
    return Status::OK();
  }
  msg = me + ": " + msg;
  return code == kInvalid ? Status::InvalidArgument(msg) : Status::Unavailable(msg);
}

}  // namespace

namespace detail {

Status ParseRendezvousNoticeHead(const unsigned char* head, const std::string& what, uint32_t* code, uint32_t* n) {
  if (GetU32(head) != kMagic) return Status::InvalidArgument(what + " is not a dtrain rendezvous (bad magic)");
  *code = GetU32(head + 4);
  *n = GetU32(head + 8);
  if (*n > kMaxNoticeBytes) return Status::InvalidArgument(what + " sent a malformed notice");
  return Status::OK();
}

std::string CheckRendezvousHello(const unsigned char* h, const std::string& from, const std::vector<std::string>& addrs,
                                 int world) {
  const uint32_t version = GetU32(h + 4);
  const int rank = static_cast<int32_t>(GetU32(h + 8));
  const int peer_world = static_cast<int32_t>(GetU32(h + 12));
  const std::string who = "rank " + std::to_string(rank) + " (from " + from + ")";
  if (version != kVersion) {
    return who + " speaks rendezvous protocol version " + std::to_string(version) + ", rank 0 speaks version " +
           std::to_string(kVersion) + " (the same dtrain build must run everywhere)";
  }
  if (peer_world != world) {
    return who + " has WORLD_SIZE=" + std::to_string(peer_world) +
           " but rank 0 has WORLD_SIZE=" + std::to_string(world) + " (WORLD_SIZE must be the same on every rank)";
  }
  if (rank == 0) return "a second process has RANK=0 (from " + from + "): every process needs its own RANK";
  if (rank < 0 || rank >= world) {
    return "a peer (from " + from + ") has RANK=" + std::to_string(rank) + ", outside 1.." + std::to_string(world - 1) +
           " for WORLD_SIZE=" + std::to_string(world);
  }
  if (static_cast<size_t>(rank) >= addrs.size() || !addrs[rank].empty()) {
    return "rank " + std::to_string(rank) + " joined twice (from " + addrs[rank] + ", then from " + from +
           "): every process needs its own RANK";
  }
  return "";
}

}  // namespace detail

Status RendezvousTcp(const RendezvousOptions& opts, StarLinks* out) {
  const std::string where = opts.master_addr + ":" + std::to_string(opts.master_port);
  DT_CHECK_ARG(opts.world_size >= 1, "rendezvous: world size " << opts.world_size << " (expected >= 1)");
  DT_CHECK_ARG(opts.rank >= 0 && opts.rank < opts.world_size,
               "rendezvous: rank " << opts.rank << " outside 0.." << opts.world_size - 1);
  DT_CHECK_ARG(opts.master_port >= 1 && opts.master_port <= 65535,
               "rendezvous: MASTER_PORT " << opts.master_port << " outside 1..65535");
  DT_CHECK_ARG(opts.timeout_s > 0, "rendezvous: timeout " << opts.timeout_s << " s (expected > 0)");
  DT_CHECK_ARG(opts.world_size == 1 || !opts.secret.empty(), "rendezvous: no job secret");
  StarLinks links;
  links.rank = opts.rank;
  links.world_size = opts.world_size;
  links.where = where;
  if (opts.world_size > 1) {
    const Deadline deadline = DeadlineIn(opts.timeout_s);
    DT_RETURN_IF_ERROR(opts.rank == 0 ? RunRankZero(opts, where, deadline, &links)
                                      : RunPeer(opts, where, deadline, &links));
  }
  *out = std::move(links);
  return Status::OK();
}

}  // namespace dtrain::comm
