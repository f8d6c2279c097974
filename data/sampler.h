#pragma once
// Sampler: the resumable global sample order of a data-parallel run, and each rank's share of it.
//
// Order. Epoch e visits the permutation EpochPermutation(seed, e, n) of [0, n): the same
// SplitMix64-driven Fisher-Yates shuffle as data/batch_sampler.h (bit for bit), or the identity
// without shuffle. It depends on (seed, epoch, n) only — never on world size or rank.
//
// Batches. The run consumes the permutation in global batches of G = batch_size * world positions,
// starting at position `consumed`. Rank r takes positions [c + r*batch_size, c + (r+1)*batch_size)
// of the global batch starting at c: the ranks' slices are disjoint and tile the global batch in
// rank order. After the batch, consumed = c + G (capped at n).
//
// Remainder policy, when n - consumed < G at the end of an epoch:
//   kDrop  the last n - consumed samples of the permutation are not visited this epoch; the epoch
//          ends and the next batch starts epoch + 1 at position 0.
//   kPad   the final global batch is filled up to G by wrapping around to the start of the same
//          permutation (like PyTorch's DistributedSampler); every rank still gets batch_size
//          samples. The padding positions come last in global-batch order, so in each rank's slice
//          the real samples form a prefix of length num_real and the rest are repeats.
// Every batch therefore has exactly batch_size samples on every rank.
//
// Resume. SamplerState = (seed, epoch, consumed) where consumed counts permutation positions
// consumed globally in the epoch. Restoring it gives the exact remaining sequence of samples — also
// under a different world size or rank, since only G and the slicing change: the union over ranks of
// what is read after a restore is exactly positions [consumed, n) of the same permutation.
//
// Memory: the permutation is held in full (8 bytes per sample). Thread-compatible.

#include <cstdint>
#include <vector>

#include "core/status.h"

namespace dtrain::data {

enum class RemainderPolicy { kDrop, kPad };

struct SamplerOptions {
  int64_t num_samples = 0;  // n, the dataset size
  int64_t batch_size = 1;   // per rank
  int rank = 0;
  int world = 1;
  uint64_t seed = 0;
  bool shuffle = true;
  RemainderPolicy remainder = RemainderPolicy::kDrop;
};

struct SamplerState {
  uint64_t seed = 0;
  int64_t epoch = 0;
  int64_t consumed = 0;  // permutation positions consumed globally in `epoch`, in [0, n]
};

// This rank's share of one global batch.
struct SampleBatch {
  int64_t epoch = 0;
  int64_t position = 0;          // permutation position where the global batch starts
  std::vector<int64_t> indices;  // batch_size sample indices, in permutation order
  int64_t num_real = 0;          // indices[0, num_real) are real; the rest are kPad repeats
};

// perm = the epoch's order of [0, n) (see data/batch_sampler.h for the exact recipe).
void EpochPermutation(uint64_t seed, int64_t epoch, int64_t n, bool shuffle, std::vector<int64_t>* perm);

class Sampler {
 public:
  // InvalidArgument unless n >= 1, batch_size >= 1, world >= 1, 0 <= rank < world, and — with
  // kDrop — n >= batch_size * world (else no batch would ever be produced). Starts at (seed, 0, 0).
  static Status Create(const SamplerOptions& opts, Sampler* out);

  // Continues from `state` (seed included). InvalidArgument when consumed is outside [0, n] or epoch < 0.
  Status Restore(const SamplerState& state);
  // The position of the next batch: restoring it continues exactly here.
  SamplerState state() const { return {seed_, epoch_, consumed_}; }

  // Fills this rank's next batch and advances by one global batch (moving to the next epoch at
  // the epoch's end, as the remainder policy says).
  void Next(SampleBatch* out);

  // Global batches in a whole epoch (from consumed = 0).
  int64_t batches_per_epoch() const;
  const SamplerOptions& options() const { return opts_; }

 private:
  void StartEpoch(int64_t epoch);
  int64_t global_batch() const { return opts_.batch_size * opts_.world; }

  SamplerOptions opts_;
  uint64_t seed_ = 0;
  int64_t epoch_ = 0, consumed_ = 0;
  std::vector<int64_t> perm_;
};

}  // namespace dtrain::data
