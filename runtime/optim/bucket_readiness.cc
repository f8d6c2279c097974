#include "runtime/optim/bucket_readiness.h"

#include "core/check.h"

namespace dtrain::runtime {

BucketReadiness::BucketReadiness(std::string owner, std::vector<std::vector<int>> param_buckets, int num_buckets,
                                 std::vector<std::string> names)
    : owner_(std::move(owner)),
      param_buckets_(std::move(param_buckets)),
      bucket_params_(num_buckets, 0),
      names_(std::move(names)) {
  for (const auto& buckets : param_buckets_) {
    for (int k : buckets) ++bucket_params_.at(k);
  }
  Reset();
}

void BucketReadiness::Reset() {
  ready_.assign(param_buckets_.size(), 0);
  remaining_ = bucket_params_;
  next_ = 0;
  started_ = false;
}

Status BucketReadiness::Mark(int param_index) {
  const int n = num_params();
  DT_CHECK_ARG(param_index >= 0 && param_index < n,
               owner_ << ": parameter index " << param_index << " out of range (" << n << " params)");
  if (ready_[param_index]) {
    return Status::FailedPrecondition(owner_ + ": param " + std::to_string(param_index) + " '" + names_[param_index] +
                                      "' announced twice in one step (call Finalize after every backward)");
  }
  if (!started_) {
    started_ = true;
    step_sync_ = sync_;
  }
  ready_[param_index] = 1;
  for (int k : param_buckets_[param_index]) --remaining_[k];
  return Status::OK();
}

std::pair<int, int> BucketReadiness::TakeReady() {
  const int from = next_;
  while (next_ < static_cast<int>(remaining_.size()) && remaining_[next_] == 0) ++next_;
  return {from, next_};
}

std::pair<int, int> BucketReadiness::Finish() {
  if (!started_) step_sync_ = sync_;
  const std::pair<int, int> rest(next_, static_cast<int>(remaining_.size()));
  Reset();
  return rest;
}

}  // namespace dtrain::runtime
