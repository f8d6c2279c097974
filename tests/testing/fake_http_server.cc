#include "tests/testing/fake_http_server.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <utility>

namespace dtrain::testing {

FakeHttpServer::FakeHttpServer(Respond respond) : respond_(std::move(respond)) {
  fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(addr);
  EXPECT_EQ(::bind(fd_, reinterpret_cast<sockaddr*>(&addr), len), 0);
  EXPECT_EQ(::listen(fd_, 16), 0);
  EXPECT_EQ(::getsockname(fd_, reinterpret_cast<sockaddr*>(&addr), &len), 0);
  port_ = ntohs(addr.sin_port);
  thread_ = std::thread([this] { Serve(); });
}

FakeHttpServer::~FakeHttpServer() {
  ::shutdown(fd_, SHUT_RDWR);  // wakes the accept() of the server thread
  ::close(fd_);
  thread_.join();
}

std::string FakeHttpServer::endpoint() const { return "http://127.0.0.1:" + std::to_string(port_); }

std::vector<std::string> FakeHttpServer::requests() const {
  std::lock_guard<std::mutex> lock(mu_);
  return requests_;
}

void FakeHttpServer::Serve() {
  for (size_t i = 0;; ++i) {
    const int c = ::accept(fd_, nullptr, nullptr);
    if (c < 0) return;
    std::string req;
    char buf[65536];
    size_t want = std::string::npos;  // headers + body, once the headers are in
    while (req.size() < want) {
      const ssize_t r = ::recv(c, buf, sizeof(buf), 0);
      if (r <= 0) break;
      req.append(buf, r);
      const size_t end = req.find("\r\n\r\n");
      if (want == std::string::npos && end != std::string::npos) {
        const size_t cl = req.find("Content-Length: ");
        want = end + 4 + (cl != std::string::npos && cl < end ? std::stoul(req.substr(cl + 16)) : 0);
      }
    }
    {
      std::lock_guard<std::mutex> lock(mu_);
      requests_.push_back(req);
    }
    const std::string resp = respond_(i, req);
    ::send(c, resp.data(), resp.size(), MSG_NOSIGNAL);
    ::close(c);
    ++sent_;
  }
}

std::string HttpAnswer(int status, const std::string& body, const std::string& extra_headers) {
  const char* reason = status == 200 ? "OK" : status == 404 ? "Not Found" : "X";
  return "HTTP/1.1 " + std::to_string(status) + " " + reason + "\r\nContent-Length: " + std::to_string(body.size()) +
         "\r\nConnection: close\r\n" + extra_headers + "\r\n" + body;
}

}  // namespace dtrain::testing
