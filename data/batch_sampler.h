#pragma once
// BatchSampler: the sample indices one rank reads, batch by batch, epoch by epoch. GatherBatch copies
// those samples of a Split into caller-owned host buffers.
//
// Order. Each epoch has one global permutation of [0, n) that depends on (seed, epoch, n) only — not on
// world size or rank — so (seed, epoch, samples consumed globally) is enough to resume a run, even at a
// different world size. With shuffle=false it is the identity. With shuffle=true it is a Fisher-Yates
// shuffle driven by dtrain::SplitMix64 (core/random.h), spelled out here so that any
// implementation can reproduce it bit for bit (std::shuffle is avoided: its use of the engine differs
// between standard libraries). All arithmetic is mod 2^64:
//   rng  = SplitMix64(seed + SplitMix64(epoch).Next())
//   perm = [0, 1, ..., n-1]; for i = n-1 down to 1: swap(perm[i], perm[rng.Below(i + 1)])
// where Next() is SplitMix64's output and Below(b) = (Next() * b) >> 64 (128-bit product; its bias,
// below b / 2^64, is negligible).
//
// Batches. Global batch b covers permutation positions [b*GB, min((b+1)*GB, n)), GB = batch_size*world.
// Rank r takes the contiguous slice [g*r/world, g*(r+1)/world) of it, g being that global batch's size:
// a full global batch gives every rank exactly batch_size samples, and the ranks' slices tile it in rank
// order (disjoint, union = the global batch).
// Remainder policy: with drop_last the incomplete final global batch (n % GB samples) is dropped and
// num_batches() = n / GB. Without it the final global batch is kept (smaller), num_batches() =
// ceil(n / GB), and it is split as evenly as possible: per-rank sizes differ by at most one, so a rank
// gets 0 samples when n % GB < world (it must still take part in that step's collectives).
//
// Memory: the permutation is held in full (8 bytes per sample). Thread-compatible: const methods may
// run concurrently; SetEpoch must not race with them.

#include <cstdint>
#include <vector>

#include "core/status.h"
#include "data/fashion_mnist.h"

namespace dtrain::data {

class BatchSampler {
 public:
  // Starts at epoch 0. The arguments must pass Validate(); when they do not, num_batches() is 0.
  BatchSampler(int64_t n, int64_t batch_size, uint64_t seed, bool shuffle, bool drop_last, int rank = 0, int world = 1);

  // InvalidArgument unless n >= 0, batch_size >= 1, world >= 1 and 0 <= rank < world.
  Status Validate() const;

  // Selects the epoch's permutation (recomputed in O(n) when the epoch changes).
  void SetEpoch(int64_t epoch);
  int64_t epoch() const { return epoch_; }

  // Batches per epoch, the same on every rank.
  int64_t num_batches() const;

  // Replaces *indices with this rank's sample indices of batch i, in permutation order.
  // Empty when i is outside [0, num_batches()).
  void Batch(int64_t i, std::vector<int64_t>* indices) const;

 private:
  void BuildPermutation();  // perm_ for epoch_ (empty when the arguments are invalid)

  int64_t n_, batch_size_;
  uint64_t seed_;
  bool shuffle_, drop_last_;
  int rank_, world_;
  int64_t epoch_ = 0;
  std::vector<int64_t> perm_;
};

// Copies samples idx[0..k) of `split` into images (k*rows*cols floats) and labels (k ints), in idx order.
// The buffers are the caller's (pinned host memory, for instance). InvalidArgument, with nothing written,
// when an index is outside [0, split.n) or a buffer is null while idx is non-empty.
Status GatherBatch(const Split& split, const std::vector<int64_t>& idx, float* images, int32_t* labels);

}  // namespace dtrain::data
