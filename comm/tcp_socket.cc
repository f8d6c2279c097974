#include "comm/tcp_socket.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <memory>

#include "core/check.h"

namespace dtrain::comm {
namespace {

std::string Errno(int err) { return std::strerror(err); }

std::string HostPort(const std::string& host, int port) { return host + ":" + std::to_string(port); }

// Milliseconds to hand poll() for `deadline` (at least 0, at most INT_MAX-ish).
int PollMs(Deadline deadline) {
  const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
  return static_cast<int>(std::clamp<int64_t>(left.count(), 0, 1 << 30));
}

// Waits until `fd` is ready for `events` or `deadline` passes. EINTR restarts the wait with the time left.
// Returns OK when ready (also for POLLERR/POLLHUP: the following I/O call reports the error).
Status WaitFor(int fd, short events, Deadline deadline, const std::string& what, const char* doing) {
  for (;;) {
    pollfd p{fd, events, 0};
    const int rc = ::poll(&p, 1, PollMs(deadline));
    if (rc > 0) return Status::OK();
    if (rc == 0) return Status::Unavailable(std::string(doing) + " " + what + " timed out");
    if (errno != EINTR) return Status::IoError(std::string("poll while ") + doing + " " + what + ": " + Errno(errno));
  }
}

void SetSocketOptions(int fd) {
  const int one = 1;
  // Small frames (a few scalars) must not wait for Nagle; keepalive lets the kernel notice a vanished host.
  (void)::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  (void)::setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof(one));
}

struct AddrInfoDeleter {
  void operator()(addrinfo* a) const { freeaddrinfo(a); }
};
using AddrInfoPtr = std::unique_ptr<addrinfo, AddrInfoDeleter>;

Status Resolve(const std::string& host, int port, bool passive, AddrInfoPtr* out) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = passive ? AI_PASSIVE : 0;
  addrinfo* res = nullptr;
  const int rc = ::getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &res);
  if (rc != 0) {
    return Status::Unavailable("cannot resolve " + host + ": " + (rc == EAI_SYSTEM ? Errno(errno) : gai_strerror(rc)));
  }
  out->reset(res);
  return Status::OK();
}

}  // namespace

Deadline DeadlineIn(double seconds) {
  return std::chrono::steady_clock::now() +
         std::chrono::duration_cast<std::chrono::steady_clock::duration>(std::chrono::duration<double>(seconds));
}

double SecondsLeft(Deadline d) {
  return std::max(0.0, std::chrono::duration<double>(d - std::chrono::steady_clock::now()).count());
}

TcpSocket::~TcpSocket() {
  if (fd_ >= 0) ::close(fd_);
}

TcpSocket& TcpSocket::operator=(TcpSocket&& o) noexcept {
  if (this != &o) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = o.fd_;
    o.fd_ = -1;
  }
  return *this;
}

Status TcpSocket::Listen(const std::string& host, int port, TcpSocket* out) {
  AddrInfoPtr addrs;
  DT_RETURN_IF_ERROR(Resolve(host, port, /*passive=*/true, &addrs));
  std::string last = "no address";
  for (addrinfo* a = addrs.get(); a != nullptr; a = a->ai_next) {
    TcpSocket s(::socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol));
    if (!s.valid()) {
      last = "socket: " + Errno(errno);
      continue;
    }
    const int one = 1;
    // A restarted job binds the same MASTER_PORT while the old connections sit in TIME_WAIT.
    (void)::setsockopt(s.fd_, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (::bind(s.fd_, a->ai_addr, a->ai_addrlen) != 0) {
      last = "bind: " + Errno(errno);
      continue;
    }
    if (::listen(s.fd_, 128) != 0) {
      last = "listen: " + Errno(errno);
      continue;
    }
    *out = std::move(s);
    return Status::OK();
  }
  return Status::Unavailable("cannot listen on " + HostPort(host, port) + ": " + last);
}

Status TcpSocket::ListenForPeers(const std::string& host, int port, TcpSocket* out, bool* widened) {
  *widened = false;
  const Status st = Listen(host, port, out);
  if (st.ok() || st.message().find(Errno(EADDRNOTAVAIL)) == std::string::npos) return st;
  *widened = true;
  return Listen(host.find(':') == std::string::npos ? "0.0.0.0" : "::", port, out);
}

