// RunLock (runtime/checkpoint/run_lock.h) on real files: the holder line, a second Acquire refused
// naming the holder, a clean release, a discarded start leaving the directory as it was, the takeover of a lock left by
// a dead holder (kernel dropped the lock; or still held but naming a pid that no longer exists on this host).

#include "runtime/checkpoint/run_lock.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <string>

#include "tests/testing/subprocess.h"

namespace dtrain::runtime {
namespace {

using testing::ReadFile;
using testing::TempDir;
using testing::WriteFile;

std::string Host() {
  char buf[256] = {};
  gethostname(buf, sizeof(buf) - 1);
  return buf;
}

// A pid that is certainly gone: a child that has exited and been reaped.
pid_t DeadPid() {
  const pid_t pid = fork();
  if (pid == 0) _exit(0);
  int status = 0;
  waitpid(pid, &status, 0);
  return pid;
}

TEST(RunLock, SecondAcquireIsRefusedNamingTheHolderUntilReleased) {
  TempDir dir;
  const std::string run = dir.path() + "/run/nested";  // created by Acquire
  std::unique_ptr<RunLock> first;
  std::string note;
  ASSERT_TRUE(RunLock::Acquire(run, &first, &note).ok());
  EXPECT_EQ(note, "");
  const std::string holder = ReadFile(run + "/.dtrain.lock");
  EXPECT_NE(holder.find("host=" + Host() + " pid=" + std::to_string(getpid()) + " started="), std::string::npos)
      << holder;

  std::unique_ptr<RunLock> second;
  const Status st = RunLock::Acquire(run, &second);
  ASSERT_EQ(st.code(), Status::Code::kInvalidArgument) << st.ToString();
  EXPECT_NE(st.message().find("in use by another dtrain job"), std::string::npos) << st.message();
  EXPECT_NE(st.message().find("pid=" + std::to_string(getpid())), std::string::npos) << st.message();
  EXPECT_EQ(second, nullptr);

  first.reset();  // a clean release empties the file: the next holder has nothing to take over
  EXPECT_EQ(ReadFile(run + "/.dtrain.lock"), "");
  ASSERT_TRUE(RunLock::Acquire(run, &second, &note).ok());
  EXPECT_EQ(note, "");
}

// A start that writes nothing (refused, or a finished run started again): Discard leaves the run directory as it was
// found. A lock file that was there keeps its times (and its empty contents); new ones go, and a new directory too.
TEST(RunLock, DiscardLeavesTheRunDirectoryAsItWasFound) {
  TempDir dir;
  const std::string run = dir.path() + "/run", file = run + "/" + RunLock::kFileName;
  {
    std::unique_ptr<RunLock> first;
    ASSERT_TRUE(RunLock::Acquire(run, &first).ok());  // a finished run's clean release leaves an empty file
  }
  const struct timespec old_times[2] = {{1000000000, 111}, {1000000000, 222}};
  ASSERT_EQ(utimensat(AT_FDCWD, file.c_str(), old_times, 0), 0);
  std::unique_ptr<RunLock> again;
  ASSERT_TRUE(RunLock::Acquire(run, &again).ok());
  EXPECT_NE(ReadFile(file), "");  // holding it: the holder line
  again->Discard();
  struct stat st {};
  ASSERT_EQ(stat(file.c_str(), &st), 0);
  EXPECT_EQ(st.st_mtim.tv_sec, 1000000000);
  EXPECT_EQ(st.st_mtim.tv_nsec, 222);
  EXPECT_EQ(st.st_atim.tv_nsec, 111);
  EXPECT_EQ(ReadFile(file), "");
  again.reset();  // a Discarded lock's destructor changes nothing more
  ASSERT_EQ(stat(file.c_str(), &st), 0);
  EXPECT_EQ(st.st_mtim.tv_nsec, 222);

  const std::string fresh = dir.path() + "/fresh";
  std::unique_ptr<RunLock> made;
  ASSERT_TRUE(RunLock::Acquire(fresh, &made).ok());
  made->Discard();
  EXPECT_NE(access(fresh.c_str(), F_OK), 0);  // the directory it made is gone with its lock file
}

TEST(RunLock, ALockFreedByADeadHolderIsTakenOverWithAMessage) {
  TempDir dir;
  const pid_t dead = DeadPid();
  const std::string line = "host=" + Host() + " pid=" + std::to_string(dead) + " started=2026-01-01T00:00:00Z\n";
  WriteFile(dir.path() + "/.dtrain.lock", line);  // what a killed holder leaves (its lock went with it)
  std::unique_ptr<RunLock> lock;
  std::string note;
  ASSERT_TRUE(RunLock::Acquire(dir.path(), &lock, &note).ok());
  EXPECT_NE(note.find("took over the lock"), std::string::npos) << note;
  EXPECT_NE(note.find("pid=" + std::to_string(dead)), std::string::npos) << note;
  EXPECT_NE(ReadFile(dir.path() + "/.dtrain.lock").find("pid=" + std::to_string(getpid())), std::string::npos);
}

TEST(RunLock, AHeldLockNamingAGonePidOnThisHostIsReplaced) {
  TempDir dir;
  const std::string path = dir.path() + "/.dtrain.lock";
  const pid_t dead = DeadPid();
  WriteFile(path, "host=" + Host() + " pid=" + std::to_string(dead) + " started=2026-01-01T00:00:00Z\n");
  // Someone still holds the lock (as an orphan that inherited the descriptor would).
  const int fd = open(path.c_str(), O_RDWR | O_CLOEXEC);
  ASSERT_GE(fd, 0);
  struct flock fl;
  std::memset(&fl, 0, sizeof(fl));
  fl.l_type = F_WRLCK;
  ASSERT_EQ(fcntl(fd, F_OFD_SETLK, &fl), 0) << std::strerror(errno);
  std::unique_ptr<RunLock> lock;
  std::string note;
  ASSERT_TRUE(RunLock::Acquire(dir.path(), &lock, &note).ok());
  EXPECT_NE(note.find("of pid " + std::to_string(dead) + " on this host, which no longer exists"), std::string::npos)
      << note;
  close(fd);

  // A live holder on this host (pid 1 exists) is never taken over.
  lock.reset();
  WriteFile(path, "host=" + Host() + " pid=1 started=2026-01-01T00:00:00Z\n");
  const int fd2 = open(path.c_str(), O_RDWR | O_CLOEXEC);
  ASSERT_EQ(fcntl(fd2, F_OFD_SETLK, &fl), 0);
  const Status st = RunLock::Acquire(dir.path(), &lock);
  EXPECT_EQ(st.code(), Status::Code::kInvalidArgument) << st.ToString();
  EXPECT_NE(st.message().find("pid=1 "), std::string::npos) << st.message();
  close(fd2);
}

}  // namespace
}  // namespace dtrain::runtime
