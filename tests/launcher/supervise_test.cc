// `dtrain launch` supervising REAL mpirun runs of a tiny POSIX shell worker (DTRAIN_WORKER_BIN),
// each under this binary's rank-exec (see main() at the end).
// Each worker writes its pid to $DTRAIN_TEST_DIR/pid-RANK so that the tests can check that no
// process is left behind.

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sched.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "core/logging.h"
#include "launcher/exit_codes.h"
#include "launcher/launch.h"
#include "launcher/rank_exec.h"

namespace dtrain::launcher {
namespace {

using std::chrono::steady_clock;

class SuperviseTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/dtrain_launch_XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    setenv("DTRAIN_TEST_DIR", dir_.c_str(), 1);
    setenv("OMPI_ALLOW_RUN_AS_ROOT", "1", 0);  // ctest sets these; so does a root shell by hand
    setenv("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1", 0);
  }
  void TearDown() override {
    unsetenv("DTRAIN_WORKER_BIN");
    unsetenv("DTRAIN_TEST_DIR");
    if (!old_path_.empty()) setenv("PATH", old_path_.c_str(), 1);
    std::filesystem::remove_all(dir_);
  }

  // Puts a shell script named mpirun first in PATH (until TearDown): a process manager that
  // prints what the test needs.
  void FakeMpirun(const std::string& script) {
    const std::string fake = dir_ + "/bin/mpirun";
    std::filesystem::create_directories(dir_ + "/bin");
    std::ofstream(fake) << "#!/bin/sh\n" << script;
    chmod(fake.c_str(), 0755);
    old_path_ = getenv("PATH");
    setenv("PATH", (dir_ + "/bin:" + old_path_).c_str(), 1);
  }

  // Writes the worker script: a prologue (rank, pid file) then `body`.
  void WriteWorker(const std::string& body) {
    const std::string path = dir_ + "/worker.sh";
    std::ofstream(path) << "#!/bin/sh\n"
                           "r=$OMPI_COMM_WORLD_RANK\n"
                           "d=$DTRAIN_TEST_DIR\n"
                           "echo $$ > \"$d/pid-$r.tmp\" && mv \"$d/pid-$r.tmp\" \"$d/pid-$r\"\n"
                        << body;
    chmod(path.c_str(), 0755);
    setenv("DTRAIN_WORKER_BIN", path.c_str(), 1);
  }

  int Launch(std::vector<std::string> args, std::string* err) {
    args.push_back("cfg.yaml");
    testing::internal::CaptureStderr();
    const int rc = RunLaunch(args, /*check=*/nullptr);
    *err = testing::internal::GetCapturedStderr();
    return rc;
  }

  std::string Read(const std::string& name) const {
    std::ifstream in(dir_ + "/" + name);
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
  }
  bool Exists(const std::string& name) const { return std::filesystem::exists(dir_ + "/" + name); }
  pid_t Pid(int rank) const { return static_cast<pid_t>(std::atoi(Read("pid-" + std::to_string(rank)).c_str())); }
  static bool Alive(pid_t pid) { return pid > 0 && kill(pid, 0) == 0; }

