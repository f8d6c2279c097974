#pragma once
// AuthAcceptor: the server side of a control listener (the node link's hub, the TCP rendezvous' rank 0).
// It accepts connections and runs the job-secret handshake (comm/job_secret.h) on all of them at once with
// poll(), then reads the protocol's fixed-size hello, and hands the caller only peers that proved the secret.
//
//  - Every connection has its own deadline (per_peer_s from its accept): a silent or slow peer is dropped
//    when its time is up and delays no one else.
//  - At most max_pending handshakes are open; a connection beyond that evicts the oldest open one (a flood of
//    idle connections cannot keep a real peer out: its handshake takes milliseconds).
//  - A peer whose proof is wrong gets the "refused" verdict (nothing about the job) and is closed; every
//    dropped connection is logged with its address (the first few at warning level, then at debug level).
//  - cancel_fd (optional): when it becomes readable (the launcher's signal pipe), Next returns kAborted at
//    once without reading it.
// Ownership: borrows the listener and the secret, which must outlive it. Thread-safety: one thread.

#include <string>
#include <vector>

#include "comm/job_secret.h"
#include "comm/tcp_socket.h"
#include "core/status.h"

namespace dtrain::comm {

struct AuthAcceptorOptions {
  std::string context;     // the protocol's name in the proofs, e.g. "dtrain node-link 2"
  size_t hello_bytes = 0;  // the fixed-size hello read after the handshake
  double per_peer_s = 10;  // handshake and hello, from accept
  size_t max_pending = 64;
  int cancel_fd = -1;
  std::string log_prefix;  // "node 0", "rendezvous": who logs the drops
};

// A peer that proved the secret, and its hello.
struct AuthArrival {
  TcpSocket sock;
  std::string from;  // "address:port"
  std::string hello;
};

class AuthAcceptor {
 public:
  AuthAcceptor(const TcpSocket* listener, const JobSecret* secret, AuthAcceptorOptions opts);
  AuthAcceptor(const AuthAcceptor&) = delete;
  AuthAcceptor& operator=(const AuthAcceptor&) = delete;

  // The next authenticated peer with its hello. kUnavailable "timed out" at `deadline`; kAborted when cancel_fd
  // became readable; kIoError when the listener fails.
  Status Next(Deadline deadline, AuthArrival* out);
  // How many connections were dropped so far (wrong or no proof, silence, eviction, closed early).
  int dropped() const { return dropped_; }

 private:
  struct Pending {
    TcpSocket sock;
    std::string from;
    Deadline deadline;
    Challenge challenge{};
    bool proved = false;  // handshake done; now reading the hello
    std::string buf;      // the answer, then the hello
  };
  void Accept();
  // Reads what is there; true when `p` is finished (arrived or dropped: *arrived says which).
  bool Advance(Pending* p, bool* arrived);
  void Drop(const Pending& p, const std::string& why);

  const TcpSocket* listener_;
  const JobSecret* secret_;
  AuthAcceptorOptions opts_;
  std::vector<Pending> pending_;  // in accept order
  int dropped_ = 0;
};

}  // namespace dtrain::comm
