#include "data/synthetic_tokens.h"

#include <string>

#include "core/check.h"
#include "core/random.h"

namespace dtrain::data {

Status SyntheticTokens::Create(DeviceContext& ctx, int64_t batch, int64_t seq_len, int64_t vocab, uint64_t seed,
                               int distinct, int buffers, SyntheticTokens* out) {
  if (batch < 1 || seq_len < 1 || vocab < 1 || distinct < 1 || buffers < 1) {
    return Status::InvalidArgument(
        "synthetic tokens: batch, sequence length, vocabulary, count and buffers must be >= 1 (got " +
        std::to_string(batch) + ", " + std::to_string(seq_len) + ", " + std::to_string(vocab) + ", " +
        std::to_string(distinct) + ", " + std::to_string(buffers) + ")");
  }
  SyntheticTokens s;
  s.ctx_ = &ctx;
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
  for (int k = 0; k < buffers; ++k) {
    Tensor x, y;
    DT_RETURN_IF_ERROR(Tensor::Empty({batch, seq_len}, DType::kI32, ctx.allocator(), &x));
    DT_RETURN_IF_ERROR(Tensor::Empty({batch, seq_len}, DType::kI32, ctx.allocator(), &y));
    s.buf_inputs_.push_back(x);
    s.buf_targets_.push_back(y);
  }
  *out = std::move(s);
  return Status::OK();
}

Status SyntheticTokens::Next(data::Batch* b) {
  const size_t k = static_cast<size_t>(next_ % static_cast<int64_t>(inputs_.size()));
  const size_t j = static_cast<size_t>(next_ % static_cast<int64_t>(buf_inputs_.size()));
  ++next_;
  // Queued behind the work on the buffer's previous batch (same stream), which the caller queued before now.
  DT_RETURN_IF_ERROR(buf_inputs_[j].CopyFrom(inputs_[k], ctx_->stream()));
  DT_RETURN_IF_ERROR(buf_targets_[j].CopyFrom(targets_[k], ctx_->stream()));
  b->inputs = buf_inputs_[j];
  b->targets = buf_targets_[j];
  b->epoch = 0;
  b->num_real = inputs_[k].dim(0);
  b->indices.clear();
  b->wait_seconds = 0;
  return Status::OK();
}

}  // namespace dtrain::data
