#pragma once
// StoreOwner: one job per checkpoint root. Rank 0 takes it before the first read of the root (a scheme whose traits
// say needs_owner, storage/scheme.h), so that a second job pointed at the same root (another run.dir, the same
// checkpoint.url) is refused at start (InvalidArgument: exit 2) naming the holder, instead of resuming from the
// first one's in-flight checkpoint and writing the same step directories.
//
// A root that is a local directory (file://, a path) is guarded by a FileLock (file_lock.h) on `<root>/.dtrain-owner`:
// an fcntl lock that the kernel drops when the holder dies, naming host, pid and start time; a clean end removes the
// file. An object store (s3://) has no locks, and the S3 API offers no compare-and-swap that Ceph RGW (the server
// dtrain is tested against) honours on PUT. So there rank 0 keeps an owner object, `<root>/.dtrain-owner`, with a
// heartbeat, and checks it the way a lease is checked without consensus:
//   1. read it: held by another job with a heartbeat younger than `ttl_s` -> refuse (InvalidArgument: exit 2),
//      naming the holder (host, pid, start, heartbeat age); older, or naming this host and a pid that no longer
//      exists (a job on this host that died, e.g. in a storage outage) -> take it over, saying whose it was;
//   2. write ours (a random token, host, pid, start and heartbeat times), wait `settle_s`, read it back: another
//      token there means a job started at the same moment won the last write -> refuse, naming it;
//   3. Refresh() rewrites the heartbeat every ttl_s / 4 and stops the job (FailedPrecondition) if it finds another
//      token: two jobs never keep writing to one root unnoticed for longer than a refresh period;
//   4. the destructor deletes the object if it is still ours (a clean end leaves no owner).
// What it cannot do: exclude two jobs that start within `settle_s` of each other and whose writes the store orders
// after both read-backs (each then sees its own token); the first Refresh() of the loser stops it. Heartbeats
// are the writers' wall clocks: keep hosts within a fraction of ttl_s of each other (NTP).
// Thread-safety: one thread (rank 0's trainer).

#include <memory>
#include <string>

#include "core/status.h"
#include "runtime/checkpoint/file_lock.h"
#include "storage/storage.h"

namespace dtrain::runtime {

class StoreOwner {
 public:
  static constexpr const char* kKey = ".dtrain-owner";
  struct Options {
    double ttl_s = 120;   // a heartbeat older than this is a dead holder's
    double settle_s = 1;  // between writing the owner object and reading it back
    // A store with a local directory is guarded by a file lock; false: by the owner object like an object store
    // (tests of the object protocol on a file:// store).
    bool lock_local_dirs = true;
  };

  // `store` is borrowed and outlives the owner. *note (optional): whose stale ownership was taken over ("" if none).
  static Status Acquire(storage::Storage* store, const Options& options, std::unique_ptr<StoreOwner>* out,
                        std::string* note = nullptr);
  ~StoreOwner();
  StoreOwner(const StoreOwner&) = delete;
  StoreOwner& operator=(const StoreOwner&) = delete;

  // True when the heartbeat is due (ttl_s / 4 since the last write); for a file lock, when the lock's place is due
  // a check (at the first call, then every ttl_s / 4).
  bool Due() const;
  // Checks the object is still ours and rewrites its heartbeat. FailedPrecondition naming the other job when it
  // is not; the store's error when it cannot be read or written. For a file lock: when the root was moved away
  // (checkpoint.overwrite moves a local root aside after the lock was taken), locks the new root, FailedPrecondition
  // naming the holder when another job took it meanwhile.
  Status Refresh();

 private:
  StoreOwner(storage::Storage* store, Options options, std::string token)
      : store_(store), options_(options), token_(std::move(token)) {}
  Status Write();
  static FileLock::Spec LockSpec(const std::string& dir, const std::string& url);

  std::unique_ptr<FileLock> lock_;  // a local root's lock; then store_ is unused

  storage::Storage* store_;
  Options options_;
  std::string token_;
  double started_ = 0, last_write_ = 0;
};

}  // namespace dtrain::runtime
