#include "runtime/checkpoint/run_lock.h"

#include <sys/stat.h>
#include <unistd.h>

#include "core/check.h"

namespace dtrain::runtime {

Status RunLock::Acquire(const std::string& run_dir, std::unique_ptr<RunLock>* out, std::string* note) {
  struct stat st {};
  const bool dir_existed = ::stat(run_dir.c_str(), &st) == 0;
  struct stat file {};
  const bool file_existed = ::stat((run_dir + "/" + kFileName).c_str(), &file) == 0;
  std::unique_ptr<FileLock> lock;
  DT_RETURN_IF_ERROR(FileLock::Acquire(
      {run_dir, kFileName, "run.dir '" + run_dir + "'", "give this run another run.dir"}, &lock, note));
  *out = std::make_unique<RunLock>(std::move(lock), run_dir, dir_existed, file_existed ? &file : nullptr);
  return Status::OK();
}

RunLock::RunLock(std::unique_ptr<FileLock> lock, std::string dir, bool dir_existed, const struct stat* found)
    : lock_(std::move(lock)), dir_(std::move(dir)), dir_existed_(dir_existed), file_existed_(found != nullptr) {
  if (found != nullptr) {
    file_times_[0] = found->st_atim;
    file_times_[1] = found->st_mtim;
  }
}

void RunLock::Discard() {
  if (lock_ == nullptr) return;  // discarded already
  // The file goes while the lock is still held, so no other job can have taken it in between.
  if (!file_existed_ && lock_->StillAtPath()) ::unlink(lock_->path().c_str());
  if (file_existed_) lock_->RestoreTimesOnRelease(file_times_);
  lock_.reset();
  if (!dir_existed_) ::rmdir(dir_.c_str());  // fails, harmlessly, unless it is empty
}

}  // namespace dtrain::runtime
