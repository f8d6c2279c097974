// SpotWatcher against a scripted fake metadata endpoint on loopback: 404 until the test switches it to
// a notice, then 200 with an AWS instance-action body.

#include "runtime/spot_watcher.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <string>
#include <thread>

#include "runtime/preemption.h"

namespace dtrain::runtime {
namespace {

using Clock = std::chrono::steady_clock;

constexpr char kNotice[] = "{\"action\": \"terminate\", \"time\": \"2026-11-30T08:00:00Z\"}";

std::string HttpResponse(int status, const std::string& body) {
  return "HTTP/1.1 " + std::to_string(status) + (status == 200 ? " OK" : " Not Found") +
         "\r\nContent-Length: " + std::to_string(body.size()) + "\r\nConnection: close\r\n\r\n" + body;
}

// Answers every connection with 404, or with the notice once notice(true); counts requests.
class FakeMetadata {
 public:
  FakeMetadata() {
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
  ~FakeMetadata() {
    ::shutdown(fd_, SHUT_RDWR);
    ::close(fd_);
    thread_.join();
  }
  std::string url() const {
    return "http://127.0.0.1:" + std::to_string(port_) + "/latest/meta-data/spot/instance-action";
  }
  void set_notice(bool on) { notice_ = on; }
  int requests() const { return requests_; }

 private:
  void Serve() {
    for (;;) {
      const int c = ::accept(fd_, nullptr, nullptr);
      if (c < 0) return;
      std::string req;
      char buf[4096];
      while (req.find("\r\n\r\n") == std::string::npos) {
        const ssize_t r = ::recv(c, buf, sizeof(buf), 0);
        if (r <= 0) break;
        req.append(buf, r);
      }
      const std::string resp = notice_ ? HttpResponse(200, kNotice) : HttpResponse(404, "");
      ::send(c, resp.data(), resp.size(), MSG_NOSIGNAL);
      ::close(c);
      ++requests_;
    }
  }

  int fd_ = -1;
  int port_ = 0;
  std::atomic<bool> notice_{false};
  std::atomic<int> requests_{0};
  std::thread thread_;
};

// Waits until pred() or the deadline; returns whether pred() held.
template <typename Pred>
bool WaitFor(Pred pred, double seconds) {
  const auto end = Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(seconds));
  while (Clock::now() < end) {
    if (pred()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return pred();
}

double SecondsSince(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

TEST(SpotWatcher, RejectsEmptyUrlAndNonPositiveInterval) {
  std::unique_ptr<SpotWatcher> w;
  EXPECT_EQ(SpotWatcher::Create({"", 1.0}, &w).code(), Status::Code::kInvalidArgument);
  EXPECT_EQ(SpotWatcher::Create({"http://127.0.0.1:1/", 0.0}, &w).code(), Status::Code::kInvalidArgument);
  EXPECT_EQ(w, nullptr);
}

TEST(SpotWatcher, RaisesSigtermWithinOnePollOfTheNoticeAndNotBefore) {
  Preemption::Clear();
  FakeMetadata server;
  std::unique_ptr<SpotWatcher> w;
  ASSERT_TRUE(SpotWatcher::Create({server.url(), 0.1}, &w).ok());
  // 404s: at least 5 polls answered (0.1 s apart), and no flag.
  ASSERT_TRUE(WaitFor([&] { return server.requests() >= 5; }, 5.0));
  EXPECT_EQ(Preemption::Requested(), 0);
  EXPECT_FALSE(w->noticed());

  const auto switched = Clock::now();
  server.set_notice(true);
  ASSERT_TRUE(WaitFor([] { return Preemption::Requested() != 0; }, 5.0));
  const double latency = SecondsSince(switched);
  EXPECT_LT(latency, 1.0) << "one poll interval (0.1 s) plus a loopback request";
  EXPECT_EQ(Preemption::Requested(), SIGTERM);
  EXPECT_TRUE(w->noticed());

  // Once: the watcher stops polling after the notice.
  const int after = server.requests();
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  EXPECT_EQ(server.requests(), after);
  Preemption::Clear();
}

TEST(SpotWatcher, RefusedPortNeverRaises) {
  Preemption::Clear();
  int port = 0;
  {  // a port that was just free: bound, then closed without listening
    FakeMetadata probe;
    port = std::stoi(probe.url().substr(std::string("http://127.0.0.1:").size()));
  }
  std::unique_ptr<SpotWatcher> w;
  ASSERT_TRUE(SpotWatcher::Create({"http://127.0.0.1:" + std::to_string(port) + "/x", 0.1}, &w).ok());
  std::this_thread::sleep_for(std::chrono::milliseconds(600));  // ~6 refused polls
  EXPECT_EQ(Preemption::Requested(), 0);
  EXPECT_FALSE(w->noticed());
}

TEST(SpotWatcher, DestructorReturnsWithin100msBetweenPolls) {
  FakeMetadata server;
  std::unique_ptr<SpotWatcher> w;
  ASSERT_TRUE(SpotWatcher::Create({server.url(), 3600.0}, &w).ok());
  ASSERT_TRUE(WaitFor([&] { return server.requests() >= 1; }, 5.0));  // now waiting an hour for the next poll
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  const auto t = Clock::now();
  w.reset();
  EXPECT_LT(SecondsSince(t), 0.1);
  EXPECT_EQ(Preemption::Requested(), 0);
}

}  // namespace
}  // namespace dtrain::runtime
