// SpotWatcher against a scripted fake metadata endpoint on loopback: 404 until the test switches it to
// a notice, then 200 with an AWS instance-action body.

#include "runtime/checkpoint/spot_watcher.h"

#include <gtest/gtest.h>
#include <signal.h>

#include <atomic>
#include <chrono>
#include <string>
#include <thread>

#include "runtime/checkpoint/preemption.h"
#include "tests/testing/fake_http_server.h"
#include "tests/testing/fixtures.h"

namespace dtrain::runtime {
namespace {

using Clock = std::chrono::steady_clock;

constexpr char kNotice[] = "{\"action\": \"terminate\", \"time\": \"2026-11-30T08:00:00Z\"}";

// Answers every poll with 404, or with the notice once set_notice(true); counts the answers, and the
// notices as they are answered (before the client can see them, unlike responses_sent()).
class FakeMetadata {
 public:
  std::string url() const { return server_.endpoint() + "/latest/meta-data/spot/instance-action"; }
  void set_notice(bool on) { notice_ = on; }
  int requests() const { return server_.responses_sent(); }
  int notices() const { return notices_; }

 private:
  std::atomic<bool> notice_{false};
  std::atomic<int> notices_{0};
  testing::FakeHttpServer server_{[this](size_t, const std::string&) {
    if (!notice_) return testing::HttpAnswer(404);
    ++notices_;
    return testing::HttpAnswer(200, kNotice);
  }};
};

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
  ASSERT_TRUE(testing::WaitUntil([&] { return server.requests() >= 5; }, 5.0));
  EXPECT_EQ(Preemption::Requested(), 0);
  EXPECT_FALSE(w->noticed());

  const auto switched = Clock::now();
  server.set_notice(true);
  ASSERT_TRUE(testing::WaitUntil([] { return Preemption::Requested() != 0; }, 5.0));
  const double latency = SecondsSince(switched);
  EXPECT_LT(latency, 1.0) << "one poll interval (0.1 s) plus a loopback request";
  EXPECT_EQ(Preemption::Requested(), SIGTERM);
  EXPECT_TRUE(w->noticed());

  // Once: the watcher stops polling after the notice (three intervals later, still one notice answered).
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  EXPECT_EQ(server.notices(), 1);
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
  ASSERT_TRUE(testing::WaitUntil([&] { return server.requests() >= 1; }, 5.0));  // now waiting an hour for the next poll
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  const auto t = Clock::now();
  w.reset();
  EXPECT_LT(SecondsSince(t), 0.1);
  EXPECT_EQ(Preemption::Requested(), 0);
}

}  // namespace
}  // namespace dtrain::runtime
