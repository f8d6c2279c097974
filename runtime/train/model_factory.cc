#include "runtime/train/model_factory.h"

#include <algorithm>
#include <map>
#include <mutex>
#include <utility>

#include "core/check.h"
#include "models/cnn.h"
#include "models/gpt2.h"
#include "models/mlp.h"

namespace dtrain::runtime {
namespace {

const char* const kBuiltinKinds[] = {"mlp", "cnn", "gpt2"};

bool IsBuiltin(const std::string& kind) {
  return std::find(std::begin(kBuiltinKinds), std::end(kBuiltinKinds), kind) != std::end(kBuiltinKinds);
}

// The registered factories, by kind. Function-local so that registering from another static
// initializer is safe; only ever added to.
struct Registry {
  std::mutex mu;
  std::map<std::string, ModelFactory> factories;
};

Registry& GetRegistry() {
  static Registry* registry = new Registry();  // never destroyed: usable until the process ends
  return *registry;
}

bool ValidKind(const std::string& kind) {
  if (kind.empty()) return false;
  for (char c : kind) {
    const bool ok =
        (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '-' || c == '.';
    if (!ok) return false;
  }
  return true;
}

Status BuildBuiltin(const proto::Config& config, DeviceContext& ctx, std::unique_ptr<models::Model>* out) {
  const proto::ModelConfig& cfg = config.model();
  const std::string& precision = config.train().precision();
  if (cfg.kind() == "mlp" && precision != "auto" && precision != "fp32") {
    return Status::InvalidArgument(
        "train.precision: " + precision +
        " is implemented for model.kind gpt2 and cnn; mlp trains in fp32 (use auto or fp32)");
  }
  if (cfg.kind() == "cnn" && precision == "fp16") {
    return Status::InvalidArgument(
        "train.precision: fp16 is not implemented for model.kind cnn (use auto, fp32 or bf16)");
  }
  if (cfg.kind() == "mlp") {
    models::MlpOptions opts;
    opts.input_dim = cfg.mlp().input_dim();
    opts.hidden.assign(cfg.mlp().hidden().begin(), cfg.mlp().hidden().end());
    opts.num_classes = cfg.mlp().num_classes();
    opts.gelu = cfg.mlp().activation() == "gelu";
    std::unique_ptr<models::Mlp> mlp;
    DT_RETURN_IF_ERROR(models::Mlp::Create(ctx, opts, &mlp));
    *out = std::move(mlp);
    return Status::OK();
  }
  if (cfg.kind() == "cnn") {
    models::CnnOptions opts;
    opts.in_channels = cfg.cnn().in_channels();
    opts.image_size = cfg.cnn().image_size();
    opts.channels.assign(cfg.cnn().channels().begin(), cfg.cnn().channels().end());
    opts.blocks_per_stage = cfg.cnn().blocks_per_stage();
    opts.num_classes = cfg.cnn().num_classes();
    // auto: bf16 channels-last on a GPU (faster at the same accuracy:
    // bench/results/2026-12-02-cnn-bf16-channels-last-h200.md).
    if (precision == "bf16" || (precision == "auto" && ctx.is_cuda())) opts.precision = models::Precision::kBf16;
    if (opts.precision == models::Precision::kBf16 && !ctx.is_cuda()) {
      return Status::InvalidArgument("train.precision: bf16 needs a GPU; the CNN's CPU path is fp32");
    }
    std::unique_ptr<models::Cnn> cnn;
    DT_RETURN_IF_ERROR(models::Cnn::Create(ctx, opts, &cnn));
    *out = std::move(cnn);
    return Status::OK();
  }
  if (cfg.kind() == "gpt2") {
    const proto::Gpt2Config& g = cfg.gpt2();
    models::Gpt2Options opts;
    opts.vocab_size = g.vocab_size();
    opts.padded_vocab_size = g.padded_vocab_size();
    opts.max_seq_len = g.max_seq_len();
    opts.n_layer = g.n_layer();
    opts.n_head = g.n_head();
    opts.n_embd = g.n_embd();
    opts.recompute = config.train().recompute();
    opts.fused_classifier = true;  // training runs (bf16, fp32); Gpt2 keeps fp16 and eval mode unfused
    if (precision == "bf16" || (precision == "auto" && ctx.is_cuda())) {
      opts.precision = models::Precision::kBf16;
    } else if (precision == "fp16") {
      opts.precision = models::Precision::kFp16;
    }
    if (opts.precision != models::Precision::kFp32 && !ctx.is_cuda()) {
      return Status::InvalidArgument("train.precision: " + precision + " needs a GPU; the CPU path is fp32");
    }
    const auto& d = config.data();
    std::unique_ptr<models::Gpt2> gpt2;
    DT_RETURN_IF_ERROR(models::Gpt2::Create(ctx, opts, d.batch_size(), g.max_seq_len(), &gpt2));
    *out = std::move(gpt2);
    return Status::OK();
  }
  return Status::Internal("model.kind: built-in '" + cfg.kind() + "' has no builder");
}

}  // namespace

Status RegisterModel(const std::string& kind, ModelFactory factory) {
  if (!ValidKind(kind)) {
    return Status::InvalidArgument("RegisterModel: bad model kind '" + kind + "' (expected [A-Za-z0-9_.-]+)");
  }
  if (IsBuiltin(kind)) return Status::InvalidArgument("RegisterModel: '" + kind + "' is a built-in model kind");
  if (!factory) return Status::InvalidArgument("RegisterModel: empty factory for '" + kind + "'");
  Registry& r = GetRegistry();
  std::lock_guard<std::mutex> lock(r.mu);
  if (!r.factories.emplace(kind, std::move(factory)).second) {
    return Status::InvalidArgument("RegisterModel: model kind '" + kind + "' is already registered");
  }
  return Status::OK();
}

std::vector<std::string> ModelKinds() {
  std::vector<std::string> kinds(std::begin(kBuiltinKinds), std::end(kBuiltinKinds));
  Registry& r = GetRegistry();
  std::lock_guard<std::mutex> lock(r.mu);
  for (const auto& [kind, factory] : r.factories) kinds.push_back(kind);  // std::map: sorted
  return kinds;
}

namespace {

// The registered factory of `kind`, or InvalidArgument naming model.kind and every known kind.
Status FindFactory(const std::string& kind, ModelFactory* factory) {
  {
    Registry& r = GetRegistry();
    std::lock_guard<std::mutex> lock(r.mu);
    const auto it = r.factories.find(kind);
    if (it != r.factories.end()) *factory = it->second;
  }
  if (*factory) return Status::OK();
  std::string known;
  for (const std::string& k : ModelKinds()) known += (known.empty() ? "" : ", ") + k;
  return Status::InvalidArgument("model.kind: unknown model '" + kind + "' (known: " + known +
                                 "; a custom model must be registered with runtime::RegisterModel by the "
                                 "program that runs it, see README \"Custom model in C++\")");
}

}  // namespace

Status CheckModelKind(const proto::Config& config) {
  if (IsBuiltin(config.model().kind())) return Status::OK();
  ModelFactory factory;
  return FindFactory(config.model().kind(), &factory);
}

Status BuildModel(const proto::Config& config, DeviceContext& ctx, std::unique_ptr<models::Model>* out) {
  const std::string& kind = config.model().kind();
  if (IsBuiltin(kind)) return BuildBuiltin(config, ctx, out);
  ModelFactory factory;
  DT_RETURN_IF_ERROR(FindFactory(kind, &factory));
  out->reset();
  const Status st = factory(config, ctx, out);
  if (!st.ok()) return st.WithContext("model.kind " + kind);
  if (*out == nullptr) return Status::Internal("model.kind " + kind + ": the registered factory returned no model");
  return Status::OK();
}

}  // namespace dtrain::runtime
