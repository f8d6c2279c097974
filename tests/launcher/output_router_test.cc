#include "launcher/output_router.h"

#include <gtest/gtest.h>
#include <stdlib.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

namespace dtrain::launcher {
namespace {

std::string ReadAll(FILE* f) {
  std::fflush(f);
  std::rewind(f);
  std::string s;
  char buf[4096];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof(buf), f)) > 0) s.append(buf, n);
  return s;
}

struct Capture {
  FILE* out = std::tmpfile();
  FILE* err = std::tmpfile();
  ~Capture() {
    std::fclose(out);
    std::fclose(err);
  }
  OutputRouter::Options Opts(Backend backend) {
    OutputRouter::Options o;
    o.backend = backend;
    o.out = out;
    o.err = err;
    return o;
  }
};

void FeedText(OutputRouter* r, bool from_stderr, const std::string& text) {
  r->Feed(from_stderr, text.data(), text.size());
}

// Verbatim from Open MPI 4.1.4: rank 1 exited with status 3 while rank 0 was running.
constexpr const char* kMpirunExitReport =
    "--------------------------------------------------------------------------\n"
    "Primary job  terminated normally, but 1 process returned\n"
    "a non-zero exit code. Per user-direction, the job has been aborted.\n"
    "--------------------------------------------------------------------------\n"
    "--------------------------------------------------------------------------\n"
    "mpirun detected that one or more processes exited with non-zero status, thus causing\n"
    "the job to be terminated. The first process to do so was:\n"
    "\n"
    "  Process name: [[29367,1],1]\n"
    "  Exit code:    3\n"
    "--------------------------------------------------------------------------\n";

TEST(OutputRouterTest, RoutesRank0AndWarningsOfOtherRanks) {
  Capture cap;
  OutputRouter r(cap.Opts(Backend::kMpirun));
  FeedText(&r, false, "[1,0]<stdout>:step 1 loss 2.30\n[1,1]<stdout>:step 1 loss 2.31\n");
  FeedText(&r, true, "[1,0]<stderr>:rank0 note\n[1,1]<stderr>:12:00:01.123 vm:1 comm W file.cc:42] slow link\n");
  FeedText(&r, false, "[1,2]<stdout>:ERROR: disk full\n");
  r.Finish();
  EXPECT_EQ(ReadAll(cap.out), "step 1 loss 2.30\n");
  EXPECT_EQ(ReadAll(cap.err),
            "rank0 note\n[rank 1] 12:00:01.123 vm:1 comm W file.cc:42] slow link\n"
            "[rank 2] ERROR: disk full\n");
  EXPECT_FALSE(r.failure_seen());
  EXPECT_EQ(r.root_cause().rank, -1);
}

TEST(OutputRouterTest, JoinsLinesSplitAcrossReads) {
  Capture cap;
  OutputRouter r(cap.Opts(Backend::kMpirun));
  FeedText(&r, false, "[1,0]<std");
  FeedText(&r, false, "out>:hel");
  FeedText(&r, false, "lo\n[1,0]<stdout>:no newline");
  r.Finish();
  EXPECT_EQ(ReadAll(cap.out), "hello\nno newline\n");
}

TEST(OutputRouterTest, ParsesMpirunExitCodeReportAndKeepsTail) {
  Capture cap;
  OutputRouter r(cap.Opts(Backend::kMpirun));
  for (int i = 1; i <= 12; ++i) FeedText(&r, false, "[1,1]<stdout>:line " + std::to_string(i) + "\n");
  FeedText(&r, true, kMpirunExitReport);
  r.Finish();
  EXPECT_TRUE(r.failure_seen());
  EXPECT_EQ(r.root_cause().rank, 1);
  EXPECT_EQ(r.root_cause().exit_code, 3);
  EXPECT_EQ(r.root_cause().signal, 0);
  EXPECT_EQ(r.root_cause().ProcessExitCode(), 3);
  const auto tail = r.Tail(1);
  ASSERT_EQ(tail.size(), 10u);
  EXPECT_EQ(tail.front(), "line 3");
  EXPECT_EQ(tail.back(), "line 12");
  EXPECT_TRUE(r.Tail(7).empty());
  // The exit banners are held back until the launcher knows the outcome; for a failure they reach the console's
  // stderr.
  EXPECT_EQ(ReadAll(cap.err), "");
  r.ReleaseHeldBanners(true);
  EXPECT_EQ(ReadAll(cap.err), kMpirunExitReport);
}

