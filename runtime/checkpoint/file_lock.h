#pragma once
// FileLock: one process per lock file, held for the holder's life, with the holder's host, pid and start time
// written into the file so that a refusal names it. The run directory's lock (run_lock.h) and a local checkpoint
// root's owner (store_owner.h) are both one of these.
//
// Why fcntl and not flock: fcntl record locks go through the NFS lock manager (NLM / NFSv4 locks), so they also
// exclude a process on another node that shares the directory over NFS; flock is local to a node on many NFS
// setups. We take open-file-description locks (F_OFD_SETLK, Linux >= 3.15; plain F_SETLK where the kernel lacks
// them): unlike classic POSIX locks they are not dropped when some other descriptor of the file in the process is
// closed, and they conflict within one process too.
//
// Stale locks: a holder that dies loses its lock in the kernel (on NFS, once the server notices), so the next
// process takes the lock and says whose it was (the file still names the dead holder; a clean release empties or
// removes it). A lock still held whose file names this host and a pid that no longer exists (e.g. inherited by an
// orphaned child) is taken over by replacing the file, also with a message.
// Thread-safety: Acquire may run from any thread; a FileLock is owned by one thread.

#include <sys/stat.h>

#include <memory>
#include <string>

#include "core/status.h"

namespace dtrain::runtime {

class FileLock {
 public:
  struct Spec {
    std::string dir;        // created if needed
    std::string file_name;  // the lock file inside `dir`
    // What the lock guards, for messages: "run.dir '/r'" -> "run.dir '/r' is in use by another dtrain job (...)".
    std::string what;
    std::string remedy;              // "give this run another run.dir": ends the refusal
    bool remove_on_release = false;  // a clean release removes the file instead of emptying it
  };

  // Creates spec.dir if needed and takes the lock. *note (optional) says whose stale lock was taken over ("" when
  // none). InvalidArgument naming the holder (host, pid, start time) when another live process holds it; IoError
  // naming the file for any other failure.
  static Status Acquire(const Spec& spec, std::unique_ptr<FileLock>* out, std::string* note = nullptr);

  // Empties (or, when it is still at path(), removes) the file, then releases the lock: a file naming a holder
  // means it died.
  ~FileLock();
  FileLock(const FileLock&) = delete;
  FileLock& operator=(const FileLock&) = delete;

  const std::string& path() const { return path_; }
  // The release (the destructor) gives the emptied file these access and modification times, as futimens() takes
  // them: a start that wrote nothing leaves the file as it found it (runtime/checkpoint/run_lock.h Discard).
  void RestoreTimesOnRelease(const struct timespec (&times)[2]);
  // False when path() no longer names the locked file (it, or a directory above it, was renamed or replaced).
  bool StillAtPath() const;

 private:
  FileLock(int fd, std::string path, bool remove) : fd_(fd), path_(std::move(path)), remove_(remove) {}

  int fd_;
  std::string path_;
  bool remove_;
  bool restore_times_ = false;
  struct timespec times_[2] = {};
};

}  // namespace dtrain::runtime