  bool WaitFor(const std::vector<std::string>& files, double seconds) const {
    const auto end = steady_clock::now() + std::chrono::duration<double>(seconds);
    while (steady_clock::now() < end) {
      bool all = true;
      for (const auto& f : files) all = all && Exists(f);
      if (all) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    return false;
  }

  // Runs RunLaunch in a forked child (its own signal handlers, subreaper flag and output file),
  // calls `poke(child)` once both workers have written their pid files, returns the wait status.
  template <typename Poke>
  int LaunchInChild(std::vector<std::string> args, Poke poke,
                    const std::vector<std::string>& ready = {"pid-0", "pid-1"}) {
    args.push_back("cfg.yaml");
    const pid_t child = fork();
    if (child == 0) {
      const int fd = open((dir_ + "/launcher.out").c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
      dup2(fd, 1);
      dup2(fd, 2);
      log::Init(-1);  // loggers onto the new stderr
      _exit(RunLaunch(args, /*check=*/nullptr));
    }
    EXPECT_TRUE(WaitFor(ready, 20)) << Read("launcher.out");
    std::this_thread::sleep_for(std::chrono::milliseconds(200));  // workers reach their wait
    poke(child);
    int status = 0;
    EXPECT_EQ(waitpid(child, &status, 0), child);
    return status;
  }

  std::string dir_;
  std::string old_path_;  // PATH before FakeMpirun, restored by TearDown
};

TEST_F(SuperviseTest, SuccessShowsRank0OnlyAndExitsZero) {
  WriteWorker("echo \"hello from $r args $*\"\nexit 0\n");
  testing::internal::CaptureStdout();
  std::string err;
  const int rc = Launch({"--nproc-per-node", "2"}, &err);
  const std::string out = testing::internal::GetCapturedStdout();
  EXPECT_EQ(rc, kExitOk) << err;
  EXPECT_NE(out.find("hello from 0 args train cfg.yaml"), std::string::npos) << out;
  EXPECT_EQ(out.find("hello from 1"), std::string::npos) << out;
}

TEST_F(SuperviseTest, FailingRankIsNamedWithHostTailAndExitCode) {
  WriteWorker(
      "if [ \"$r\" = 1 ]; then\n"
      "  for i in 1 2 3 4 5 6 7 8 9 10 11 12; do echo \"r1 line $i\"; done\n"
      "  sleep 0.3; exit 3\n"
      "fi\n"
      "echo 'rank 0 waits'\n"
      "sleep 60\n");
  std::string err;
  const auto start = steady_clock::now();
  const int rc = Launch({"--nproc-per-node", "2", "--log-dir", dir_ + "/logs"}, &err);
  const double secs = std::chrono::duration<double>(steady_clock::now() - start).count();
  EXPECT_EQ(rc, 3) << err;
  EXPECT_LT(secs, 20.0);
  EXPECT_NE(err.find("rank 1 on host " + log::Hostname() + " failed first: exit code 3"), std::string::npos) << err;
  EXPECT_NE(err.find("  | r1 line 3\n"), std::string::npos) << err;  // the last 10 of 12 lines
  EXPECT_NE(err.find("  | r1 line 12"), std::string::npos) << err;
  EXPECT_EQ(err.find("  | r1 line 2\n"), std::string::npos) << err;
  EXPECT_FALSE(Alive(Pid(0))) << "rank 0 survived the teardown";
  EXPECT_FALSE(Alive(Pid(1)));
  const std::string log1 = Read("logs/rank-1.log");
  EXPECT_NE(log1.find("r1 line 1\n"), std::string::npos) << log1;  // complete output in the file
  EXPECT_NE(log1.find("r1 line 12\n"), std::string::npos) << log1;
  EXPECT_NE(Read("logs/rank-0.log").find("rank 0 waits"), std::string::npos);
}

TEST_F(SuperviseTest, SignalDeathExits128PlusSignal) {
  WriteWorker("if [ \"$r\" = 1 ]; then echo 'about to die'; sleep 0.2; kill -9 $$; fi\nsleep 60\n");
  std::string err;
  const int rc = Launch({"--nproc-per-node", "2"}, &err);
  EXPECT_EQ(rc, ExitCodeForSignal(SIGKILL)) << err;
  EXPECT_NE(err.find("rank 1 on host " + log::Hostname() + " failed first: signal 9"), std::string::npos) << err;
  EXPECT_NE(err.find("  | about to die"), std::string::npos) << err;
  EXPECT_FALSE(Alive(Pid(0)));
}

TEST_F(SuperviseTest, RestartsTheJobUntilItSucceeds) {
  WriteWorker(
      "echo \"$DTRAIN_RESTART_COUNT\" >> \"$d/attempts-$r\"\n"
      "if [ \"$DTRAIN_RESTART_COUNT\" = 0 ] && [ \"$r\" = 1 ]; then exit 5; fi\n"
      "[ \"$DTRAIN_RESTART_COUNT\" = 0 ] && sleep 60\n"
      "exit 0\n");
  std::string err;
  const int rc = Launch({"--nproc-per-node", "2", "--max-restarts", "3"}, &err);
  EXPECT_EQ(rc, kExitOk) << err;
  EXPECT_EQ(Read("attempts-0"), "0\n1\n");
  EXPECT_EQ(Read("attempts-1"), "0\n1\n");
  EXPECT_NE(err.find("failed first: exit code 5 (attempt 1 of 4)"), std::string::npos) << err;
  EXPECT_NE(err.find("DTRAIN_RESTART_COUNT=1"), std::string::npos) << err;
}

TEST_F(SuperviseTest, PreemptedExitIsPassedThroughWithoutRestart) {
  WriteWorker(
      "echo \"$DTRAIN_RESTART_COUNT\" >> \"$d/attempts-$r\"\n"
      "if [ \"$r\" = 1 ]; then sleep 0.2; exit 75; fi\n"
      "sleep 60\n");
  std::string err;
  const int rc = Launch({"--nproc-per-node", "2", "--max-restarts", "3"}, &err);
  EXPECT_EQ(rc, kExitPreempted) << err;
  EXPECT_EQ(Read("attempts-1"), "0\n");
  EXPECT_NE(err.find("rank 1 exited 75 (preempted"), std::string::npos) << err;
}

TEST_F(SuperviseTest, UsageErrorOfAWorkerIsNotRestarted) {
  WriteWorker("echo \"$DTRAIN_RESTART_COUNT\" >> \"$d/attempts-$r\"\nexit 2\n");
  std::string err;
  EXPECT_EQ(Launch({"--nproc-per-node", "2", "--max-restarts", "2"}, &err), kExitUsage) << err;
  EXPECT_EQ(Read("attempts-0"), "0\n");
}

// The mistakes of issue 38 (item 5), each refused with exit 2 naming the flag before any worker starts.

TEST_F(SuperviseTest, LogDirThatIsAFileIsAnErrorBeforeAnythingStarts) {
  WriteWorker("exit 0\n");
  std::ofstream(dir_ + "/notes.txt") << "a user's file\n";
  std::string err;
  EXPECT_EQ(Launch({"--nproc-per-node", "2", "--log-dir", dir_ + "/notes.txt"}, &err), kExitUsage) << err;
  EXPECT_NE(err.find("--log-dir " + dir_ + "/notes.txt: cannot write there: Not a directory"), std::string::npos)
      << err;
  EXPECT_FALSE(Exists("pid-0")) << "a worker started";
  EXPECT_EQ(Read("notes.txt"), "a user's file\n");
  EXPECT_EQ(Launch({"--nproc-per-node", "2", "--log-dir", dir_ + "/notes.txt/logs"}, &err), kExitUsage) << err;
  EXPECT_NE(err.find("--log-dir " + dir_ + "/notes.txt/logs: cannot create '" + dir_ + "/notes.txt/logs'"),
            std::string::npos)
      << err;
  EXPECT_FALSE(Exists("pid-0")) << "a worker started";
}

TEST_F(SuperviseTest, MoreRanksThanCoresIsRefusedUnlessOversubscribe) {
  cpu_set_t cpus;
  ASSERT_EQ(sched_getaffinity(0, sizeof(cpus), &cpus), 0);
  const int cores = CPU_COUNT(&cpus);
  const std::string n = std::to_string(cores + 1);
  WriteWorker("exit 0\n");
  std::string err;
  EXPECT_EQ(Launch({"--nproc-per-node", n}, &err), kExitUsage) << err;
  EXPECT_NE(err.find("dtrain launch: error: --nproc-per-node " + n + ": " + n + " ranks on this machine, which has " +
                     std::to_string(cores) + " CPU core(s)"),
            std::string::npos)
      << err;
  EXPECT_NE(err.find("--oversubscribe"), std::string::npos) << err;
  EXPECT_FALSE(Exists("pid-0")) << "a worker started";
  if (cores > 16) GTEST_SKIP() << "not starting " << n << " processes to show --oversubscribe";
  EXPECT_EQ(Launch({"--nproc-per-node", n, "--oversubscribe"}, &err), kExitOk) << err;
  EXPECT_TRUE(Exists("pid-" + std::to_string(cores))) << err;
}

TEST_F(SuperviseTest, SigtermToTheLauncherReachesEveryWorker) {
  WriteWorker(
      "trap 'echo term > \"$d/marker-$r\"; exit 0' TERM\n"
      "trap '' USR1\n"  // the launcher also sends SIGUSR1 (through mpirun); dtrain treats both alike
      "touch \"$d/ready-$r\"\n"
      "sleep 60 &\n"
      "wait\n");
  const int status =
      LaunchInChild({"--nproc-per-node", "2"}, [](pid_t child) { kill(child, SIGTERM); }, {"ready-0", "ready-1"});
  ASSERT_TRUE(WIFEXITED(status)) << Read("launcher.out");
  // The workers exited 0 (as dtrain workers do when the signal lands as training ends): the job is done,
  // so the launcher exits 0; workers that stop short exit 75 (next test) or die of the signal.
  EXPECT_EQ(WEXITSTATUS(status), 0) << Read("launcher.out");
  EXPECT_EQ(Read("marker-0"), "term\n");
  EXPECT_EQ(Read("marker-1"), "term\n");
  EXPECT_FALSE(Alive(Pid(0)));
  EXPECT_FALSE(Alive(Pid(1)));
}

TEST_F(SuperviseTest, Sigusr1IsForwardedAndPreemptionExits75) {
  WriteWorker(
      "trap 'echo usr1 > \"$d/marker-$r\"; exit 75' USR1\n"
      "touch \"$d/ready-$r\"\n"
      "sleep 60 &\n"
      "wait\n");
  const int status = LaunchInChild({"--nproc-per-node", "2", "--max-restarts", "2"},
                                   [](pid_t child) { kill(child, SIGUSR1); }, {"ready-0", "ready-1"});
  ASSERT_TRUE(WIFEXITED(status)) << Read("launcher.out");
  EXPECT_EQ(WEXITSTATUS(status), kExitPreempted) << Read("launcher.out");
  EXPECT_EQ(Read("marker-0"), "usr1\n");
  EXPECT_EQ(Read("marker-1"), "usr1\n");
}

// SIGTERM to the launcher (a scheduler or spot shutdown) lets ranks checkpoint and exit 75; the
// launcher passes 75 through instead of 143.
TEST_F(SuperviseTest, SigtermLetsRanksExitPreempted) {
  WriteWorker(
      "trap 'echo term > \"$d/marker-$r\"; exit 75' TERM\n"
      "trap '' USR1\n"
      "touch \"$d/ready-$r\"\n"
      "sleep 60 &\n"
      "wait\n");
  const int status = LaunchInChild({"--nproc-per-node", "2", "--max-restarts", "2"},
                                   [](pid_t child) { kill(child, SIGTERM); }, {"ready-0", "ready-1"});
  ASSERT_TRUE(WIFEXITED(status)) << Read("launcher.out");
  EXPECT_EQ(WEXITSTATUS(status), kExitPreempted) << Read("launcher.out");
  EXPECT_EQ(Read("marker-0"), "term\n");
  EXPECT_EQ(Read("marker-1"), "term\n");
}

// A process manager that reports a failure and then hangs (ignoring SIGTERM) is SIGKILLed with its
// whole process group after 2 x --grace-seconds; nothing it started survives.
TEST_F(SuperviseTest, HungProcessManagerIsKilledAfterGrace) {
  FakeMpirun(
      "trap '' TERM\n"
      "echo '[1,1]<stdout>:segfaulting now'\n"
      "echo 'mpirun noticed that process rank 1 with PID 0 on node fakehost exited on signal 11 "
      "(Segmentation fault).' >&2\n"
      "sleep 30 &\n"
      "echo $! > \"$DTRAIN_TEST_DIR/sleep.pid\"\n"
      "wait\n");
  WriteWorker("exit 0\n");
  std::string err;
  const auto start = steady_clock::now();
  const int rc = Launch({"--nproc-per-node", "2", "--grace-seconds", "1"}, &err);
  const double secs = std::chrono::duration<double>(steady_clock::now() - start).count();
  EXPECT_EQ(rc, ExitCodeForSignal(SIGSEGV)) << err;
  EXPECT_NE(err.find("rank 1 on host fakehost failed first: signal 11"), std::string::npos) << err;
  EXPECT_NE(err.find("  | segfaulting now"), std::string::npos) << err;
  EXPECT_NE(err.find("SIGKILL to its process group"), std::string::npos) << err;
  EXPECT_GE(secs, 1.9);
  EXPECT_LT(secs, 8.0);
  const pid_t sleeper = static_cast<pid_t>(std::atoi(Read("sleep.pid").c_str()));
  EXPECT_FALSE(Alive(sleeper));
}

// Open MPI 4.1 sometimes prints only its first banner and no "Process name / Exit code" report:
// the rank-exec line names the rank, and the host comes from the placement.
TEST_F(SuperviseTest, RankExecLineNamesTheRankWhenMpirunReportsNone) {
  FakeMpirun(
      "echo '[1,1]<stderr>:r1 says bye'\n"
      "echo '[1,1]<stderr>:dtrain rank-exec: exit code 5'\n"
      "echo 'Primary job  terminated normally, but 1 process returned' >&2\n"
      "echo 'a non-zero exit code. Per user-direction, the job has been aborted.' >&2\n"
      "exit 5\n");
  WriteWorker("exit 0\n");
  std::string err;
  EXPECT_EQ(Launch({"--nproc-per-node", "2"}, &err), 5) << err;
  EXPECT_NE(err.find("rank 1 on host " + log::Hostname() +
                     " failed first: exit code 5 (attempt 1 of 1); its last "
                     "lines:\n  | r1 says bye\n"),
            std::string::npos)
      << err;
  EXPECT_EQ(err.find("dtrain rank-exec:"), std::string::npos) << err;
}

// Every rank fails on the same credentials error (exit 2) within milliseconds; mpirun names the end it noticed first
// (rank 1), the ranks' own lines say rank 0 failed first. Not retried (exit 2), and the summary names rank 0.
TEST_F(SuperviseTest, CredentialsErrorOfEveryRankIsNotRetriedAndBlamesTheFirstByTime) {
  FakeMpirun(
      "echo \"$DTRAIN_RESTART_COUNT\" >> \"$DTRAIN_TEST_DIR/attempts\"\n"
      "echo '[1,0]<stderr>:S3 rejected the credentials for s3://b/run: SignatureDoesNotMatch'\n"
      "echo '[1,1]<stderr>:S3 rejected the credentials for s3://b/run: SignatureDoesNotMatch'\n"
      "echo '[1,1]<stderr>:dtrain rank-exec: exit code 2 at 1764716400.180000'\n"
      "echo '[1,0]<stderr>:dtrain rank-exec: exit code 2 at 1764716400.120000'\n"
      "echo 'mpirun detected that one or more processes exited with non-zero status, thus causing' >&2\n"
      "echo 'the job to be terminated. The first process to do so was:' >&2\n"
      "echo '  Process name: [[29367,1],1]' >&2\n"
      "echo '  Exit code:    2' >&2\n"
      "exit 2\n");
  WriteWorker("exit 0\n");
  std::string err;
  EXPECT_EQ(Launch({"--nproc-per-node", "2", "--max-restarts", "3"}, &err), kExitUsage) << err;
  EXPECT_EQ(Read("attempts"), "0\n");  // one attempt: never retried
  EXPECT_NE(err.find("rank 0 on host " + log::Hostname() + " failed first: exit code 2 (attempt 1 of 4)"),
            std::string::npos)
      << err;
  EXPECT_NE(err.find("usage/config error (exit 2): not restarting"), std::string::npos) << err;
}

}  // namespace
}  // namespace dtrain::launcher

// This test binary is the launcher here, so like the dtrain binary it also serves the `rank-exec`
// command that the mpirun line runs for each rank (launcher/rank_exec.h).
int main(int argc, char** argv) {
  if (argc > 1 && std::string(argv[1]) == "rank-exec") {
    return dtrain::launcher::RunRankExec(std::vector<std::string>(argv + 2, argv + argc));
  }
  testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
