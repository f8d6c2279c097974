#include "runtime/train/model_factory.h"

#include <utility>

#include "core/check.h"
#include "models/model_registry.h"

namespace dtrain::runtime {

Status RegisterModel(const std::string& kind, ModelFactory factory) {
  models::ModelSpec spec;
  spec.kind = kind;
  if (factory) {
    spec.build = [kind, factory = std::move(factory)](const proto::Config& cfg, DeviceContext& ctx,
                                                      std::unique_ptr<models::Model>* out) {
      out->reset();
      const Status st = factory(cfg, ctx, out);
      if (!st.ok()) return st.WithContext("model.kind " + kind);
      if (*out == nullptr) return Status::Internal("model.kind " + kind + ": the registered factory returned no model");
      return Status::OK();
    };
  }
  return models::RegisterModel(std::move(spec));
}

std::vector<std::string> ModelKinds() { return models::ModelKinds(); }

Status FindModelSpec(const proto::Config& cfg, const models::ModelSpec** spec) {
  const std::string& kind = cfg.model().kind();
  *spec = models::FindModel(kind);
  if (*spec != nullptr) return Status::OK();
  std::string known;
  for (const std::string& k : ModelKinds()) known += (known.empty() ? "" : ", ") + k;
  return Status::InvalidArgument("model.kind: unknown model '" + kind + "' (known: " + known +
                                 "; a custom model must be registered with runtime::RegisterModel by the "
                                 "program that runs it, see README \"Custom model in C++\")");
}

Status CheckModelKind(const proto::Config& cfg) {
  const models::ModelSpec* spec = nullptr;
  return FindModelSpec(cfg, &spec);
}

Status BuildModel(const proto::Config& cfg, DeviceContext& ctx, std::unique_ptr<models::Model>* out) {
  const models::ModelSpec* spec = nullptr;
  DT_RETURN_IF_ERROR(FindModelSpec(cfg, &spec));
  DT_RETURN_IF_ERROR(spec->build(cfg, ctx, out));
  // A model that reads train.master_weights and train.gradients (llama) checks them itself; any other keeps f32
  // masters and gradients and refuses bf16.
  struct Storage {
    const char* key;
    const std::string& value;
    bool bf16;
    DType got;
    const char* bf16_needs;
  };
  const Storage keys[] = {
      {"train.master_weights", cfg.train().master_weights(), models::Bf16Params(cfg.train()), (*out)->params().dtype(),
       "bf16 or split masters: model.kind llama with train.precision bf16 or fp8 on CUDA"},
      {"train.gradients", cfg.train().gradients(), cfg.train().gradients() == "bf16", (*out)->grads().dtype(),
       "bf16 gradients: model.kind llama with train.precision bf16 or fp8 on CUDA"}};
  for (const Storage& k : keys) {
    if (k.got == (k.bf16 ? DType::kBF16 : DType::kF32)) continue;
    out->reset();
    return Status::InvalidArgument(std::string(k.key) + ": " + k.value + " is not supported by model.kind " +
                                   cfg.model().kind() + " (" + k.bf16_needs + "; fp32 otherwise)");
  }
  return Status::OK();
}

int64_t TokensPerSample(const proto::Config& cfg) {
  const models::ModelSpec* spec = models::FindModel(cfg.model().kind());
  return spec != nullptr && spec->tokens ? spec->tokens(cfg).seq_len : 0;
}

Status SyntheticTokenInput(const proto::Config& cfg, models::TokenInput* tokens) {
  const models::ModelSpec* spec = nullptr;
  DT_RETURN_IF_ERROR(FindModelSpec(cfg, &spec));
  if (!spec->tokens) {
    std::string lms;
    for (const std::string& k : ModelKinds()) {
      const models::ModelSpec* s = models::FindModel(k);
      if (s != nullptr && s->tokens) lms += (lms.empty() ? "" : ", ") + k;
    }
    return Status::InvalidArgument("data.dataset synthetic_tokens feeds token models: model.kind " +
                                   cfg.model().kind() + " takes no tokens (token models: " + lms + ")");
  }
  *tokens = spec->tokens(cfg);
  return Status::OK();
}

}  // namespace dtrain::runtime
