#pragma once
// Test helper (header only): runs a function as `n` ranks in real forked processes on this machine
// (loopback TCP between them), each reporting a line of text back to the test through a pipe.

#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "comm/job_secret.h"
#include "tests/testing/free_port.h"

namespace dtrain::testing {

// A job secret for tests (every rank of a test's job uses the same text unless a test says otherwise).
inline comm::JobSecret TestJobSecret(const char* text = "a-test-job-secret-of-more-than-32-characters") {
  comm::JobSecret s;
  (void)comm::JobSecret::FromText(text, "test", &s);
  return s;
}

struct ForkedRank {
  int exit_code = -1;  // the child's exit status (-1: killed by a signal)
  double seconds = 0;  // how long fn ran in the child (after its start delay)
  std::string report;  // what fn returned
};

namespace detail {

inline void WriteAll(int fd, const std::string& s) {
  size_t off = 0;
  while (off < s.size()) {
    const ssize_t k = ::write(fd, s.data() + off, s.size() - off);
    if (k <= 0) return;
    off += static_cast<size_t>(k);
  }
}

inline std::string ReadAll(int fd) {
  std::string s;
  char buf[4096];
  for (;;) {
    const ssize_t k = ::read(fd, buf, sizeof(buf));
    if (k > 0) {
      s.append(buf, static_cast<size_t>(k));
    } else if (k == 0 || errno != EINTR) {
      return s;
    }
  }
}

}  // namespace detail

// Forks n children; child r sleeps start_delay_s[r] (0 when absent), runs fn(r) and exits 0 with its
// result sent to the parent. Waits for all of them. Call from a single-threaded test.
inline std::vector<ForkedRank> RunForkedRanks(int n, const std::function<std::string(int rank)>& fn,
                                              const std::vector<double>& start_delay_s = {}) {
  std::vector<ForkedRank> out(n);
  std::vector<pid_t> pids(n, -1);
  std::vector<int> fds(n, -1);
  std::fflush(nullptr);  // no buffered output duplicated into the children
  for (int r = 0; r < n; ++r) {
    int p[2];
    if (::pipe(p) != 0) return out;
    const pid_t pid = ::fork();
    if (pid == 0) {
      ::close(p[0]);
      if (r < static_cast<int>(start_delay_s.size())) {
        std::this_thread::sleep_for(std::chrono::duration<double>(start_delay_s[r]));
      }
      const auto t0 = std::chrono::steady_clock::now();
      const std::string report = fn(r);
      const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      detail::WriteAll(p[1], std::to_string(s) + "\n" + report);
      ::close(p[1]);
      std::_Exit(0);  // no gtest teardown, no atexit handlers of the parent
    }
    ::close(p[1]);
    pids[r] = pid;
    fds[r] = p[0];
  }
  for (int r = 0; r < n; ++r) {
    const std::string text = detail::ReadAll(fds[r]);
    ::close(fds[r]);
    const size_t nl = text.find('\n');
    if (nl != std::string::npos) {
      out[r].seconds = std::stod(text.substr(0, nl));
      out[r].report = text.substr(nl + 1);
    }
    int status = 0;
    while (::waitpid(pids[r], &status, 0) < 0 && errno == EINTR) {
    }
    out[r].exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  }
  return out;
}

}  // namespace dtrain::testing
