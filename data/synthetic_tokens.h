#pragma once
// SyntheticTokens: random token batches for pure-throughput runs (data.dataset: synthetic_tokens).
//
// Create() draws `distinct` batches of uniform tokens in [0, vocab) from SplitMix64(seed) on the host
// (inputs tok[0, T), targets tok[1, T+1) of each row of T+1 tokens, like data/loader.h's token
// records), copies them to the context's device once, and Next() hands them out in a cycle as views:
// no host work and no copies per step, so a run measures the model and the communication alone.
// Synthetic data never converges to anything meaningful: it is not a dataset.
// Not thread-safe.

#include <cstdint>
#include <vector>

#include "core/device_context.h"
#include "core/status.h"
#include "data/loader.h"

namespace dtrain::data {

class SyntheticTokens {
 public:
  // InvalidArgument unless batch, seq_len, vocab >= 1 and distinct >= 1.
  static Status Create(DeviceContext& ctx, int64_t batch, int64_t seq_len, int64_t vocab, uint64_t seed, int distinct,
                       SyntheticTokens* out);
  // The next batch: inputs/targets i32 [batch, seq_len] on the device; epoch 0, num_real = batch, wait 0.
  Status Next(data::Batch* b);

 private:
  std::vector<Tensor> inputs_, targets_;
  int64_t next_ = 0;
};

}  // namespace dtrain::data
