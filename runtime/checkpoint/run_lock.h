#pragma once
// RunLock: one job per run directory. Rank 0 holds a FileLock (file_lock.h: an fcntl lock that names its holder
// and is taken over when the holder died) on `<run.dir>/.dtrain.lock` for the job's life, so that a second job on
// the same run.dir fails at start (InvalidArgument: exit 2) naming the holder instead of mixing its checkpoints and
// metrics with the first one's.
// Thread-safety: Acquire may run from any thread; a RunLock is owned by one thread.

#include <memory>
#include <string>

#include "core/status.h"
#include "runtime/checkpoint/file_lock.h"

namespace dtrain::runtime {

class RunLock {
 public:
  static constexpr const char* kFileName = ".dtrain.lock";

  // Creates `run_dir` if needed and takes its lock. *note (optional) says whose stale lock was taken
  // over ("" when none). InvalidArgument naming the holder (host, pid, start time) when another live
  // process holds it; IoError naming the file for any other failure.
  static Status Acquire(const std::string& run_dir, std::unique_ptr<RunLock>* out, std::string* note = nullptr);

  RunLock(std::unique_ptr<FileLock> lock, std::string dir, bool dir_existed, bool file_existed)
      : lock_(std::move(lock)), dir_(std::move(dir)), dir_existed_(dir_existed), file_existed_(file_existed) {}
  // Releasing empties the file: a clean release names no holder.
  RunLock(const RunLock&) = delete;
  RunLock& operator=(const RunLock&) = delete;

  const std::string& path() const { return lock_->path(); }

  // For a start that was refused (it must write nothing): releases the lock and removes what Acquire created, the
  // lock file when it was new and run_dir when it was new (and is empty).
  void Discard();

 private:
  std::unique_ptr<FileLock> lock_;
  std::string dir_;
  bool dir_existed_, file_existed_;
};

}  // namespace dtrain::runtime
