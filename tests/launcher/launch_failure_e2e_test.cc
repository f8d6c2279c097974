// Failure handling of `dtrain launch` with real `dtrain train` workers under real mpirun:
// a worker killed by SIGKILL, an error inside one worker, and bad launch inputs.

#include <dirent.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "tests/testing/subprocess.h"

namespace dtrain::testing {
namespace {

using Clock = std::chrono::steady_clock;

const std::string kData = ::dtrain::testing::kFashionMnistDir;
const std::string kConfig = std::string(DT_SOURCE_DIR) + "/configs/fashion_mnist_mlp.yaml";

// Pids of live processes whose command line contains `needle` (and, if rank >= 0, whose
// environment says OMPI_COMM_WORLD_RANK=rank and which are the worker itself, not its rank-exec).
std::vector<pid_t> FindProcesses(const std::string& needle, int rank = -1) {
  std::vector<pid_t> pids;
  DIR* proc = opendir("/proc");
  if (proc == nullptr) return pids;
  while (dirent* e = readdir(proc)) {
    const pid_t pid = static_cast<pid_t>(std::atoi(e->d_name));
    if (pid <= 0 || pid == getpid()) continue;
    std::string cmdline = ReadFile("/proc/" + std::string(e->d_name) + "/cmdline");
    for (char& c : cmdline) c = c == '\0' ? ' ' : c;
    if (cmdline.find(needle) == std::string::npos || cmdline.find(" train ") == std::string::npos) continue;
    // Zombies (state Z) are gone for our purposes only once reaped; count them as remaining.
    if (rank >= 0) {
      if (cmdline.find(" rank-exec ") != std::string::npos) continue;
      std::string env = ReadFile("/proc/" + std::string(e->d_name) + "/environ");
      if (env.find(std::string("OMPI_COMM_WORLD_RANK=") + std::to_string(rank) + '\0') == std::string::npos) continue;
    }
    pids.push_back(pid);
  }
  closedir(proc);
  return pids;
}

bool WaitUntil(const std::function<bool()>& cond, double seconds) {
  const auto end = Clock::now() + std::chrono::duration<double>(seconds);
  while (Clock::now() < end) {
    if (cond()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return cond();
}

// Starts `dtrain launch <args>` in the background in a session of its own, output to <dir>/out and
// its exit code to <dir>/rc, and stops whatever is left of it when the test ends, on every path out
// (a failed ASSERT returns early): SIGTERM to the launcher's process group (the launcher forwards it
// to mpirun, which stops its workers), SIGKILL to the group after 10 s, then SIGKILL to any mpirun or
// worker still running with `run` on its command line (mpirun runs in a session of its own).
class BackgroundLaunch {
 public:
  BackgroundLaunch(const std::string& dir, const std::string& run, const std::string& args) : dir_(dir), run_(run) {
    // The inner shell is the session leader (setsid), so its pid is the group of the launch.
    const std::string cmd = "setsid -w sh -c 'echo $$ > " + dir + "/pgid; exec " + DtrainBin() + " launch " + args +
                            " > " + dir + "/out 2>&1' ; echo $? > " + dir + "/rc";
    started_ = std::system(("(" + cmd + ") > /dev/null 2>&1 &").c_str()) == 0 &&
               WaitUntil([&] { return !ReadFile(dir + "/pgid").empty(); }, 10);
    if (started_) pgid_ = static_cast<pid_t>(std::atoi(ReadFile(dir + "/pgid").c_str()));
  }
  ~BackgroundLaunch() {
    if (pgid_ > 1 && kill(-pgid_, 0) == 0) {
      kill(-pgid_, SIGTERM);
      if (!WaitUntil([&] { return kill(-pgid_, 0) != 0; }, 10)) kill(-pgid_, SIGKILL);
    }
    for (pid_t pid : FindProcesses(run_)) kill(pid, SIGKILL);
    WaitUntil([&] { return FindProcesses(run_).empty(); }, 10);
  }
  BackgroundLaunch(const BackgroundLaunch&) = delete;
  BackgroundLaunch& operator=(const BackgroundLaunch&) = delete;

  bool started() const { return started_; }
  std::string output() const { return ReadFile(dir_ + "/out"); }
  bool finished() const { return !ReadFile(dir_ + "/rc").empty(); }
  int exit_code() const { return std::atoi(ReadFile(dir_ + "/rc").c_str()); }

 private:
  std::string dir_, run_;
  bool started_ = false;
  pid_t pgid_ = 0;
};

// kill -9 of one worker mid-run: the launcher exits non-zero within 10 s, names that rank and its
// signal, and no process of the job remains.
TEST(LaunchFailureE2E, KillNineOfOneWorkerIsReportedWithin10sAndNothingRemains) {
  DT_SKIP_WITHOUT_FASHION_MNIST();
  TempDir dir;
  const std::string run = dir.path() + "/run";
  BackgroundLaunch launch(
      dir.path(), run,
      "--nproc-per-node 2 " + kConfig + " --set train.device=cpu --set train.log_every=20 --set run.dir=" + run);
  ASSERT_TRUE(launch.started()) << launch.output();
  // Training is under way once rank 0 has written a progress line.
  ASSERT_TRUE(WaitUntil([&] { return ReadFile(run + "/metrics.jsonl").find("\"step\":20") != std::string::npos; }, 60))
      << launch.output();
  const auto victims = FindProcesses(run, /*rank=*/1);
  ASSERT_EQ(victims.size(), 1u) << launch.output();
  ASSERT_EQ(kill(victims[0], SIGKILL), 0);
  const auto killed_at = Clock::now();
  ASSERT_TRUE(WaitUntil([&] { return launch.finished(); }, 30)) << launch.output();
  const double seconds = std::chrono::duration<double>(Clock::now() - killed_at).count();
  EXPECT_LT(seconds, 10.0);
  const std::string out = launch.output();
  EXPECT_EQ(launch.exit_code(), 128 + SIGKILL) << out;
  EXPECT_NE(out.find("rank 1"), std::string::npos) << out;
  EXPECT_NE(out.find("signal 9"), std::string::npos) << out;
  EXPECT_TRUE(FindProcesses(run).empty()) << "workers left behind";
}

// An error inside one worker reaches the console with its rank, and the launcher exits with that
// worker's code (1).
TEST(LaunchFailureE2E, ErrorInsideOneWorkerReachesTheConsoleWithItsRank) {
  DT_SKIP_WITHOUT_FASHION_MNIST();
  TempDir dir;
  const std::string run = dir.path() + "/run";
  ProcessResult r =
      RunCommand("DTRAIN_FAULT=rank=1,step=3,action=error " + DtrainBin() + " launch --nproc-per-node 2 " + kConfig +
                 " --set train.device=cpu --set run.dir=" + run);
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_NE(r.output.find("injected fault"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("rank 1"), std::string::npos) << r.output;
  EXPECT_TRUE(FindProcesses(run).empty()) << "workers left behind";
}

TEST(LaunchFailureE2E, BadLaunchInputsAreOneLineErrors) {
  TempDir dir;
  WriteFile(dir.path() + "/hosts", "# cluster\nnode1 slots=2\nnode2 slots=two\n");
  struct Case {
    std::string args, must_name;
  };
  const std::vector<Case> cases = {
      {"--nproc-per-node 0 " + kConfig, "--nproc-per-node"},
      {"--hostfile " + dir.path() + "/hosts " + kConfig, dir.path() + "/hosts:3"},
      {"--hostfile " + dir.path() + "/missing " + kConfig, dir.path() + "/missing"},
      {"--hosts a:8,:2 " + kConfig, "--hosts"},
      {"--nproc-per-node 2", "CONFIG"},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.args);
    ProcessResult r = RunCommand(DtrainBin() + " launch " + c.args);
    EXPECT_EQ(r.exit_code, 2) << r.output;
    EXPECT_NE(r.output.find(c.must_name), std::string::npos) << r.output;
  }
}

// An unreachable or unknown host fails the launch within seconds with an error naming it (a
// pre-flight TCP probe of the ssh port), instead of whatever mpirun reports — never a hang.
TEST(LaunchFailureE2E, UnreachableOrUnknownHostFailsFastNamingIt) {
  // 10.255.255.1 is a non-routable address: the connection times out instead of being refused.
  for (const std::string host : {"10.255.255.1", "no-such-host.invalid"}) {
    SCOPED_TRACE(host);
    const auto start = Clock::now();
    ProcessResult r = RunCommand("timeout 60 " + DtrainBin() + " launch --hosts " + host + ":1,localhost:1 " + kConfig +
                                 " --set train.device=cpu");
    const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
    EXPECT_EQ(r.exit_code, 2) << r.output;
    EXPECT_LT(seconds, 15.0) << r.output;
    EXPECT_NE(r.output.find("host '" + host + "' is not reachable for ssh"), std::string::npos) << r.output;
  }
}

}  // namespace
}  // namespace dtrain::testing
