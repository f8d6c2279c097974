#include "data/sampler.h"

#include <algorithm>
#include <numeric>

#include "core/check.h"
#include "core/random.h"

namespace dtrain::data {

void EpochPermutation(uint64_t seed, int64_t epoch, int64_t n, bool shuffle, std::vector<int64_t>* perm) {
  perm->resize(static_cast<size_t>(n));
  std::iota(perm->begin(), perm->end(), int64_t{0});
  if (!shuffle || n < 2) return;
  // Exactly data/batch_sampler.h's recipe, so both samplers give one order.
  SplitMix64 epoch_mix(static_cast<uint64_t>(epoch));
  SplitMix64 rng(seed + epoch_mix.Next());
  for (int64_t i = n - 1; i >= 1; --i) {
    std::swap((*perm)[i], (*perm)[rng.Below(static_cast<uint64_t>(i + 1))]);
  }
}

Status Sampler::Create(const SamplerOptions& opts, Sampler* out) {
  DT_CHECK_ARG(opts.num_samples >= 1, "sampler: dataset has " << opts.num_samples << " samples");
  DT_CHECK_ARG(opts.batch_size >= 1, "sampler: batch_size " << opts.batch_size);
  DT_CHECK_ARG(opts.world >= 1 && opts.rank >= 0 && opts.rank < opts.world,
               "sampler: rank " << opts.rank << " of world " << opts.world);
  DT_CHECK_ARG(opts.remainder == RemainderPolicy::kPad || opts.num_samples >= opts.batch_size * opts.world,
               "sampler: " << opts.num_samples << " samples make no global batch of " << opts.batch_size << " x "
                           << opts.world << " ranks with the drop remainder policy");
  Sampler s;
  s.opts_ = opts;
  s.seed_ = opts.seed;
  s.StartEpoch(0);
  *out = std::move(s);
  return Status::OK();
}

Status Sampler::Restore(const SamplerState& state) {
  DT_CHECK_ARG(state.epoch >= 0, "sampler: restore to epoch " << state.epoch);
  DT_CHECK_ARG(state.consumed >= 0 && state.consumed <= opts_.num_samples,
               "sampler: restore to position " << state.consumed << " of a " << opts_.num_samples << "-sample epoch");
  seed_ = state.seed;
  StartEpoch(state.epoch);
  consumed_ = state.consumed;
  return Status::OK();
}

void Sampler::StartEpoch(int64_t epoch) {
  epoch_ = epoch;
  consumed_ = 0;
  EpochPermutation(seed_, epoch_, opts_.num_samples, opts_.shuffle, &perm_);
}

int64_t Sampler::batches_per_epoch() const {
  const int64_t n = opts_.num_samples, g = global_batch();
  return opts_.remainder == RemainderPolicy::kDrop ? n / g : (n + g - 1) / g;
}

void Sampler::Next(SampleBatch* out) {
  const int64_t n = opts_.num_samples, g = global_batch();
  // An epoch is over when nothing is left, or (kDrop) less than a global batch is left.
  if (consumed_ >= n || (opts_.remainder == RemainderPolicy::kDrop && n - consumed_ < g)) StartEpoch(epoch_ + 1);
  out->epoch = epoch_;
  out->position = consumed_;
  out->indices.resize(static_cast<size_t>(opts_.batch_size));
  out->num_real = 0;
  const int64_t first = consumed_ + opts_.rank * opts_.batch_size;
  for (int64_t j = 0; j < opts_.batch_size; ++j) {
    const int64_t p = first + j;
    if (p < n) ++out->num_real;
    out->indices[j] = perm_[p % n];  // p >= n only with kPad: wrap to the permutation's start
  }
  consumed_ = std::min(consumed_ + g, n);
}

}  // namespace dtrain::data
