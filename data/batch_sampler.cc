#include "data/batch_sampler.h"

#include <algorithm>
#include <cstring>
#include <numeric>
#include <string>
#include <utility>

#include "core/random.h"

namespace dtrain::data {

BatchSampler::BatchSampler(int64_t n, int64_t batch_size, uint64_t seed, bool shuffle, bool drop_last, int rank,
                           int world)
    : n_(n),
      batch_size_(batch_size),
      seed_(seed),
      shuffle_(shuffle),
      drop_last_(drop_last),
      rank_(rank),
      world_(world) {
  BuildPermutation();
}

Status BatchSampler::Validate() const {
  if (n_ < 0 || batch_size_ < 1 || world_ < 1 || rank_ < 0 || rank_ >= world_) {
    return Status::InvalidArgument("BatchSampler: need n >= 0, batch_size >= 1, world >= 1, 0 <= rank < world; got n=" +
                                   std::to_string(n_) + " batch_size=" + std::to_string(batch_size_) +
                                   " rank=" + std::to_string(rank_) + " world=" + std::to_string(world_));
  }
  return Status::OK();
}

void BatchSampler::SetEpoch(int64_t epoch) {
  if (epoch == epoch_) return;
  epoch_ = epoch;
  BuildPermutation();
}

void BatchSampler::BuildPermutation() {
  if (!Validate().ok()) {
    perm_.clear();
    return;
  }
  perm_.resize(static_cast<size_t>(n_));
  std::iota(perm_.begin(), perm_.end(), int64_t{0});
  if (!shuffle_) return;
  // The recipe in batch_sampler.h: hashing the epoch starts each epoch's stream at an unrelated point.
  SplitMix64 rng(seed_ + SplitMix64(static_cast<uint64_t>(epoch_)).Next());
  for (int64_t i = n_ - 1; i >= 1; --i) {
    std::swap(perm_[i], perm_[rng.Below(static_cast<uint64_t>(i) + 1)]);
  }
}

int64_t BatchSampler::num_batches() const {
  if (!Validate().ok()) return 0;
  const int64_t global = batch_size_ * world_;
  return drop_last_ ? n_ / global : (n_ + global - 1) / global;
}

void BatchSampler::Batch(int64_t i, std::vector<int64_t>* indices) const {
  indices->clear();
  if (i < 0 || i >= num_batches()) return;
  const int64_t global = batch_size_ * world_;
  const int64_t begin = i * global;
  const int64_t g = std::min(global, n_ - begin);  // this global batch's size
  const int64_t lo = begin + g * rank_ / world_;
  const int64_t hi = begin + g * (rank_ + 1) / world_;
  indices->assign(perm_.begin() + lo, perm_.begin() + hi);
}

Status GatherBatch(const Split& split, const std::vector<int64_t>& idx, float* images, int32_t* labels) {
  if (idx.empty()) return Status::OK();
  if (images == nullptr || labels == nullptr) {
    return Status::InvalidArgument("GatherBatch: null output buffer for a batch of " + std::to_string(idx.size()));
  }
  for (size_t k = 0; k < idx.size(); ++k) {
    if (idx[k] < 0 || idx[k] >= split.n) {
      return Status::InvalidArgument("GatherBatch: index " + std::to_string(idx[k]) + " at position " +
                                     std::to_string(k) + " is outside [0, " + std::to_string(split.n) + ")");
    }
  }
  const size_t pixels = static_cast<size_t>(split.rows * split.cols);
  if (split.images.size() != static_cast<size_t>(split.n) * pixels || split.labels.size() != size_t(split.n)) {
    return Status::InvalidArgument("GatherBatch: split buffers do not match n=" + std::to_string(split.n) +
                                   " rows=" + std::to_string(split.rows) + " cols=" + std::to_string(split.cols));
  }
  for (size_t k = 0; k < idx.size(); ++k) {
    std::memcpy(images + k * pixels, split.images.data() + static_cast<size_t>(idx[k]) * pixels,
                pixels * sizeof(float));
    labels[k] = split.labels[static_cast<size_t>(idx[k])];
  }
  return Status::OK();
}

}  // namespace dtrain::data
