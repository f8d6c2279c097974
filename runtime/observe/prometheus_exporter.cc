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

// Reads the request head (up to and including the blank line) within the deadline. False on timeout, a closed
// connection or an error; *too_long when kMaxHead bytes came without a blank line.
bool ReadHead(int fd, std::chrono::steady_clock::time_point deadline, std::string* head, bool* too_long) {
  *too_long = false;
  char buf[1024];
  while (head->find("\r\n\r\n") == std::string::npos && head->find("\n\n") == std::string::npos) {
    if (head->size() >= kMaxHead) {
      *too_long = true;
      return true;
    }
    pollfd p = {fd, POLLIN, 0};
    const int ms = MsLeft(deadline);
    if (ms == 0 || poll(&p, 1, ms) <= 0) return false;
    const ssize_t n = recv(fd, buf, sizeof(buf), 0);
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) continue;
    if (n <= 0) return false;
    head->append(buf, static_cast<size_t>(n));
  }
  return true;
}

void WriteAll(int fd, const std::string& data, std::chrono::steady_clock::time_point deadline) {
  size_t off = 0;
  while (off < data.size()) {
    pollfd p = {fd, POLLOUT, 0};
    const int ms = MsLeft(deadline);
    if (ms == 0 || poll(&p, 1, ms) <= 0) return;
    const ssize_t n = send(fd, data.data() + off, data.size() - off, MSG_NOSIGNAL);
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) continue;
    if (n <= 0) return;
    off += static_cast<size_t>(n);
  }
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
    if (bind(e->listen_fd_, res->ai_addr, res->ai_addrlen) != 0 || listen(e->listen_fd_, 16) != 0) err = errno;
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

void PrometheusExporter::Loop() {
  while (true) {
    pollfd p[2] = {{listen_fd_, POLLIN, 0}, {wake_[0], POLLIN, 0}};
    if (poll(p, 2, -1) < 0) {
      if (errno == EINTR) continue;
      DT_LOG_WARN(kRuntime, "prometheus exporter stopped: poll: {}", std::strerror(errno));
      return;
    }
    if (p[1].revents != 0) return;  // the destructor
    if ((p[0].revents & POLLIN) == 0) continue;
    // Non-blocking: a client that stops reading cannot hold a send() past the deadline.
    const int fd = accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
    if (fd < 0) continue;  // the client went away, or out of descriptors for a moment: the next scrape retries
    Serve(fd);
    close(fd);
  }
}

void PrometheusExporter::Serve(int fd) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration_cast<std::chrono::nanoseconds>(
                                                               std::chrono::duration<double>(options_.io_timeout_s));
  std::string head;
  bool too_long = false;
  if (!ReadHead(fd, deadline, &head, &too_long)) return;  // silent, closed or timed out: dropped
  if (too_long) {
    WriteAll(fd, Plain("431 Request Header Fields Too Large", "request head over 8 KiB"), deadline);
    return;
  }
  std::string body;
  {
    std::lock_guard<std::mutex> lock(mu_);
    body = FormatPrometheusText(samples_, WallSeconds());
  }
  WriteAll(fd, PrometheusHttpReply(head, body), deadline);
}

}  // namespace dtrain::runtime
