#include "data/sampler.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <numeric>
#include <vector>

#include "data/batch_sampler.h"

namespace dtrain::data {
namespace {

SamplerOptions Opts(int64_t n, int64_t b, int world, RemainderPolicy rem, uint64_t seed = 42) {
  SamplerOptions o;
  o.num_samples = n;
  o.batch_size = b;
  o.world = world;
  o.seed = seed;
  o.remainder = rem;
  return o;
}

std::vector<Sampler> Ranks(SamplerOptions o, const SamplerState* from = nullptr) {
  std::vector<Sampler> s(o.world);
  for (int r = 0; r < o.world; ++r) {
    o.rank = r;
    EXPECT_TRUE(Sampler::Create(o, &s[r]).ok());
    if (from != nullptr) {
      EXPECT_TRUE(s[r].Restore(*from).ok());
    }
  }
  return s;
}

// Runs `steps` global steps on every rank; returns the real samples seen (in global order:
// batch by batch, rank by rank), and checks that all ranks agree on the state.
std::vector<int64_t> RunSteps(std::vector<Sampler>* ranks, int64_t steps) {
  std::vector<int64_t> seen;
  SampleBatch b;
  for (int64_t s = 0; s < steps; ++s) {
    for (auto& r : *ranks) {
      r.Next(&b);
      EXPECT_EQ(static_cast<int64_t>(b.indices.size()), r.options().batch_size);
      seen.insert(seen.end(), b.indices.begin(), b.indices.begin() + b.num_real);
    }
    for (auto& r : *ranks) EXPECT_EQ(r.state().consumed, (*ranks)[0].state().consumed);
  }
  return seen;
}

TEST(SamplerTest, MatchesBatchSamplerOrder) {
  std::vector<int64_t> perm, batch;
  EpochPermutation(9, 3, 1000, true, &perm);
  BatchSampler bs(1000, 1000, 9, true, false);
  bs.SetEpoch(3);
  bs.Batch(0, &batch);
  EXPECT_EQ(perm, batch);
  EpochPermutation(9, 3, 5, false, &perm);
  EXPECT_EQ(perm, (std::vector<int64_t>{0, 1, 2, 3, 4}));
}

TEST(SamplerTest, EpochSeenExactlyOnceAcrossRanksWithPad) {
  for (int world = 1; world <= 4; ++world) {
    for (int64_t n : {97, 100, 101, 7}) {
      const auto o = Opts(n, 5, world, RemainderPolicy::kPad);
      auto ranks = Ranks(o);
      const int64_t g = 5 * world;
      EXPECT_EQ(ranks[0].batches_per_epoch(), (n + g - 1) / g);
      std::vector<int64_t> seen = RunSteps(&ranks, ranks[0].batches_per_epoch());
      std::sort(seen.begin(), seen.end());
      std::vector<int64_t> all(n);
      std::iota(all.begin(), all.end(), int64_t{0});
      EXPECT_EQ(seen, all) << "world " << world << " n " << n;
      EXPECT_EQ(ranks[0].state().consumed, n);
      SampleBatch b;  // the next batch starts epoch 1
      ranks[0].Next(&b);
      EXPECT_EQ(b.epoch, 1);
      EXPECT_EQ(b.position, 0);
    }
  }
}

TEST(SamplerTest, DropPolicyVisitsAllButTheTailOnce) {
  for (int world = 1; world <= 4; ++world) {
    const int64_t n = 103, b = 4, g = b * world;
    auto ranks = Ranks(Opts(n, b, world, RemainderPolicy::kDrop));
    EXPECT_EQ(ranks[0].batches_per_epoch(), n / g);
    std::vector<int64_t> seen = RunSteps(&ranks, n / g);
    ASSERT_EQ(static_cast<int64_t>(seen.size()), (n / g) * g);
    std::vector<int64_t> perm;
    EpochPermutation(42, 0, n, true, &perm);
    // Exactly the first (n / g) * g positions of the permutation, each once, in order.
    EXPECT_EQ(seen, std::vector<int64_t>(perm.begin(), perm.begin() + seen.size())) << "world " << world;
    SampleBatch next;
    ranks[0].Next(&next);
    EXPECT_EQ(next.epoch, 1);
  }
}

TEST(SamplerTest, PadRepeatsComeLastAndWrapToThePermutationStart) {
  auto ranks = Ranks(Opts(10, 4, 2, RemainderPolicy::kPad));  // G = 8: batches at 0 and 8
  std::vector<int64_t> perm;
  EpochPermutation(42, 0, 10, true, &perm);
  SampleBatch b0, b1;
  ranks[0].Next(&b0);
  ranks[1].Next(&b1);
  ranks[0].Next(&b0);  // positions 8, 9, 10->0, 11->1
  ranks[1].Next(&b1);  // positions 12->2 .. 15->5: all padding
  EXPECT_EQ(b0.num_real, 2);
  EXPECT_EQ(b0.indices, (std::vector<int64_t>{perm[8], perm[9], perm[0], perm[1]}));
  EXPECT_EQ(b1.num_real, 0);
  EXPECT_EQ(b1.indices, (std::vector<int64_t>{perm[2], perm[3], perm[4], perm[5]}));
}

TEST(SamplerTest, SameSeedSameOrderDifferentSeedDifferentOrder) {
  auto a = Ranks(Opts(500, 8, 3, RemainderPolicy::kDrop, 5));
  auto b = Ranks(Opts(500, 8, 3, RemainderPolicy::kDrop, 5));
  auto c = Ranks(Opts(500, 8, 3, RemainderPolicy::kDrop, 6));
  const auto sa = RunSteps(&a, 50), sb = RunSteps(&b, 50), sc = RunSteps(&c, 50);  // crosses into epoch 2
  EXPECT_EQ(sa, sb);
  EXPECT_NE(sa, sc);
  EXPECT_EQ(a[0].state().epoch, 2);
}

// Resume after k steps at world w1, continue at world w2: the union of what was read before and
// after is exactly the epoch, each sample once.
TEST(SamplerTest, MidEpochResumeSameAndDifferentWorldSize) {
  const int64_t n = 211, b = 6;
  for (int w1 = 1; w1 <= 4; ++w1) {
    for (int w2 = 1; w2 <= 4; ++w2) {
      auto before = Ranks(Opts(n, b, w1, RemainderPolicy::kPad));
      const int64_t k = before[0].batches_per_epoch() / 2;
      std::vector<int64_t> seen = RunSteps(&before, k);
      const SamplerState st = before[0].state();
      ASSERT_EQ(st.consumed, k * b * w1);
      auto after = Ranks(Opts(n, b, w2, RemainderPolicy::kPad, /*seed=*/999), &st);  // the state's seed wins
      const int64_t rest = (n - st.consumed + b * w2 - 1) / (b * w2);
      std::vector<int64_t> tail = RunSteps(&after, rest);
      // The continuation is exactly permutation positions [consumed, n), in order.
      std::vector<int64_t> perm;
      EpochPermutation(42, 0, n, true, &perm);
      EXPECT_EQ(tail, std::vector<int64_t>(perm.begin() + st.consumed, perm.end())) << w1 << "->" << w2;
      seen.insert(seen.end(), tail.begin(), tail.end());
      std::sort(seen.begin(), seen.end());
      std::vector<int64_t> all(n);
      std::iota(all.begin(), all.end(), int64_t{0});
      EXPECT_EQ(seen, all) << w1 << "->" << w2;
    }
  }
}

TEST(SamplerTest, RejectsBadOptionsAndStates) {
  Sampler s;
  EXPECT_EQ(Sampler::Create(Opts(0, 1, 1, RemainderPolicy::kPad), &s).code(), Status::Code::kInvalidArgument);
  EXPECT_EQ(Sampler::Create(Opts(10, 4, 3, RemainderPolicy::kDrop), &s).code(), Status::Code::kInvalidArgument);
  auto o = Opts(10, 4, 3, RemainderPolicy::kPad);
  o.rank = 3;
  EXPECT_EQ(Sampler::Create(o, &s).code(), Status::Code::kInvalidArgument);
  ASSERT_TRUE(Sampler::Create(Opts(10, 2, 1, RemainderPolicy::kPad), &s).ok());
  EXPECT_EQ(s.Restore({42, 0, 11}).code(), Status::Code::kInvalidArgument);
  EXPECT_EQ(s.Restore({42, -1, 0}).code(), Status::Code::kInvalidArgument);
}

}  // namespace
}  // namespace dtrain::data
