#include "launcher/host_probe.h"

#include <fcntl.h>
#include <netdb.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <future>

namespace dtrain::launcher {
namespace {

// "" when an ssh server answers on `host:port` within the timeout (with `any_answer`: when the host accepts or
// refuses the connection), else the reason.
std::string Probe(const std::string& host, int port, double timeout_s, bool any_answer = false) {
  addrinfo hints{};
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  const int rc = getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &res);
  if (rc != 0) return std::string("cannot resolve it: ") + gai_strerror(rc);
  std::string why = "no address";
  for (addrinfo* ai = res; ai != nullptr; ai = ai->ai_next) {
    const int fd = socket(ai->ai_family, ai->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, ai->ai_protocol);
    if (fd < 0) continue;
    int err = connect(fd, ai->ai_addr, ai->ai_addrlen) == 0 ? 0 : errno;
    if (err == EINPROGRESS) {
      pollfd p{fd, POLLOUT, 0};
      const int n = poll(&p, 1, static_cast<int>(timeout_s * 1000));
      socklen_t len = sizeof(err);
      if (n == 0) {
        err = ETIMEDOUT;
      } else if (n < 0 || getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) != 0) {
        err = errno;
      }
    }
    if (any_answer && (err == 0 || err == ECONNREFUSED)) {
      close(fd);
      freeaddrinfo(res);
      return "";
    }
    if (err == 0) {
      // Connected; an ssh server speaks first ("SSH-2.0-..."). Some networks accept every TCP
      // connection (a proxy, a firewall), so only the banner proves a reachable ssh server.
      pollfd p{fd, POLLIN, 0};
      char banner[4] = {0};
      const bool spoke = poll(&p, 1, static_cast<int>(timeout_s * 1000)) == 1 && read(fd, banner, 4) == 4 &&
                         std::memcmp(banner, "SSH-", 4) == 0;
      close(fd);
      freeaddrinfo(res);
      return spoke ? "" : "port " + std::to_string(port) + " accepted a connection but no ssh server answered";
    }
    close(fd);
    why = "port " + std::to_string(port) + ": " + std::strerror(err);
  }
  freeaddrinfo(res);
  return why;
}

}  // namespace

bool HostAnswers(const std::string& host, int port, double timeout_s) {
  return Probe(host, port, timeout_s, /*any_answer=*/true).empty();
}

Status ProbeSshHosts(const std::vector<std::string>& hosts, int port, double timeout_s) {
  std::vector<std::future<std::string>> results;
  for (const auto& h : hosts) {
    results.push_back(std::async(std::launch::async, [=] { return Probe(h, port, timeout_s); }));
  }
  for (size_t i = 0; i < hosts.size(); ++i) {
    const std::string why = results[i].get();
    if (!why.empty()) {
      return Status::Unavailable("host '" + hosts[i] + "' is not reachable for ssh (" + why +
                                 "): dtrain launch starts remote workers through mpirun over ssh; check the "
                                 "name, the network, and passwordless ssh (or pass a launch agent with "
                                 "--mpirun-arg=--mca --mpirun-arg=plm_rsh_agent --mpirun-arg=PATH)");
    }
  }
  return Status::OK();
}

}  // namespace dtrain::launcher
