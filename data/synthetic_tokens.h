#pragma once
// SyntheticTokens: random token batches for pure-throughput runs (data.dataset: synthetic_tokens).
//
// Create() draws `distinct` batches of uniform tokens in [0, vocab) from SplitMix64(seed) on the host
// (inputs tok[0, T), targets tok[1, T+1) of each row of T+1 tokens, like data/loader.h's token
// records) and copies them to the context's device once. Next() copies the next of them in the cycle
// (device to device, on the context's stream) into one of `buffers` batch buffers used in rotation and
// hands out that buffer: like the loader's device buffers (data/loader.h), a batch stays valid until the
// (buffers - 1)-th later call, and a CUDA-graph step sees a few fixed input addresses. No host work per
// step and one small copy, so a run measures the model and the communication.
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
  // InvalidArgument unless batch, seq_len, vocab, distinct and buffers are >= 1. `ctx` must outlive the object.
  static Status Create(DeviceContext& ctx, int64_t batch, int64_t seq_len, int64_t vocab, uint64_t seed, int distinct,
                       int buffers, SyntheticTokens* out);
  // The next batch: inputs/targets i32 [batch, seq_len] on the device; epoch 0, num_real = batch, wait 0.
  Status Next(data::Batch* b);

 private:
  DeviceContext* ctx_ = nullptr;
  std::vector<Tensor> inputs_, targets_;          // the distinct batches
  std::vector<Tensor> buf_inputs_, buf_targets_;  // what Next() hands out, in rotation
  int64_t next_ = 0;
};

}  // namespace dtrain::data
