#include "data/synthetic_tokens.h"

#include <string>

#include "core/check.h"
#include "core/random.h"

namespace dtrain::data {

Status SyntheticTokens::Create(DeviceContext& ctx, int64_t batch, int64_t seq_len, int64_t vocab, uint64_t seed,
                               int distinct, SyntheticTokens* out) {
  if (batch < 1 || seq_len < 1 || vocab < 1 || distinct < 1) {
    return Status::InvalidArgument("synthetic tokens: batch, sequence length, vocabulary and count must be >= 1 (got " +
                                   std::to_string(batch) + ", " + std::to_string(seq_len) + ", " +
                                   std::to_string(vocab) + ", " + std::to_string(distinct) + ")");
  }
  SyntheticTokens s;
  SplitMix64 rng(seed);
  std::vector<int32_t> row(seq_len + 1), in(batch * seq_len), tg(batch * seq_len);
  for (int k = 0; k < distinct; ++k) {
    for (int64_t b = 0; b < batch; ++b) {
      for (auto& t : row) t = static_cast<int32_t>(rng.Next() % static_cast<uint64_t>(vocab));
      for (int64_t t = 0; t < seq_len; ++t) {
        in[b * seq_len + t] = row[t];
        tg[b * seq_len + t] = row[t + 1];
      }
    }
    Tensor x, y;
    DT_RETURN_IF_ERROR(Tensor::Empty({batch, seq_len}, DType::kI32, ctx.allocator(), &x));
    DT_RETURN_IF_ERROR(Tensor::Empty({batch, seq_len}, DType::kI32, ctx.allocator(), &y));
    DT_RETURN_IF_ERROR(
        x.CopyFrom(Tensor::Wrap(in.data(), {batch, seq_len}, DType::kI32, DeviceType::kCPU), ctx.stream()));
    DT_RETURN_IF_ERROR(
        y.CopyFrom(Tensor::Wrap(tg.data(), {batch, seq_len}, DType::kI32, DeviceType::kCPU), ctx.stream()));
    DT_RETURN_IF_ERROR(ctx.Synchronize());  // `in`/`tg` are reused for the next batch
    s.inputs_.push_back(x);
    s.targets_.push_back(y);
  }
  *out = std::move(s);
  return Status::OK();
}

Status SyntheticTokens::Next(data::Batch* b) {
  const size_t k = static_cast<size_t>(next_++ % static_cast<int64_t>(inputs_.size()));
  b->inputs = inputs_[k];
  b->targets = targets_[k];
  b->epoch = 0;
  b->num_real = inputs_[k].dim(0);
  b->indices.clear();
  b->wait_seconds = 0;
  return Status::OK();
}

}  // namespace dtrain::data
