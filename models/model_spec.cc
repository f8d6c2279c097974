#include "models/model_spec.h"

namespace dtrain::models {
namespace {

std::string Shape(const std::vector<int64_t>& dims) {
  std::string s;
  for (int64_t d : dims) s += (s.empty() ? "" : "x") + std::to_string(d);
  return s;
}

}  // namespace

bool Bf16Params(const proto::TrainConfig& train) {
  return train.master_weights() == "bf16" || train.master_weights() == "split";
}

Status ResolveAutoTokenSizes(const std::string& kind, const proto::DatasetSchema* s, const std::string& what,
                             int64_t* vocab_size, int64_t* max_seq_len) {
  if (*vocab_size != 0 && *max_seq_len != 0) return Status::OK();
  const std::string key = "model." + kind + (*vocab_size == 0 ? ".vocab_size" : ".max_seq_len");
  if (s == nullptr) return Status::InvalidArgument(key + ": 0 (auto) takes it from the training dataset, but " + what);
  if (s->kind() != proto::DatasetSchema::TOKENS || s->vocab_size() <= 0 || s->dims_size() != 1) {
    return Status::InvalidArgument(key + ": 0 (auto) takes it from the training dataset, but " + what +
                                   " has no token vocabulary (" +
                                   (s->kind() == proto::DatasetSchema::IMAGE ? "it holds images" : "none recorded") +
                                   "): set " + key + " in the config");
  }
  if (*vocab_size == 0) *vocab_size = s->vocab_size();
  if (*max_seq_len == 0) *max_seq_len = s->dims(0) - 1;
  return Status::OK();
}

std::vector<MemoryKnob> ChunkedLossKnob(const std::string& kind, int64_t current, int64_t batch_tokens,
                                        std::function<void(proto::Config* cfg, int64_t tokens)> set) {
  constexpr int64_t kChunk = 1024;
  if (current > 0 || batch_tokens <= kChunk) return {};
  return {{"model." + kind + ".loss_chunk_tokens: " + std::to_string(kChunk),
           [set](proto::Config* cfg) { set(cfg, kChunk); }}};
}

Status CheckTokenData(const std::string& kind, const std::string& what, const proto::DatasetSchema& s,
                      int64_t vocab_size, int64_t max_seq_len) {
  if (s.kind() != proto::DatasetSchema::TOKENS) {
    return Status::InvalidArgument(what + " holds images, but model.kind " + kind + " takes tokens");
  }
  if (s.vocab_size() > vocab_size) {
    return Status::InvalidArgument(what + " has token ids up to " + std::to_string(s.vocab_size() - 1) +
                                   " (vocab_size " + std::to_string(s.vocab_size()) + "), but model." + kind +
                                   ".vocab_size is " + std::to_string(vocab_size) + ": raise it to at least " +
                                   std::to_string(s.vocab_size()) + " (or 0: auto, from the dataset)");
  }
  if (s.dims_size() > 0 && s.dims(0) - 1 > max_seq_len) {
    return Status::InvalidArgument(what + " has records of " + std::to_string(s.dims(0)) + " tokens (sequences of " +
                                   std::to_string(s.dims(0) - 1) + "), longer than model." + kind + ".max_seq_len " +
                                   std::to_string(max_seq_len) + ": raise it (or 0: auto, from the dataset)");
  }
  return Status::OK();
}

Status CheckImageClassifierData(const std::string& kind, const std::string& what, const proto::DatasetSchema& schema,
                                const std::vector<int64_t>& input_shape, const std::string& input_key,
                                int64_t num_classes, const std::string& classes_key) {
  if (schema.kind() != proto::DatasetSchema::IMAGE) {
    return Status::InvalidArgument(what + " holds tokens, but model.kind " + kind + " takes images");
  }
  std::vector<int64_t> dims(schema.dims().begin(), schema.dims().end());
  int64_t values = 1, wanted = 1;
  for (int64_t d : dims) values *= d;
  for (int64_t d : input_shape) wanted *= d;
  if (input_shape.size() == 1) {
    if (values != wanted) {
      return Status::InvalidArgument(what + " has images of " + std::to_string(values) + " values, but the " + kind +
                                     " takes " + input_key + " " + std::to_string(wanted));
    }
  } else {
    if (dims.size() == 2) dims.insert(dims.begin(), 1);  // [H, W]: one channel
    if (dims != input_shape) {
      return Status::InvalidArgument(what + " has " + Shape(dims) + " images, but the " + kind + " takes " +
                                     Shape(input_shape) + " (" + input_key + ")");
    }
  }
  if (!schema.has_label()) return Status::InvalidArgument(what + " has no labels: a classifier cannot train on it");
  if (schema.num_classes() > num_classes) {
    return Status::InvalidArgument(what + " has " + std::to_string(schema.num_classes()) + " classes, but " +
                                   classes_key + " is " + std::to_string(num_classes));
  }
  return Status::OK();
}

Status CheckModelSize(const std::string& key, int64_t v, int64_t lo, int64_t hi) {
  if (v >= lo && v <= hi) return Status::OK();
  return Status::InvalidArgument(key + ": " + std::to_string(v) + " is outside [" + std::to_string(lo) + ", " +
                                 std::to_string(hi) + "]");
}

Status AddModelParams(const std::string& model, int64_t rows, int64_t cols, int64_t* total) {
  int64_t n = 0, sum = 0;
  if (__builtin_mul_overflow(rows, cols, &n) || __builtin_add_overflow(*total, n, &sum) || sum > kMaxModelParams) {
    return Status::InvalidArgument(model + ": more than " + std::to_string(kMaxModelParams) +
                                   " parameters (2^34); make the model smaller");
  }
  *total = sum;
  return Status::OK();
}

}  // namespace dtrain::models
