#pragma once
// FakeHttpServer: a scripted HTTP/1.1 server on a free loopback port, for tests of the HTTP clients
// (S3 retries, the spot-notice poller). One thread accepts connections one at a time; for each it reads
// one request (headers and a Content-Length body), records it, sends respond(i, request) for the i-th
// connection (0-based) verbatim, and closes the connection. Stopped (and joined) by the destructor.

#include <atomic>
#include <cstddef>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace dtrain::testing {

class FakeHttpServer {
 public:
  // `respond` returns the whole response (status line, headers, body); it runs on the server thread.
  using Respond = std::function<std::string(size_t index, const std::string& request)>;
  explicit FakeHttpServer(Respond respond);
  ~FakeHttpServer();
  FakeHttpServer(const FakeHttpServer&) = delete;
  FakeHttpServer& operator=(const FakeHttpServer&) = delete;

  // "http://127.0.0.1:PORT".
  std::string endpoint() const;
  // Every request received so far, in order.
  std::vector<std::string> requests() const;
  // How many responses have been sent.
  int responses_sent() const { return sent_; }

 private:
  void Serve();

  Respond respond_;
  int fd_ = -1;
  int port_ = 0;
  mutable std::mutex mu_;
  std::vector<std::string> requests_;
  std::atomic<int> sent_{0};
  std::thread thread_;  // last: starts after the members it uses exist
};

// "HTTP/1.1 STATUS REASON" with Content-Length, Connection: close, `extra_headers` (each ending in
// "\r\n") and `body`.
std::string HttpAnswer(int status, const std::string& body = "", const std::string& extra_headers = "");

}  // namespace dtrain::testing
