#include "tests/testing/http_client.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cctype>
#include <chrono>
#include <cstdio>
#include <cstdlib>

namespace dtrain::testing {

std::string HttpExchange(const std::string& host, int port, const std::string& request, double timeout_s) {
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return "";
  sockaddr_in a = {};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port));
  inet_pton(AF_INET, host == "localhost" ? "127.0.0.1" : host.c_str(), &a.sin_addr);
  if (connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0) {
    close(fd);
    return "";
  }
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(static_cast<int>(timeout_s * 1e3));
  size_t off = 0;
  while (off < request.size()) {
    const ssize_t n = send(fd, request.data() + off, request.size() - off, MSG_NOSIGNAL);
    if (n <= 0) break;
    off += static_cast<size_t>(n);
  }
  std::string out;
  char buf[4096];
  while (true) {
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    pollfd p = {fd, POLLIN, 0};
    if (left.count() <= 0 || poll(&p, 1, static_cast<int>(left.count())) <= 0) break;
    const ssize_t n = recv(fd, buf, sizeof(buf), 0);
    if (n <= 0) break;
    out.append(buf, static_cast<size_t>(n));
  }
  close(fd);
  return out;
}

int HttpGet(const std::string& host, int port, const std::string& target, std::string* body, double timeout_s) {
  const std::string reply = HttpExchange(
      host, port, "GET " + target + " HTTP/1.1\r\nHost: " + host + "\r\nConnection: close\r\n\r\n", timeout_s);
  body->clear();
  int code = -1;
  if (std::sscanf(reply.c_str(), "HTTP/1.%*d %d", &code) != 1) return -1;
  const size_t head_end = reply.find("\r\n\r\n");
  if (head_end != std::string::npos) *body = reply.substr(head_end + 4);
  // Chunked replies (the Prometheus server's API) are joined: "<hex size>\r\n<bytes>\r\n" ... "0\r\n\r\n".
  if (reply.substr(0, head_end).find("Transfer-Encoding: chunked") != std::string::npos) {
    std::string joined;
    size_t pos = 0;
    while (pos < body->size()) {
      const size_t eol = body->find("\r\n", pos);
      if (eol == std::string::npos) break;
      const size_t size = std::strtoul(body->substr(pos, eol - pos).c_str(), nullptr, 16);
      if (size == 0) break;
      joined += body->substr(eol + 2, size);
      pos = eol + 2 + size + 2;
    }
    *body = joined;
  }
  return code;
}

std::string UrlEncode(const std::string& text) {
  std::string out;
  for (unsigned char c : text) {
    if (std::isalnum(c) || c == '-' || c == '.' || c == '_' || c == '~') {
      out += static_cast<char>(c);
    } else {
      char buf[4];
      std::snprintf(buf, sizeof(buf), "%%%02X", c);
      out += buf;
    }
  }
  return out;
}

}  // namespace dtrain::testing
