#include "runtime/checkpoint/run_lock.h"

#include "core/check.h"

namespace dtrain::runtime {

Status RunLock::Acquire(const std::string& run_dir, std::unique_ptr<RunLock>* out, std::string* note) {
  std::unique_ptr<FileLock> lock;
  DT_RETURN_IF_ERROR(FileLock::Acquire(
      {run_dir, kFileName, "run.dir '" + run_dir + "'", "give this run another run.dir"}, &lock, note));
  *out = std::make_unique<RunLock>(std::move(lock));
  return Status::OK();
}

}  // namespace dtrain::runtime