// Was: "Primary job terminated normally, but 1 process returned a non-zero exit code" after every rank exited 2
// (bad input, already explained) or 75 (a checkpoint before a preemption). Now only the manager's other messages
// reach the console; the log file keeps everything.
TEST(OutputRouterTest, ExitBannersAreDroppedForACleanOutcome) {
  char dir[] = "/tmp/dtrain_router_XXXXXX";
  ASSERT_NE(mkdtemp(dir), nullptr);
  Capture cap;
  auto opts = cap.Opts(Backend::kMpirun);
  opts.log_dir = dir;
  OutputRouter r(opts);
  const std::string other =
      "--------------------------------------------------------------------------\n"
      "WARNING: There was an error initializing an OpenFabrics device.\n"
      "--------------------------------------------------------------------------\n";
  FeedText(&r, true, other);
  FeedText(&r, true, "mpirun: a line of its own\n");
  FeedText(&r, true, kMpirunExitReport);
  r.Finish();
  EXPECT_EQ(r.root_cause().exit_code, 3);  // still read
  r.ReleaseHeldBanners(false);
  EXPECT_EQ(ReadAll(cap.err), other + "mpirun: a line of its own\n");
  std::ifstream f(std::string(dir) + "/launcher.log");
  std::stringstream all;
  all << f.rdbuf();
  EXPECT_NE(all.str().find("Primary job  terminated normally"), std::string::npos);
  unlink((std::string(dir) + "/launcher.log").c_str());
  rmdir(dir);
}

TEST(OutputRouterTest, AFramedMessageLeftOpenIsPrintedAtTheEnd) {
  Capture cap;
  OutputRouter r(cap.Opts(Backend::kMpirun));
  FeedText(&r, true, "--------------------------------------------------------------------------\nmpirun was killed\n");
  EXPECT_EQ(ReadAll(cap.err), "");
  r.Finish();
  EXPECT_EQ(ReadAll(cap.err),
            "--------------------------------------------------------------------------\nmpirun was killed\n");
}

// Open MPI 4.1 sometimes prints only the first banner of kMpirunExitReport: then the first
// rank-exec end line names the rank. Those lines stay out of the tail and the console.
TEST(OutputRouterTest, RankExecLineNamesTheRankWhenMpirunDoesNot) {
  Capture cap;
  OutputRouter r(cap.Opts(Backend::kMpirun));
  FeedText(&r, false, "[1,0]<stdout>:step 1\n[1,1]<stderr>:r1 last words\n");
  EXPECT_FALSE(r.failure_seen());
  FeedText(&r, true,
           "[1,1]<stderr>:dtrain rank-exec: exit code 5\n[1,0]<stderr>:dtrain rank-exec: signal 15 (Terminated)\n");
  EXPECT_TRUE(r.failure_seen());
  FeedText(&r, true,
           "Primary job  terminated normally, but 1 process returned\n"
           "a non-zero exit code. Per user-direction, the job has been aborted.\n");
  r.Finish();
  EXPECT_EQ(r.root_cause().rank, 1);
  EXPECT_EQ(r.root_cause().exit_code, 5);
  EXPECT_EQ(r.root_cause().signal, 0);
  EXPECT_EQ(r.Tail(1), std::vector<std::string>{"r1 last words"});
  EXPECT_EQ(r.Tail(0), std::vector<std::string>{"step 1"});
  EXPECT_EQ(ReadAll(cap.out), "step 1\n");
  EXPECT_EQ(ReadAll(cap.err).find("rank-exec"), std::string::npos);
}

// A worker whose host got a spot notice says so in a line of its own (launcher/cli/train_cmd.cc): the elastic launcher
// drops that rank's host.
TEST(OutputRouterTest, SpotNoticeLinesNameTheirRanks) {
  Capture cap;
  OutputRouter r(cap.Opts(Backend::kMpirun));
  FeedText(&r, true,
           std::string("[1,0]<stderr>:step 1\n[1,2]<stderr>:") + kSpotNoticeLine + "\n[1,1]<stderr>:not a " +
               kSpotNoticeLine + "\n");
  r.Finish();
  EXPECT_EQ(r.notice_ranks(), std::vector<int>{2});
  EXPECT_FALSE(r.failure_seen());
}