Status TcpSocket::Connect(const std::string& host, int port, Deadline deadline, TcpSocket* out) {
  AddrInfoPtr addrs;
  DT_RETURN_IF_ERROR(Resolve(host, port, /*passive=*/false, &addrs));
  std::string last = "no address";
  for (addrinfo* a = addrs.get(); a != nullptr; a = a->ai_next) {
    TcpSocket s(::socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK, a->ai_protocol));
    if (!s.valid()) {
      last = "socket: " + Errno(errno);
      continue;
    }
    // Non-blocking connect, so that an unreachable host costs at most the time left, not the kernel's
    // SYN retry budget (minutes).
    int rc = ::connect(s.fd_, a->ai_addr, a->ai_addrlen);
    if (rc != 0 && (errno == EINPROGRESS || errno == EINTR)) {
      Status st = WaitFor(s.fd_, POLLOUT, deadline, HostPort(host, port), "connecting to");
      if (!st.ok()) {
        last = "timed out";
        continue;
      }
      int err = 0;
      socklen_t len = sizeof(err);
      (void)::getsockopt(s.fd_, SOL_SOCKET, SO_ERROR, &err, &len);
      rc = err == 0 ? 0 : -1;
      errno = err;
    }
    if (rc != 0) {
      last = Errno(errno);
      continue;
    }
    const int flags = ::fcntl(s.fd_, F_GETFL);
    (void)::fcntl(s.fd_, F_SETFL, flags & ~O_NONBLOCK);
    SetSocketOptions(s.fd_);
    *out = std::move(s);
    return Status::OK();
  }
  return Status::Unavailable("cannot connect to " + HostPort(host, port) + ": " + last);
}

Status TcpSocket::Accept(Deadline deadline, TcpSocket* out, std::string* peer_address) const {
  for (;;) {
    DT_RETURN_IF_ERROR(WaitFor(fd_, POLLIN, deadline, "a connection", "waiting for"));
    sockaddr_storage addr{};
    socklen_t len = sizeof(addr);
    const int fd = ::accept4(fd_, reinterpret_cast<sockaddr*>(&addr), &len, SOCK_CLOEXEC);
    if (fd < 0) {
      // The connection may have gone away between poll and accept; keep waiting.
      if (errno == EINTR || errno == ECONNABORTED || errno == EAGAIN || errno == EPROTO) continue;
      return Status::IoError("accept: " + Errno(errno));
    }
    char host[NI_MAXHOST] = "?";
    char serv[NI_MAXSERV] = "?";
    (void)::getnameinfo(reinterpret_cast<sockaddr*>(&addr), len, host, sizeof(host), serv, sizeof(serv),
                        NI_NUMERICHOST | NI_NUMERICSERV);
    *peer_address = std::string(host) + ":" + serv;
    SetSocketOptions(fd);
    *out = TcpSocket(fd);
    return Status::OK();
  }
}

Status TcpSocket::SendAll(const void* data, size_t n, Deadline deadline, const std::string& what) const {
  const auto* p = static_cast<const char*>(data);
  while (n > 0) {
    DT_RETURN_IF_ERROR(WaitFor(fd_, POLLOUT, deadline, what, "sending to"));
    const ssize_t k = ::send(fd_, p, n, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (k < 0) {
      if (errno == EINTR || errno == EAGAIN || errno == EWOULDBLOCK) continue;
      return Status::Unavailable("sending to " + what + ": " + Errno(errno));
    }
    p += k;
    n -= static_cast<size_t>(k);
  }
  return Status::OK();
}

Status TcpSocket::RecvAll(void* data, size_t n, Deadline deadline, const std::string& what) const {
  auto* p = static_cast<char*>(data);
  while (n > 0) {
    DT_RETURN_IF_ERROR(WaitFor(fd_, POLLIN, deadline, what, "receiving from"));
    const ssize_t k = ::recv(fd_, p, n, MSG_DONTWAIT);
    if (k == 0) return Status::Unavailable("connection closed by the peer (" + what + ")");
    if (k < 0) {
      if (errno == EINTR || errno == EAGAIN || errno == EWOULDBLOCK) continue;
      return Status::Unavailable("receiving from " + what + ": " + Errno(errno));
    }
    p += k;
    n -= static_cast<size_t>(k);
  }
  return Status::OK();
}

void TcpSocket::Shutdown() const {
  if (fd_ >= 0) (void)::shutdown(fd_, SHUT_RDWR);
}

int TcpSocket::local_port() const {
  sockaddr_storage addr{};
  socklen_t len = sizeof(addr);
  if (fd_ < 0 || ::getsockname(fd_, reinterpret_cast<sockaddr*>(&addr), &len) != 0) return -1;
  if (addr.ss_family == AF_INET) return ntohs(reinterpret_cast<sockaddr_in*>(&addr)->sin_port);
  if (addr.ss_family == AF_INET6) return ntohs(reinterpret_cast<sockaddr_in6*>(&addr)->sin6_port);
  return -1;
}

std::string TcpSocket::local_address() const {
  sockaddr_storage addr{};
  socklen_t len = sizeof(addr);
  if (fd_ < 0 || ::getsockname(fd_, reinterpret_cast<sockaddr*>(&addr), &len) != 0) return "?";
  char host[NI_MAXHOST] = "?";
  char serv[NI_MAXSERV] = "?";
  if (::getnameinfo(reinterpret_cast<sockaddr*>(&addr), len, host, sizeof(host), serv, sizeof(serv),
                    NI_NUMERICHOST | NI_NUMERICSERV) != 0) {
    return "?";
  }
  return addr.ss_family == AF_INET6 ? "[" + std::string(host) + "]:" + serv : std::string(host) + ":" + serv;
}

}  // namespace dtrain::comm
