#pragma once
// The virtual cluster of scripts/netns_cluster.sh for tests (hosts dtns1..dtnsN at 10.77.0.1..N), and the
// machine-wide lock its fixed names need. Header-only: tests that use it run the script through RunCommand.

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <string>

#include "tests/testing/subprocess.h"

namespace dtrain::testing {

// One user of the fixed-name cluster per machine at a time: a second test run would otherwise
// tear down the namespaces under the first. Blocks until the lock is free.
class MachineLock {
 public:
  explicit MachineLock(const std::string& path) : fd_(open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644)) {
    if (fd_ >= 0 && flock(fd_, LOCK_EX) != 0) {
      close(fd_);
      fd_ = -1;
    }
  }
  ~MachineLock() {
    if (fd_ >= 0) close(fd_);  // releases the lock
  }
  MachineLock(const MachineLock&) = delete;
  MachineLock& operator=(const MachineLock&) = delete;
  bool held() const { return fd_ >= 0; }

 private:
  int fd_;
};

// The virtual cluster; the destructor tears it down if Down() was not called (failed assertions).
class NetnsCluster {
 public:
  static constexpr int kSkipExit = 77;  // netns_cluster.sh: not possible on this machine
  NetnsCluster() = default;
  ~NetnsCluster() {
    if (!down_) Down();
  }
  NetnsCluster(const NetnsCluster&) = delete;
  NetnsCluster& operator=(const NetnsCluster&) = delete;

  ProcessResult Up(int hosts) { return RunCommand(Script() + " up " + std::to_string(hosts)); }
  ProcessResult Down() {
    down_ = true;
    return RunCommand(Script() + " down");
  }
  static std::string Script() { return std::string(DT_SOURCE_DIR) + "/scripts/netns_cluster.sh"; }
  static std::string Agent() { return std::string(DT_SOURCE_DIR) + "/scripts/netns_rsh.sh"; }

 private:
  bool down_ = false;
};

}  // namespace dtrain::testing