// Every process of a host killed, its network still up: mpirun reports the daemon it lost and names no rank.
TEST(OutputRouterTest, LostDaemonNamesItsHost) {
  Capture cap;
  OutputRouter r(cap.Opts(Backend::kMpirun));
  FeedText(&r, true,
           "--------------------------------------------------------------------------\n"
           "ORTE has lost communication with a remote daemon.\n\n"
           "  HNP daemon   : [[26565,0],0] on node vm\n"
           "  Remote daemon: [[26565,0],2] on node 10.77.0.2\n\n"
           "This is usually due to either a failure of the TCP network\n");
  r.Finish();
  EXPECT_EQ(r.lost_daemon_hosts(), std::vector<std::string>{"10.77.0.2"});
  EXPECT_TRUE(r.failure_seen());
  EXPECT_EQ(r.root_cause().rank, -1);
}

// A node of the step lost under Slurm (slurmd silent, or set DOWN): srun names it before the tasks' reports.
TEST(OutputRouterTest, SrunNodeFailureNamesItsNode) {
  Capture cap;
  OutputRouter r(cap.Opts(Backend::kSrun));
  FeedText(&r, true,
           "srun: error: Node failure on n3\nsrun: error: n3: tasks 4-5: Killed\nsrun: error: n1: tasks 0-1: Killed\n");
  r.Finish();
  EXPECT_EQ(r.lost_daemon_hosts(), std::vector<std::string>{"n3"});
  EXPECT_TRUE(r.failure_seen());
  EXPECT_EQ(r.root_cause().host, "n3");
  EXPECT_EQ(r.root_cause().rank, 4);
}

TEST(OutputRouterTest, MpirunReportWinsOverRankExecLines) {
  Capture cap;
  OutputRouter r(cap.Opts(Backend::kMpirun));
  FeedText(&r, true, "[1,0]<stderr>:dtrain rank-exec: signal 9 (Killed)\n");
  FeedText(&r, true, kMpirunExitReport);
  r.Finish();
  EXPECT_EQ(r.root_cause().rank, 1);
  EXPECT_EQ(r.root_cause().exit_code, 3);
  // A rank-exec line that is not an end report is an ordinary line of the rank.
  OutputRouter r2(cap.Opts(Backend::kMpirun));
  FeedText(&r2, true, "[1,2]<stderr>:dtrain rank-exec: cannot run /x: No such file or directory\n");
  EXPECT_EQ(r2.root_cause().rank, -1);
  EXPECT_EQ(r2.Tail(2), std::vector<std::string>{"dtrain rank-exec: cannot run /x: No such file or directory"});
}

// Every rank fails on the same mistake (a wrong credential, exit 2) within milliseconds; mpirun names the first end
// it noticed (rank 1), but rank 2's own line says it ended first: the summary blames the rank that failed first by
// time.
TEST(OutputRouterTest, TheRankThatFailedFirstByTimeIsTheRootCause) {
  Capture cap;
  OutputRouter r(cap.Opts(Backend::kMpirun));
  FeedText(&r, true,
           "[1,1]<stderr>:dtrain rank-exec: exit code 3 at 1764716400.250000\n"
           "[1,0]<stderr>:dtrain rank-exec: exit code 2 at 1764716400.120000\n"
           "[1,2]<stderr>:dtrain rank-exec: exit code 2 at 1764716400.100000\n");
  FeedText(&r, true, kMpirunExitReport);  // names rank 1, exit code 3
  r.Finish();
  EXPECT_EQ(r.root_cause().rank, 2);
  EXPECT_EQ(r.root_cause().exit_code, 2);
  EXPECT_DOUBLE_EQ(r.root_cause().ended_at, 1764716400.1);
  // Without mpirun's report: the earliest line by time, not the first to arrive.
  OutputRouter r2(cap.Opts(Backend::kMpirun));
  FeedText(&r2, true,
           "[1,0]<stderr>:dtrain rank-exec: signal 15 (Terminated) at 1764716400.300000\n"
           "[1,3]<stderr>:dtrain rank-exec: signal 9 (Killed) at 1764716400.200000\n");
  r2.Finish();
  EXPECT_EQ(r2.root_cause().rank, 3);
  EXPECT_EQ(r2.root_cause().signal, 9);
}

// A rank whose rank-exec died with it (its host went away) says nothing: mpirun, which saw it end, names it even
// though the ranks that lost their peer there wrote timed lines.
TEST(OutputRouterTest, TheManagersReportNamesARankThatCouldNotSpeak) {
  Capture cap;
  OutputRouter r(cap.Opts(Backend::kMpirun));
  FeedText(&r, true, "[1,0]<stderr>:dtrain rank-exec: exit code 1 at 1764716400.500000\n");
  FeedText(&r, true, kMpirunExitReport);  // rank 1: no line of its own
  r.Finish();
  EXPECT_EQ(r.root_cause().rank, 1);
  EXPECT_EQ(r.root_cause().exit_code, 3);
}

