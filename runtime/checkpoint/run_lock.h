#pragma once
// RunLock: one job per run directory. Rank 0 holds an advisory lock on `<run.dir>/.dtrain.lock` for the
// job's life, with the holder's host, pid and start time written into the file, so that a second job
// on the same run.dir fails at start (InvalidArgument: exit 2) naming the holder instead of mixing its
// checkpoints and metrics with the first one's.
//
// Why fcntl and not flock: fcntl record locks go through the NFS lock manager (NLM / NFSv4 locks), so
// they also exclude a job on another node that shares the run directory over NFS; flock is local to a
// node on many NFS setups. We take open-file-description locks (F_OFD_SETLK, Linux >= 3.15; plain
// F_SETLK where the kernel lacks them): unlike classic POSIX locks they are not dropped when some other
// descriptor of the file in the process is closed, and they conflict within one process too.
//
// Stale locks: a holder that dies loses its lock in the kernel (on NFS, once the server notices), so
// the next job takes the lock and says whose it was (the file still names the dead holder; a clean
// release empties it). A lock still held whose file names this host and a pid that no longer exists
// (e.g. inherited by an orphaned child) is taken over by replacing the file, also with a message.
// Thread-safety: Acquire may run from any thread; a RunLock is owned by one thread.

#include <memory>
#include <string>

#include "core/status.h"

namespace dtrain::runtime {

class RunLock {
 public:
  static constexpr const char* kFileName = ".dtrain.lock";

  // Creates `run_dir` if needed and takes its lock. *note (optional) says whose stale lock was taken
  // over ("" when none). InvalidArgument naming the holder (host, pid, start time) when another live
  // process holds it; IoError naming the file for any other failure.
  static Status Acquire(const std::string& run_dir, std::unique_ptr<RunLock>* out, std::string* note = nullptr);

  RunLock(int fd, std::string path) : fd_(fd), path_(std::move(path)) {}
  ~RunLock();  // empties the file (a clean release names no holder) and releases the lock
  RunLock(const RunLock&) = delete;
  RunLock& operator=(const RunLock&) = delete;

  const std::string& path() const { return path_; }

 private:
  int fd_;
  std::string path_;
};

}  // namespace dtrain::runtime
