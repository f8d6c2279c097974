#pragma once
// PrometheusExporter: a minimal HTTP/1.1 server on a background thread that answers GET /metrics with the latest
// published samples in the text exposition format (runtime/observe/prometheus_text.h), for a Prometheus server to
// scrape. Plain POSIX sockets: no packaged C++ HTTP server library is among dtrain's allowed dependencies, and
// the protocol needed is small.
//
// What it answers: GET or HEAD of /metrics (any query string) -> 200 with Content-Type
// "text/plain; version=0.0.4; charset=utf-8"; another path -> 404; another method -> 405; a malformed request line
// or an HTTP version other than 1.x -> 400; a request head over 8 KiB -> 431. Every response closes the
// connection. All connections are served at once (one poll() loop), each with its own deadline: at most
// `io_timeout_s` to send its request head, then as long again to take the response, after which it is dropped. At
// most kMaxConnections are open; a new one beyond that closes the oldest. So slow clients (a byte a second) and
// floods of idle connections delay no scrape. There is no authentication: bind it to an address only the scraper
// reaches (the default is loopback; docs/faults.md, "Listeners").
//
// It serves only what Publish() handed it: the caller decides what is exposed (the trainer never passes config
// values but the model kind and the device, so no credentials).
//
// Ownership and threading: Start() binds, listens and starts the thread; the destructor stops and joins it (within
// ~0.1 s) and closes the socket. Publish() and port() may be called from any thread.

#include <chrono>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "core/status.h"
#include "runtime/observe/prometheus_text.h"

namespace dtrain::runtime {

struct PrometheusOptions {
  std::string addr = "127.0.0.1";  // numeric IPv4/IPv6 address or a host name resolving to one; "0.0.0.0": all
  int port = 0;                    // 0: an ephemeral port (port() says which)
  double io_timeout_s = 2;         // per connection, for reading the request and for writing the response
};

class PrometheusExporter {
 public:
  // Listens on addr:port. InvalidArgument when `addr` does not resolve; Unavailable when the port cannot be bound
  // (in use, or privileged), naming addr:port and the system's reason.
  static Status Start(const PrometheusOptions& options, std::unique_ptr<PrometheusExporter>* out);
  ~PrometheusExporter();
  PrometheusExporter(const PrometheusExporter&) = delete;
  PrometheusExporter& operator=(const PrometheusExporter&) = delete;

  // Replaces what /metrics shows (samples with age_of_unix_time are aged at each scrape).
  void Publish(std::vector<PromSample> samples);
  // The bound port.
  int port() const { return port_; }

 private:
  PrometheusExporter() = default;
  // One client: its request head as it arrives, then the reply until sent.
  struct Connection {
    int fd;
    std::chrono::steady_clock::time_point deadline;  // for the head, then for the reply
    std::string head;
    std::string reply;  // empty while the head is read
    size_t sent;
  };
  static constexpr size_t kMaxConnections = 64;
  void Loop();
  // Reads or writes what `c` is ready for; false when it is finished (reply sent, closed, or failed).
  bool Advance(Connection* c, std::chrono::steady_clock::duration io_timeout);

  PrometheusOptions options_;
  int listen_fd_ = -1;
  int wake_[2] = {-1, -1};  // a pipe: the destructor writes a byte to end the poll() of Loop()
  int port_ = 0;
  std::mutex mu_;
  std::vector<PromSample> samples_;  // guarded by mu_
  std::thread thread_;
};

// The reply to one HTTP request head (everything up to the blank line), `body` being the exposition text served
// for /metrics: status line, headers and body. Exposed for tests.
std::string PrometheusHttpReply(const std::string& head, const std::string& body);

}  // namespace dtrain::runtime
