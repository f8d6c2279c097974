#include "comm/auth_acceptor.h"

#include <poll.h>
#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "core/logging.h"

namespace dtrain::comm {
namespace {

// Drops past this many are logged at debug level only (a flood must not flood the log).
constexpr int kLoggedDrops = 8;

}  // namespace

AuthAcceptor::AuthAcceptor(const TcpSocket* listener, const JobSecret* secret, AuthAcceptorOptions opts)
    : listener_(listener), secret_(secret), opts_(std::move(opts)) {}

void AuthAcceptor::Drop(const Pending& p, const std::string& why) {
  ++dropped_;
  if (dropped_ <= kLoggedDrops) {
    DT_LOG_WARN(kComm, "{}: dropped a connection from {}: {}{}", opts_.log_prefix, p.from, why,
                dropped_ == kLoggedDrops ? " (further drops are logged at debug level)" : "");
  } else {
    DT_LOG_DEBUG(kComm, "{}: dropped a connection from {}: {}", opts_.log_prefix, p.from, why);
  }
}

void AuthAcceptor::Accept() {
  Pending p;
  if (!listener_->Accept(DeadlineIn(0), &p.sock, &p.from).ok()) return;  // gone between poll and accept
  p.deadline = DeadlineIn(opts_.per_peer_s);
  Status st = JobSecret::MakeChallenge(&p.challenge);
  if (st.ok()) st = p.sock.SendAll(p.challenge.data(), p.challenge.size(), DeadlineIn(1), p.from);
  if (!st.ok()) {
    Drop(p, st.message());
    return;
  }
  if (pending_.size() >= opts_.max_pending) {
    Drop(pending_.front(),
         "more than " + std::to_string(opts_.max_pending) + " connections were handshaking at once; the oldest goes");
    pending_.erase(pending_.begin());
  }
  pending_.push_back(std::move(p));
}

bool AuthAcceptor::Advance(Pending* p, bool* arrived) {
  *arrived = false;
  for (;;) {
    const size_t need = p->proved ? opts_.hello_bytes : kAnswerBytes;
    if (p->buf.size() == need) {
      if (p->proved) {
        *arrived = true;
        return true;
      }
      Answer answer;
      std::copy(p->buf.begin(), p->buf.end(), answer.begin());
      Verdict verdict;
      const bool ok = secret_->Check(opts_.context, p->challenge, answer, &verdict);
      (void)p->sock.SendAll(verdict.data(), verdict.size(), DeadlineIn(1), p->from);
      if (!ok) {
        Drop(*p, "it does not know the job secret (not a process of this job)");
        return true;
      }
      p->proved = true;
      p->buf.clear();
      continue;
    }
    char chunk[512];
    const size_t want = std::min(sizeof(chunk), need - p->buf.size());
    const ssize_t k = ::recv(p->sock.fd(), chunk, want, MSG_DONTWAIT);
    if (k == 0) {
      Drop(*p, p->proved ? "closed before its hello" : "closed during the handshake");
      return true;
    }
    if (k < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) return false;
      Drop(*p, std::strerror(errno));
      return true;
    }
    p->buf.append(chunk, static_cast<size_t>(k));
  }
}

Status AuthAcceptor::Next(Deadline deadline, AuthArrival* out) {
  for (;;) {
    // Drop every handshake whose time is up; the nearest remaining deadline bounds the wait.
    const auto now = std::chrono::steady_clock::now();
    Deadline wake = deadline;
    for (size_t i = 0; i < pending_.size();) {
      if (pending_[i].deadline <= now) {
        Drop(pending_[i], pending_[i].proved ? "no hello within the time a peer has"
                                             : "no answer to the job-secret challenge in time");
        pending_.erase(pending_.begin() + static_cast<std::ptrdiff_t>(i));
      } else {
        wake = std::min(wake, pending_[i].deadline);
        ++i;
      }
    }
    if (now >= deadline) return Status::Unavailable("waiting for a connection timed out");

    std::vector<pollfd> fds;
    fds.push_back({listener_->fd(), POLLIN, 0});
    fds.push_back({opts_.cancel_fd, POLLIN, 0});  // poll ignores a negative fd
    for (const Pending& p : pending_) fds.push_back({p.sock.fd(), POLLIN, 0});
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(wake - now).count();
    const int rc = ::poll(fds.data(), fds.size(), static_cast<int>(std::clamp<int64_t>(left + 1, 0, 1 << 30)));
    if (rc < 0) {
      if (errno == EINTR) continue;
      return Status::IoError(std::string("poll on the listener: ") + std::strerror(errno));
    }
    if (fds[1].revents != 0) return Status::Aborted("interrupted");
    // Pending connections first (their indices shift once the listener adds one).
    for (size_t i = fds.size(); i-- > 2;) {
      if (fds[i].revents == 0) continue;
      Pending& p = pending_[i - 2];
      bool arrived = false;
      if (!Advance(&p, &arrived)) continue;
      if (arrived) {
        out->sock = std::move(p.sock);
        out->from = p.from;
        out->hello = std::move(p.buf);
        pending_.erase(pending_.begin() + static_cast<std::ptrdiff_t>(i - 2));
        return Status::OK();
      }
      pending_.erase(pending_.begin() + static_cast<std::ptrdiff_t>(i - 2));
    }
    if (fds[0].revents & (POLLERR | POLLNVAL)) return Status::IoError("the listening socket failed");
    if (fds[0].revents != 0) Accept();
  }
}

}  // namespace dtrain::comm
