// `dtrain rank-exec` (launcher/rank_exec.h) run as mpirun runs it: the real binary, real children.

#include "launcher/rank_exec.h"

#include <gtest/gtest.h>
#include <signal.h>

#include <chrono>
#include <cstdlib>
#include <regex>
#include <string>
#include <thread>

#include "core/clock.h"
#include "tests/testing/subprocess.h"

namespace dtrain::launcher {
namespace {

using testing::DtrainBin;
using testing::ReadFile;
using testing::RunCommand;
using testing::TempDir;

std::string RankExec(const std::string& program) { return "exec " + DtrainBin() + " rank-exec " + program; }

// `output` with the time of each rank-exec end line (" at 1764716400.123456") taken out; each such time must lie
// within the test's own clock's [`from`, now].
std::string WithoutTimes(const std::string& output, double from) {
  const std::regex time(" at ([0-9]+\\.[0-9]{6})\n");
  for (std::sregex_iterator it(output.begin(), output.end(), time), end; it != end; ++it) {
    const double t = std::stod((*it)[1].str());
    EXPECT_GE(t, from - 1e-6) << output;
    EXPECT_LE(t, WallSeconds() + 1e-6) << output;
  }
  return std::regex_replace(output, time, "\n");
}

// Alive = the process exists and is not a zombie.
bool Alive(const std::string& pid) {
  const std::string stat = ReadFile("/proc/" + pid + "/stat");
  const auto paren = stat.rfind(')');
  return paren != std::string::npos && paren + 2 < stat.size() && stat[paren + 2] != 'Z';
}

TEST(RankExecTest, ExitCodeIsPassedThroughAndANonZeroEndIsReported) {
  const double t0 = WallSeconds();
  auto r = RunCommand(RankExec("sh -c 'echo hello; exit 5'"));
  EXPECT_EQ(r.exit_code, 5);
  EXPECT_NE(r.output.find("exit code 5 at "), std::string::npos) << r.output;
  EXPECT_EQ(WithoutTimes(r.output, t0), "hello\ndtrain rank-exec: exit code 5\n");
  r = RunCommand(RankExec("sh -c 'echo fine'"));
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_EQ(r.output, "fine\n");  // nothing to report
}

TEST(RankExecTest, SignalDeathIsReportedAndRepeated) {
  const double t0 = WallSeconds();
  const auto r = RunCommand(RankExec("sh -c 'kill -9 $$'"));
  EXPECT_EQ(r.signal, SIGKILL) << r.output;
  EXPECT_EQ(WithoutTimes(r.output, t0), "dtrain rank-exec: signal 9 (Killed)\n");
}

TEST(RankExecTest, ProgramThatCannotRunIsNamedAndExits127) {
  const double t0 = WallSeconds();
  const auto r = RunCommand(RankExec("/nonexistent/worker train cfg.yaml"));
  EXPECT_EQ(r.exit_code, 127);
  EXPECT_EQ(WithoutTimes(r.output, t0),
            "dtrain rank-exec: cannot run /nonexistent/worker: No such file or directory\n"
            "dtrain rank-exec: exit code 127\n");
}

// SIGUSR1 sent to rank-exec alone reaches the program (remote ranks get signals this way; dash's `trap` unblocks
// it, as dtrain's handler does). A program that never gets it exits 3 after 10 s.
TEST(RankExecTest, SignalsArePassedOnToTheProgram) {
  TempDir dir;
  const std::string d = dir.path();
  const double t0 = WallSeconds();
  const auto r = RunCommand("(" + DtrainBin() + " rank-exec sh -c 'trap \"exit 75\" USR1; touch " + d +
                            "/ready; for i in $(seq 200); do sleep 0.05; done; exit 3' & p=$!; while [ ! -e " + d +
                            "/ready ]; do sleep 0.05; done; kill -USR1 $p; wait $p; echo rc=$?)");
  EXPECT_EQ(WithoutTimes(r.output, t0), "dtrain rank-exec: exit code 75\nrc=75\n");
}

// The program starts with SIGUSR1 blocked (and nothing else added): a checkpoint request sent while a worker
// starts stays pending until the worker's handler is in (runtime/checkpoint/preemption.h).
TEST(RankExecTest, ProgramStartsWithSigusr1Held) {
  const auto r = RunCommand(RankExec("grep SigBlk /proc/self/status"));  // (dash would clear the mask)
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const auto colon = r.output.find(':');
  ASSERT_NE(colon, std::string::npos) << r.output;
  const unsigned long long blocked = std::stoull(r.output.substr(colon + 1), nullptr, 16);
  EXPECT_EQ(blocked, 1ull << (SIGUSR1 - 1)) << r.output;
}

// The program does not outlive rank-exec (PR_SET_PDEATHSIG).
TEST(RankExecTest, ProgramDiesWithRankExec) {
  TempDir dir;
  const std::string d = dir.path();
  const auto r = RunCommand("(" + DtrainBin() + " rank-exec sh -c 'echo $$ > " + d + "/pid.tmp && mv " + d +
                            "/pid.tmp " + d + "/pid && exec sleep 60' & p=$!; while [ ! -e " + d +
                            "/pid ]; do sleep 0.05; done; kill -9 $p; wait $p; echo rc=$?)");
  EXPECT_NE(r.output.find("rc=137\n"), std::string::npos) << r.output;  // (sh may say "Killed" first)
  const std::string child = std::to_string(std::atoi(ReadFile(d + "/pid").c_str()));
  const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (Alive(child) && std::chrono::steady_clock::now() < end) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  EXPECT_FALSE(Alive(child)) << "pid " << child;
}

TEST(RankExecTest, NoProgramIsAUsageError) {
  const auto r = RunCommand(DtrainBin() + " rank-exec");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_EQ(r.output, std::string(kRankExitPrefix) + "usage: dtrain rank-exec PROGRAM [ARGS...]\n");
}

}  // namespace
}  // namespace dtrain::launcher
