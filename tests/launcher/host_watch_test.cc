// HostWatch with real probes and a real attempt: a host that never answers (a name that does not resolve: the probe
// fails at once, every time; the netns test cuts a real host's network) is lost after the heartbeat bound and stops the
// attempt; a listed host beyond the running set that answers (a loopback
// address: refused connections count) makes the watch ask the job for its coordinated checkpoint (SIGUSR1).

#include "launcher/host_watch.h"

#include <gtest/gtest.h>

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "launcher/hostfile.h"
#include "launcher/launch_command.h"
#include "launcher/output_router.h"
#include "launcher/supervisor.h"

namespace dtrain::launcher {
namespace {

using Clock = std::chrono::steady_clock;

struct Fixture {
  LaunchOptions opts;
  std::unique_ptr<ElasticHosts> hosts;
  std::vector<HostSlots> active;
  std::unique_ptr<SupervisorScope> scope;

  // `listed` hosts, the first `running` of them in the attempt.
  Fixture(const std::string& listed, size_t running) {
    opts.hosts = listed;
    opts.elastic_min = 1;
    opts.elastic_max = 2;
    std::vector<HostSlots> all;
    EXPECT_TRUE(ParseHostList(listed, &all).ok());
    hosts = std::make_unique<ElasticHosts>(1, 2, std::chrono::seconds(0));
    hosts->SetListed(all);
    active.assign(all.begin(), all.begin() + static_cast<long>(running));
    EXPECT_TRUE(SupervisorScope::Create(&scope).ok());
  }

  // Runs `sh -c SCRIPT` as the attempt while a watch with `w` looks on.
  AttemptResult Run(const std::string& script, const HostWatchOptions& w, std::vector<std::string>* lost,
                    std::vector<std::string>* answered, bool* grow) {
    LaunchCommand cmd;
    cmd.argv = {"sh", "-c", script};
    OutputRouter::Options ro;
    OutputRouter router(ro);
    AttemptResult result;
    HostWatch watch(opts, w, hosts.get(), active, scope.get());
    EXPECT_TRUE(RunAttempt(cmd, /*grace_seconds=*/1, scope.get(), &router, &result).ok());
    watch.Stop();
    *lost = watch.lost();
    *answered = watch.answered();
    *grow = watch.grow_asked();
    return result;
  }
};

TEST(HostWatchTest, ASilentHostIsLostWithinTheBoundAndStopsTheAttempt) {
  Fixture f("127.0.0.1:1,silent-host.invalid:1", 2);
  HostWatchOptions w;
  w.lost_after_s = 1.5;
  std::vector<std::string> lost, answered;
  bool grow = true;
  const auto t0 = Clock::now();
  const AttemptResult r = f.Run("sleep 30", w, &lost, &answered, &grow);
  const double took = std::chrono::duration<double>(Clock::now() - t0).count();
  EXPECT_EQ(lost, std::vector<std::string>{"silent-host.invalid"});
  EXPECT_TRUE(r.stop_requested);
  EXPECT_EQ(r.stop_signal, 0);
  EXPECT_FALSE(grow);  // at MAX already
  // Lost after 1.5 s of silence (probes every 1 s, 1 s timeout), then SIGTERM to the attempt.
  EXPECT_GT(took, 1.5);
  EXPECT_LT(took, 6.0);
}

TEST(HostWatchTest, AnsweringHostsAreNotLost) {
  Fixture f("127.0.0.1:1,127.0.0.2:1", 2);
  HostWatchOptions w;
  w.lost_after_s = 1.0;
  std::vector<std::string> lost, answered;
  bool grow = true;
  const AttemptResult r = f.Run("sleep 3; exit 0", w, &lost, &answered, &grow);
  EXPECT_TRUE(lost.empty());
  EXPECT_FALSE(r.stop_requested);
  EXPECT_EQ(r.exit_code, 0);
}

TEST(HostWatchTest, AListedHostThatAnswersBeyondTheRunningSetAsksForTheCheckpoint) {
  Fixture f("127.0.0.1:1,127.0.0.2:1", 1);
  HostWatchOptions w;
  w.grow_delay_s = 0.5;
  std::vector<std::string> lost, answered;
  bool grow = false;
  // The attempt stands in for the ranks: SIGUSR1 (forwarded by the supervisor) makes it "save" and exit 75.
  const AttemptResult r = f.Run("trap 'exit 75' USR1; i=0; while [ $i -lt 100 ]; do sleep 0.1; i=$((i+1)); done", w,
                                &lost, &answered, &grow);
  EXPECT_TRUE(grow);
  EXPECT_EQ(answered, std::vector<std::string>{"127.0.0.2"});
  EXPECT_EQ(r.exit_code, 75);
  EXPECT_TRUE(lost.empty());
}

}  // namespace
}  // namespace dtrain::launcher
