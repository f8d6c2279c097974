#pragma once
// RunLock: one job per run directory. Rank 0 holds a FileLock (file_lock.h: an fcntl lock that names its holder
// and is taken over when the holder died) on `<run.dir>/.dtrain.lock` for the job's life, so that a second job on
// the same run.dir fails at start (InvalidArgument: exit 2) naming the holder instead of mixing its checkpoints and
// metrics with the first one's.
// Thread-safety: Acquire may run from any thread; a RunLock is owned by one thread.

#include <sys/stat.h>

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

  // `found`: the lock file as Acquire found it (nullptr: there was none).
  RunLock(std::unique_ptr<FileLock> lock, std::string dir, bool dir_existed, const struct stat* found);
  // Releasing empties the file: a clean release names no holder.
  RunLock(const RunLock&) = delete;
  RunLock& operator=(const RunLock&) = delete;

  const std::string& path() const { return lock_->path(); }

  // For a start that writes nothing (a refused start; a finished run started again): releases the lock and leaves
  // run_dir as Acquire found it: removes the lock file when it was new and run_dir when it was new (and is empty);
  // a lock file that was there gets its access and modification times back (emptied, as a clean release leaves it).
  void Discard();

 private:
  std::unique_ptr<FileLock> lock_;
  std::string dir_;
  bool dir_existed_, file_existed_;
  struct timespec file_times_[2] = {};  // the found lock file's atime and mtime
};

}  // namespace dtrain::runtime