TEST(OutputRouterTest, ParsesMpirunSignalReport) {
  Capture cap;
  OutputRouter r(cap.Opts(Backend::kMpirun));
  FeedText(&r, true,
           "mpirun noticed that process rank 5 with PID 0 on node gpu-07 exited on signal 9 (Killed).\n"
           "mpirun noticed that process rank 2 with PID 0 on node gpu-01 exited on signal 15 (Terminated).\n");
  EXPECT_TRUE(r.failure_seen());
  EXPECT_EQ(r.root_cause().rank, 5);  // the first report wins
  EXPECT_EQ(r.root_cause().host, "gpu-07");
  EXPECT_EQ(r.root_cause().signal, 9);
  EXPECT_EQ(r.root_cause().ProcessExitCode(), 137);
  EXPECT_EQ(r.root_cause().Describe(), "signal 9 (Killed)");
}

TEST(OutputRouterTest, ParsesSrunLabelsAndReports) {
  Capture cap;
  OutputRouter r(cap.Opts(Backend::kSrun));
  FeedText(&r, false, " 0: hello from 0\n12: hello from 12\n12: Traceback: fatal thing\n");
  FeedText(&r, true, "srun: error: node3: task 12: Exited with exit code 4\nsrun: error: node1: tasks 0-11: Killed\n");
  r.Finish();
  EXPECT_EQ(ReadAll(cap.out), "hello from 0\n");
  EXPECT_NE(ReadAll(cap.err).find("[rank 12] Traceback: fatal thing\n"), std::string::npos);
  EXPECT_EQ(r.root_cause().rank, 12);
  EXPECT_EQ(r.root_cause().host, "node3");
  EXPECT_EQ(r.root_cause().exit_code, 4);
  EXPECT_EQ(r.Tail(12).size(), 2u);

  OutputRouter s(cap.Opts(Backend::kSrun));
  FeedText(&s, true, "srun: error: node2: task 3: Segmentation fault (core dumped)\n");
  EXPECT_EQ(s.root_cause().rank, 3);
  EXPECT_EQ(s.root_cause().signal, 11);
  EXPECT_EQ(s.root_cause().ProcessExitCode(), 139);
}

TEST(OutputRouterTest, WritesEveryRankToItsLogFile) {
  char dir[] = "/tmp/dtrain_router_XXXXXX";
  ASSERT_NE(mkdtemp(dir), nullptr);
  Capture cap;
  {
    auto opts = cap.Opts(Backend::kMpirun);
    opts.log_dir = dir;
    opts.attempt = 1;
    OutputRouter r(opts);
    FeedText(&r, false, "[1,0]<stdout>:a\n[1,1]<stdout>:b\n[1,1]<stderr>:c\nmpirun says hi\n");
    FeedText(&r, true, "[1,1]<stderr>:dtrain rank-exec: exit code 4\n");
    r.Finish();
    EXPECT_EQ(r.log_error(), "");
  }
  auto read = [&](const char* name) {
    std::ifstream in(std::string(dir) + "/" + name);
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
  };
  const std::string header = "===== dtrain launch: attempt 2 (DTRAIN_RESTART_COUNT=1) =====\n";
  EXPECT_EQ(read("rank-0.log"), header + "a\n");
  EXPECT_EQ(read("rank-1.log"), header + "b\nc\ndtrain rank-exec: exit code 4\n");
  EXPECT_EQ(read("launcher.log"), header + "mpirun says hi\n");
  for (const char* f : {"rank-0.log", "rank-1.log", "launcher.log"}) unlink((std::string(dir) + "/" + f).c_str());
  rmdir(dir);
}

TEST(OutputRouterTest, WarningDetection) {
  EXPECT_TRUE(LooksLikeWarningOrError("12:00:01.123 vm:3 runtime E trainer.cc:88] nan loss"));
  EXPECT_TRUE(LooksLikeWarningOrError("12:00:01.123 vm:3 runtime C trainer.cc:88] boom"));
  EXPECT_FALSE(LooksLikeWarningOrError("12:00:01.123 vm:3 runtime I trainer.cc:88] step 10"));
  EXPECT_TRUE(LooksLikeWarningOrError("Warning: something"));
  EXPECT_TRUE(LooksLikeWarningOrError("CUDA error: out of memory"));
  EXPECT_FALSE(LooksLikeWarningOrError("step 10 loss 1.25"));
}

}  // namespace
}  // namespace dtrain::launcher
