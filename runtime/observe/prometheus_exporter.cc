#include "runtime/observe/prometheus_exporter.h"

#include <fcntl.h>
#include <netdb.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>

#include "core/clock.h"
#include "core/logging.h"

namespace dtrain::runtime {
namespace {

constexpr size_t kMaxHead = 8192;
constexpr int kBacklog = 128;

double Seconds(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(t - std::chrono::steady_clock::now()).count();
}

// Milliseconds left until `deadline` for poll(), at least 0.
int MsLeft(std::chrono::steady_clock::time_point deadline) {
  const double s = Seconds(deadline);
  return s > 0 ? static_cast<int>(s * 1e3) + 1 : 0;
}

std::string Reply(const char* status, const std::string& content_type, const std::string& body, bool with_body) {
  return std::string("HTTP/1.1 ") + status + "\r\nContent-Type: " + content_type +
         "\r\nContent-Length: " + std::to_string(body.size()) + "\r\nConnection: close\r\n\r\n" +
         (with_body ? body : "");
}

std::string Plain(const char* status, const std::string& text) {
  return Reply(status, "text/plain; charset=utf-8", text + "\n", true);
}

bool HeadComplete(const std::string& head) {
  return head.find("\r\n\r\n") != std::string::npos || head.find("\n\n") != std::string::npos;
}

}  // namespace

std::string PrometheusHttpReply(const std::string& head, const std::string& body) {
  // Request line: METHOD SP request-target SP HTTP-version (RFC 9112 section 3).
  const std::string line = head.substr(0, head.find_first_of("\r\n"));
  const size_t sp1 = line.find(' ');
  const size_t sp2 = sp1 == std::string::npos ? std::string::npos : line.find(' ', sp1 + 1);
  if (sp1 == 0 || sp2 == std::string::npos || line.find(' ', sp2 + 1) != std::string::npos) {
    return Plain("400 Bad Request", "malformed request line");
  }
  const std::string method = line.substr(0, sp1);
  const std::string target = line.substr(sp1 + 1, sp2 - sp1 - 1);
  const std::string version = line.substr(sp2 + 1);
  if (version.rfind("HTTP/1.", 0) != 0 || target.empty() || target[0] != '/') {
    return Plain("400 Bad Request", "malformed request line");
  }
  const std::string path = target.substr(0, target.find('?'));
  if (path != "/metrics") return Plain("404 Not Found", "not found: dtrain serves /metrics only");
  if (method != "GET" && method != "HEAD") {
    return Plain("405 Method Not Allowed", "method not allowed: use GET");
  }
  return Reply("200 OK", "text/plain; version=0.0.4; charset=utf-8", body, method == "GET");
}

Status PrometheusExporter::Start(const PrometheusOptions& options, std::unique_ptr<PrometheusExporter>* out) {
  const std::string where = options.addr + ":" + std::to_string(options.port);
  addrinfo hints = {};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE;
  addrinfo* res = nullptr;
  const int gai = getaddrinfo(options.addr.c_str(), std::to_string(options.port).c_str(), &hints, &res);
  if (gai != 0 || res == nullptr) {
    return Status::InvalidArgument("cannot serve metrics on " + where + ": address '" + options.addr +
                                   "' does not resolve (" + gai_strerror(gai) + ")");
  }
  std::unique_ptr<PrometheusExporter> e(new PrometheusExporter());  // private constructor
  e->options_ = options;
  e->listen_fd_ = socket(res->ai_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  int err = e->listen_fd_ < 0 ? errno : 0;
  if (err == 0) {
    const int one = 1;  // a restarted job may rebind while the old socket is in TIME_WAIT
    setsockopt(e->listen_fd_, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (bind(e->listen_fd_, res->ai_addr, res->ai_addrlen) != 0 || listen(e->listen_fd_, kBacklog) != 0) err = errno;
  }
  freeaddrinfo(res);
  if (err != 0) {
    return Status::Unavailable("cannot serve metrics on " + where + ": " + std::strerror(err) +
                               (err == EADDRINUSE ? " (another process holds that port)" : ""));
  }
  sockaddr_storage bound = {};
  socklen_t len = sizeof(bound);
  getsockname(e->listen_fd_, reinterpret_cast<sockaddr*>(&bound), &len);
  e->port_ = bound.ss_family == AF_INET6 ? ntohs(reinterpret_cast<sockaddr_in6*>(&bound)->sin6_port)
                                         : ntohs(reinterpret_cast<sockaddr_in*>(&bound)->sin_port);
  if (pipe2(e->wake_, O_CLOEXEC) != 0) return Status::IoError(std::string("pipe: ") + std::strerror(errno));
  e->thread_ = std::thread([p = e.get()] { p->Loop(); });
  *out = std::move(e);
  return Status::OK();
}

PrometheusExporter::~PrometheusExporter() {
  if (thread_.joinable()) {
    const char byte = 0;
    if (write(wake_[1], &byte, 1) != 1) DT_LOG_WARN(kRuntime, "prometheus exporter: cannot wake its thread");
    thread_.join();
  }
  for (int fd : {listen_fd_, wake_[0], wake_[1]}) {
    if (fd >= 0) close(fd);
  }
}

void PrometheusExporter::Publish(std::vector<PromSample> samples) {
  std::lock_guard<std::mutex> lock(mu_);
  samples_ = std::move(samples);
}

// One poll() over the listener and every open connection: each connection reads its head, then writes its reply,
// each phase within io_timeout_s, without waiting for any other.
void PrometheusExporter::Loop() {
  using Clock = std::chrono::steady_clock;
  const auto io_timeout =
      std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(options_.io_timeout_s));
  std::vector<Connection> conns;  // in accept order: the oldest first
  auto close_at = [&conns](size_t i) {
    close(conns[i].fd);
    conns.erase(conns.begin() + static_cast<std::ptrdiff_t>(i));
  };
  while (true) {
    const auto now = Clock::now();
    auto wake = Clock::time_point::max();
    for (size_t i = conns.size(); i-- > 0;) {
      if (conns[i].deadline <= now) {
        close_at(i);  // silent, slow, or not reading its reply: dropped
      } else {
        wake = std::min(wake, conns[i].deadline);
      }
    }
    std::vector<pollfd> fds = {{listen_fd_, POLLIN, 0}, {wake_[0], POLLIN, 0}};
    for (const Connection& c : conns) fds.push_back({c.fd, static_cast<short>(c.reply.empty() ? POLLIN : POLLOUT), 0});
    const int ms = wake == Clock::time_point::max() ? -1 : MsLeft(wake);
    if (poll(fds.data(), fds.size(), ms) < 0) {
      if (errno == EINTR) continue;
      DT_LOG_WARN(kRuntime, "prometheus exporter stopped: poll: {}", std::strerror(errno));
      break;
    }
    if (fds[1].revents != 0) break;  // the destructor
    for (size_t i = conns.size(); i-- > 0;) {
      if (fds[i + 2].revents != 0 && !Advance(&conns[i], io_timeout)) close_at(i);
    }
    if ((fds[0].revents & POLLIN) == 0) continue;
    // Non-blocking: a client that stops reading cannot hold a send(). Take what the backlog holds.
    for (int fd; (fd = accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK)) >= 0;) {
      if (conns.size() >= kMaxConnections) close_at(0);  // a flood of idle connections cannot keep a scrape out
      conns.push_back({fd, Clock::now() + io_timeout, std::string(), std::string(), 0});
    }
  }
  for (const Connection& c : conns) close(c.fd);
}

bool PrometheusExporter::Advance(Connection* c, std::chrono::steady_clock::duration io_timeout) {
  if (c->reply.empty()) {
    char buf[1024];
    const ssize_t n = recv(c->fd, buf, sizeof(buf), 0);
    if (n < 0) return errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR;
    if (n == 0) return false;  // closed before its request was complete
    c->head.append(buf, static_cast<size_t>(n));
    if (c->head.size() >= kMaxHead && !HeadComplete(c->head)) {
      c->reply = Plain("431 Request Header Fields Too Large", "request head over 8 KiB");
    } else if (!HeadComplete(c->head)) {
      return true;
    } else {
      std::string body;
      {
        std::lock_guard<std::mutex> lock(mu_);
        body = FormatPrometheusText(samples_, WallSeconds());
      }
      c->reply = PrometheusHttpReply(c->head, body);
    }
    c->deadline = std::chrono::steady_clock::now() + io_timeout;  // the reply's own time
  }
  const ssize_t n = send(c->fd, c->reply.data() + c->sent, c->reply.size() - c->sent, MSG_NOSIGNAL);
  if (n < 0) return errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR;
  c->sent += static_cast<size_t>(n);
  return c->sent < c->reply.size();  // all sent: close
}

}  // namespace dtrain::runtime
