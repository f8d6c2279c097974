#pragma once
// TcpSocket: a move-only TCP connection (or listener) and the deadline-bounded I/O the TCP rendezvous
// and TcpCommunicator are built on. POSIX sockets only.
//
// Every call that can block takes an absolute `deadline` (steady clock) and waits with poll(), so a
// silent or half-open peer becomes a Status (kUnavailable, "... timed out") instead of a hang; EINTR is
// retried; SIGPIPE is never raised (MSG_NOSIGNAL). A peer that closes the connection gives kUnavailable
// "connection closed by the peer". `what` names the far side in messages ("rank 0 at host:port").
//
// Shutdown() may be called from another thread while one thread is blocked in Send/Recv on the same
// socket: it wakes that thread (its call then fails), which is how TcpCommunicator::Abort unblocks a
// collective. The descriptor itself is closed only by the destructor (or move-assignment), so it is
// never reused under a blocked call.
// Thread-safety: one thread does I/O on a socket; Shutdown() from any thread.

#include <chrono>
#include <cstddef>
#include <string>

#include "core/status.h"

namespace dtrain::comm {

using Deadline = std::chrono::steady_clock::time_point;

// now + seconds (fractions allowed).
Deadline DeadlineIn(double seconds);
// Seconds left until `d` (0 once it passed).
double SecondsLeft(Deadline d);

class TcpSocket {
 public:
  TcpSocket() = default;
  explicit TcpSocket(int fd) : fd_(fd) {}
  ~TcpSocket();
  TcpSocket(TcpSocket&& o) noexcept : fd_(o.fd_) { o.fd_ = -1; }
  TcpSocket& operator=(TcpSocket&& o) noexcept;
  TcpSocket(const TcpSocket&) = delete;
  TcpSocket& operator=(const TcpSocket&) = delete;

  // Binds `host`:`port` (a name or address; "0.0.0.0" or "::" for every interface) with SO_REUSEADDR
  // and listens. Port 0 picks a free port (see local_port()).
  static Status Listen(const std::string& host, int port, TcpSocket* out);
  // Listen(host, port); but when `host` is not an address of this host (EADDRNOTAVAIL: e.g. a service's
  // virtual IP that forwards here, as torchrun's store allows) it listens on every interface of that family
  // and sets *widened (else clears it). Callers log local_address(): where it really listens.
  static Status ListenForPeers(const std::string& host, int port, TcpSocket* out, bool* widened);
  // One connection attempt to `host`:`port`, bounded by `deadline`. kUnavailable with the reason
  // (refused, unreachable, cannot resolve, timed out) when it fails; the caller decides about retrying.
  static Status Connect(const std::string& host, int port, Deadline deadline, TcpSocket* out);
  // Waits for one incoming connection until `deadline`; kUnavailable "timed out" when none came.
  Status Accept(Deadline deadline, TcpSocket* out, std::string* peer_address) const;

  // Sends / receives exactly `n` bytes before `deadline`.
  Status SendAll(const void* data, size_t n, Deadline deadline, const std::string& what) const;
  Status RecvAll(void* data, size_t n, Deadline deadline, const std::string& what) const;

  // shutdown(SHUT_RDWR): wakes a thread blocked in this socket's I/O; later I/O fails. Idempotent.
  void Shutdown() const;

  bool valid() const { return fd_ >= 0; }
  int fd() const { return fd_; }
  // The bound port (a listener made with port 0), or -1.
  int local_port() const;
  // The bound "address:port" (getsockname, numeric; "[v6]:port" for IPv6), or "?" when unknown.
  std::string local_address() const;

 private:
  int fd_ = -1;
};

}  // namespace dtrain::comm
