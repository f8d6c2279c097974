#include "runtime/checkpoint/run_lock.h"

#include <sys/stat.h>
#include <unistd.h>

#include "core/check.h"

namespace dtrain::runtime {

Status RunLock::Acquire(const std::string& run_dir, std::unique_ptr<RunLock>* out, std::string* note) {
  struct stat st {};
  const bool dir_existed = ::stat(run_dir.c_str(), &st) == 0;
  const bool file_existed = ::stat((run_dir + "/" + kFileName).c_str(), &st) == 0;
  std::unique_ptr<FileLock> lock;
  DT_RETURN_IF_ERROR(FileLock::Acquire(
      {run_dir, kFileName, "run.dir '" + run_dir + "'", "give this run another run.dir"}, &lock, note));
  *out = std::make_unique<RunLock>(std::move(lock), run_dir, dir_existed, file_existed);
  return Status::OK();
}

void RunLock::Discard() {
  // The file goes while the lock is still held, so no other job can have taken it in between.
  if (!file_existed_ && lock_->StillAtPath()) ::unlink(lock_->path().c_str());
  lock_.reset();
  if (!dir_existed_) ::rmdir(dir_.c_str());  // fails, harmlessly, unless it is empty
}

}  // namespace dtrain::runtime
