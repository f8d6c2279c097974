// model.kind gpt2 (models/gpt2.h): the GPT-2 language model, with its Hugging Face export (GPT2LMHeadModel).
#include <algorithm>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "core/check.h"
#include "kernels/bias.h"
#include "kernels/embedding.h"
#include "kernels/layernorm.h"
#include "kernels/matmul_fp8.h"
#include "models/builtin_models.h"
#include "models/gpt2.h"

namespace dtrain::models {
namespace {

// The embedding holds a row per token id: padded_vocab_size below vocab_size (a vocabulary raised for another
// tokenizer, the padding left at GPT-2's 50304) is refused naming both keys and the value to set.
Status CheckPadding(const proto::Gpt2Config& g) {
  if (g.padded_vocab_size() >= g.vocab_size()) return Status::OK();
  const int64_t rounded = (g.vocab_size() + 127) / 128 * 128;
  return Status::InvalidArgument("model.gpt2.padded_vocab_size " + std::to_string(g.padded_vocab_size()) +
                                 " is below model.gpt2.vocab_size " + std::to_string(g.vocab_size()) +
                                 " (the embedding needs a row per token id): set it to " + std::to_string(rounded) +
                                 ", the vocabulary rounded up to a multiple of 128 (0 derives that)");
}

// Every size in range and the parameter count within kMaxModelParams, each error naming its key.
Status CheckSizes(const proto::Gpt2Config& g) {
  DT_RETURN_IF_ERROR(CheckModelSize("model.gpt2.vocab_size", g.vocab_size(), 2));
  DT_RETURN_IF_ERROR(CheckModelSize("model.gpt2.padded_vocab_size", g.padded_vocab_size(), 2));
  DT_RETURN_IF_ERROR(CheckPadding(g));
  DT_RETURN_IF_ERROR(CheckModelSize("model.gpt2.max_seq_len", g.max_seq_len(), 1));
  DT_RETURN_IF_ERROR(CheckModelSize("model.gpt2.n_embd", g.n_embd(), 1));
  int64_t params = 0;  // embeddings, then per layer 12 n_embd^2 + 13 n_embd (attention, MLP, layer norms)
  DT_RETURN_IF_ERROR(AddModelParams("model.gpt2", g.padded_vocab_size(), g.n_embd(), &params));
  DT_RETURN_IF_ERROR(AddModelParams("model.gpt2", g.max_seq_len(), g.n_embd(), &params));
  return AddModelParams("model.gpt2", g.n_layer() * (12 * g.n_embd() + 13), g.n_embd(), &params);
}

// The FP8 LM head runs the whole [tokens, vocab] head; the chunked loss's head is bf16.
Status CheckFp8Head(const proto::Gpt2Config& g, const Fp8LayerSet& set) {
  if (g.loss_chunk_tokens() == 0 || !Gpt2Fp8Head(set)) return Status::OK();
  return Status::InvalidArgument(
      "model.gpt2.fp8_layers names lm_head (the whole [tokens, vocab] LM head in FP8), "
      "but model.gpt2.loss_chunk_tokens " +
      std::to_string(g.loss_chunk_tokens()) +
      " chunks the head, in bf16: leave lm_head out of model.gpt2.fp8_layers, or set "
      "model.gpt2.loss_chunk_tokens: 0");
}

Status Build(const proto::Config& config, DeviceContext& ctx, std::unique_ptr<Model>* out) {
  const proto::Gpt2Config& g = config.model().gpt2();
  DT_RETURN_IF_ERROR(CheckSizes(g));
  const std::string& precision = config.train().precision();
  Gpt2Options opts;
  opts.vocab_size = g.vocab_size();
  opts.padded_vocab_size = g.padded_vocab_size();
  opts.max_seq_len = g.max_seq_len();
  opts.n_layer = g.n_layer();
  opts.n_head = g.n_head();
  opts.n_embd = g.n_embd();
  opts.recompute = config.train().recompute();
  opts.fused_classifier = true;  // training runs (bf16, fp32); Gpt2 keeps fp16 and eval mode unfused
  opts.loss_chunk_tokens = g.loss_chunk_tokens();
  if (precision == "bf16" || (precision == "auto" && ctx.is_cuda())) {
    opts.precision = Precision::kBf16;
  } else if (precision == "fp16") {
    opts.precision = Precision::kFp16;
  } else if (precision == "fp8") {
    opts.precision = Precision::kFp8;
  }
  // (A Config built in code rather than loaded from YAML has "" for the schema's default "auto".)
  const std::string fp8_layers = g.fp8_layers().empty() ? "auto" : g.fp8_layers();
  if (opts.precision != Precision::kFp8 && fp8_layers != "auto") {
    return Status::InvalidArgument("model.gpt2.fp8_layers: '" + fp8_layers + "' is set but train.precision is " +
                                   precision + " (it applies to fp8 only)");
  }
  DT_RETURN_IF_ERROR(ParseFp8Gradients(precision, config.train().fp8_gradients(), &opts.fp8_layers));
  if (opts.loss_chunk_tokens > 0 && opts.precision == Precision::kFp16) {
    return Status::InvalidArgument(
        "model.gpt2.loss_chunk_tokens " + std::to_string(opts.loss_chunk_tokens) +
        " needs train.precision bf16, fp8 or fp32, not fp16: the chunked loss runs the LM head's backward inside the "
        "forward, before fp16's dynamic loss scale is known (set model.gpt2.loss_chunk_tokens: 0)");
  }
  if (opts.precision != Precision::kFp32 && !ctx.is_cuda()) {
    return Status::InvalidArgument("train.precision: " + precision + " needs a GPU; the CPU path is fp32");
  }
  if (opts.precision == Precision::kFp8) {
    DT_RETURN_IF_ERROR(ops::CheckFp8Device(ctx, "train.precision: fp8"));
    DT_RETURN_IF_ERROR(ParseGpt2Fp8Layers(fp8_layers, g.n_embd(), &opts.fp8_layers));
    DT_RETURN_IF_ERROR(CheckFp8Head(g, opts.fp8_layers));
  }
  std::unique_ptr<Gpt2> gpt2;
  DT_RETURN_IF_ERROR(Gpt2::Create(ctx, opts, config.data().batch_size(), g.max_seq_len(), &gpt2));
  *out = std::move(gpt2);
  return Status::OK();
}

// What Gpt2::Create and EnsureActivations allocate (models/gpt2.cc), tensor by tensor, for Build's batch
// [data.batch_size, max_seq_len]; plus the largest transient kernel workspace on CUDA.
Status MemoryPlanOf(const proto::Config& config, const MemoryPlanInputs& in, MemoryPlan* plan) {
  const proto::Gpt2Config& g = config.model().gpt2();
  DT_RETURN_IF_ERROR(CheckSizes(g));
  const std::string& precision = config.train().precision();
  const bool mixed =
      precision == "bf16" || precision == "fp16" || precision == "fp8" || (precision == "auto" && in.cuda);
  if (mixed && !in.cuda) {
    return Status::InvalidArgument("train.precision: " + precision + " needs a GPU; the CPU path is fp32");
  }
  const int64_t b = config.data().batch_size(), t = g.max_seq_len(), n = b * t;
  const int64_t c = g.n_embd(), L = g.n_layer(), vp = g.padded_vocab_size();
  const int64_t params = vp * c + t * c + L * (12 * c * c + 13 * c) + 2 * c;
  const DType half = precision == "fp16" ? DType::kF16 : DType::kBF16;
  const DType act = mixed ? half : DType::kF32, stat = DType::kF32;
  auto bytes = [&](int64_t numel, DType dt) { return in.Bytes(numel, dt); };
  const bool full = config.train().recompute();

  *plan = MemoryPlan();
  plan->activation_policy = full ? "full" : "none";
  plan->num_params = params;
  plan->params = bytes(params, in.master_dtype);
  plan->grads = bytes(params, in.master_dtype);
  plan->workspace = bytes(n, DType::kI32);  // position ids
  Fp8LayerSet fp8_set;
  if (precision == "fp8") {
    DT_RETURN_IF_ERROR(ParseGpt2Fp8Layers(g.fp8_layers().empty() ? "auto" : g.fp8_layers(), c, &fp8_set));
    DT_RETURN_IF_ERROR(CheckFp8Head(g, fp8_set));
    plan->fp8 = Gpt2Fp8Bytes(in, fp8_set, c, vp, L, full ? 1 : L, n);
  }
  // The 16-bit copy leaves out the weights that run in FP8.
  if (mixed) plan->working_copy = bytes(params - Gpt2Fp8WeightNumel(fp8_set, c, vp, L), half);
  const Gpt2SharedInputs shared = Gpt2SharedInputsOf(precision == "fp8" ? &fp8_set : nullptr, full);
  // Per set: ln1 (unless shared), its statistics, qkv, att, lse, x_mid, ln2 (unless shared) and its statistics,
  // fc_pre, fc_act (unless shared); then the shared buffers once.
  const int64_t set = (shared.ln1 ? 0 : bytes(n * c, act)) + 2 * bytes(n, stat) + bytes(3 * n * c, act) +
                      bytes(n * c, act) + bytes(b * g.n_head() * t, stat) + bytes(n * c, act) +
                      (shared.ln2 ? 0 : bytes(n * c, act)) + 2 * bytes(n, stat) + bytes(4 * n * c, act) +
                      (shared.fc_act ? 0 : bytes(4 * n * c, act));
  const int64_t shared_bytes =
      (shared.ln1 || shared.ln2 ? bytes(n * c, act) : 0) + (shared.fc_act ? bytes(4 * n * c, act) : 0);
  plan->activations =
      (L + 1) * bytes(n * c, act) + (full ? 1 : L) * set + shared_bytes + bytes(n * c, act) + 2 * bytes(n, stat);
  const int64_t chunk = g.loss_chunk_tokens();  // chunked: [chunk, Vp] logits and the eval argmax per token
  plan->logits = chunk > 0 ? bytes(std::min(chunk, n) * vp, act) + bytes(n, stat) + bytes(n, DType::kI32)
                           : bytes(n * vp, act) + bytes(n, stat);
  // dres, dln, dqkv, datt; and one [n, 4C] buffer for dfc and the forward's embeddings.
  plan->backward_scratch = 2 * bytes(n * c, act) + bytes(3 * n * c, act) + bytes(n * c, act) +
                           in.Round(n * 4 * c * static_cast<int64_t>(DTypeSize(act)));
#if DT_HAVE_CUDA
  if (in.cuda) {     // freed when the kernel returns; the largest one counts (the flash path's delta for attention)
    size_t emb = 0;  // cub's sort sizes need the CUDA runtime; without a GPU here, its id buffers and as much again
    if (!ops::EmbeddingBackwardScratchBytes(n, vp, &emb).ok()) emb = 8 * static_cast<size_t>(n) * sizeof(int32_t);
    plan->workspace += std::max({bytes(ops::LayerNormBackwardScratchFloats(n, c), DType::kF32),
                                 bytes(ops::BiasGradScratchFloats(n, 4 * c), DType::kF32),
                                 in.Round(static_cast<int64_t>(emb)), bytes(b * g.n_head() * t, DType::kF32)});
  }
#endif
  return Status::OK();
}

// train.recompute is gpt2's policy: none (false, the budget may raise it) or full.
std::vector<ActivationPolicy> ActivationPolicies(const proto::Config& config, bool* open) {
  *open = !config.train().recompute();
  std::vector<ActivationPolicy> out;
  for (bool full : {false, true}) {
    out.push_back({full ? "full" : "none", full ? "train.recompute: true" : "train.recompute: false",
                   [full](proto::Config* cfg) { cfg->mutable_train()->set_recompute(full); }, full ? 1.0 / 3 : 0.0});
  }
  return out;
}

// The chunked loss (refused with fp16, so not offered there).
std::vector<MemoryKnob> MemoryKnobs(const proto::Config& config) {
  const proto::Gpt2Config& g = config.model().gpt2();
  if (config.train().precision() == "fp16") return {};
  return ChunkedLossKnob(
      "gpt2", g.loss_chunk_tokens(), config.data().batch_size() * g.max_seq_len(),
      [](proto::Config* c, int64_t t) { c->mutable_model()->mutable_gpt2()->set_loss_chunk_tokens(t); });
}

Status CheckData(const proto::Config& config, const std::string& what, const proto::DatasetSchema& s) {
  const proto::Gpt2Config& g = config.model().gpt2();
  DT_RETURN_IF_ERROR(CheckPadding(g));  // what the workers would fail on at build time, found before they start
  return CheckTokenData("gpt2", what, s, g.vocab_size(), g.max_seq_len());
}

// vocab_size and max_seq_len 0 from the data; padded_vocab_size 0: vocab_size rounded up to a multiple of 128.
Status ResolveAuto(const proto::DatasetSchema* schema, const std::string& what, proto::Config* config) {
  proto::Gpt2Config* g = config->mutable_model()->mutable_gpt2();
  int64_t vocab = g->vocab_size(), seq = g->max_seq_len();
  DT_RETURN_IF_ERROR(ResolveAutoTokenSizes("gpt2", schema, what, &vocab, &seq));
  g->set_vocab_size(vocab);
  g->set_max_seq_len(seq);
  if (g->padded_vocab_size() == 0) g->set_padded_vocab_size((vocab + 127) / 128 * 128);
  return Status::OK();
}

TokenInput Tokens(const proto::Config& config) {
  return {config.model().gpt2().max_seq_len(), config.model().gpt2().vocab_size()};
}

void WeightsMetadata(const proto::Config& config, std::map<std::string, std::string>* m) {
  (*m)["vocab_size"] = std::to_string(config.model().gpt2().vocab_size());
  (*m)["max_seq_len"] = std::to_string(config.model().gpt2().max_seq_len());
}

// transformers' GPT2LMHeadModel: names gain the "transformer." prefix; the Linear weights (dtrain stores
// [out, in], PyTorch's Linear layout) become HF's Conv1D [in, out] (c_attn, c_proj, c_fc); wte loses the rows
// past vocab_size (dtrain pads the vocabulary for GEMM shapes; HF ties lm_head to wte, so its logits are exactly
// dtrain's first vocab_size logits). config.json states what dtrain's GPT-2 computes: GELU with the tanh
// approximation ("gelu_new"), layer norm eps 1e-5, no dropout, tied embeddings.
Status HfExport(const proto::Config& config, HfExportPlan* plan) {
  const proto::Gpt2Config& g = config.model().gpt2();
  const int64_t c = g.n_embd();
  plan->tensors.clear();
  HfTensor wte{"transformer.wte.weight", "wte.weight", {g.padded_vocab_size(), c}};
  wte.keep_rows = g.vocab_size();
  plan->tensors.push_back(wte);
  plan->tensors.push_back({"transformer.wpe.weight", "wpe.weight", {g.max_seq_len(), c}});
  // (name, its dtrain shape; matrices are transposed for HF's Conv1D)
  const std::vector<std::pair<std::string, std::vector<int64_t>>> layer = {{"ln_1.weight", {c}},
                                                                           {"ln_1.bias", {c}},
                                                                           {"attn.c_attn.weight", {3 * c, c}},
                                                                           {"attn.c_attn.bias", {3 * c}},
                                                                           {"attn.c_proj.weight", {c, c}},
                                                                           {"attn.c_proj.bias", {c}},
                                                                           {"ln_2.weight", {c}},
                                                                           {"ln_2.bias", {c}},
                                                                           {"mlp.c_fc.weight", {4 * c, c}},
                                                                           {"mlp.c_fc.bias", {4 * c}},
                                                                           {"mlp.c_proj.weight", {c, 4 * c}},
                                                                           {"mlp.c_proj.bias", {c}}};
  for (int64_t l = 0; l < g.n_layer(); ++l) {
    const std::string p = "h." + std::to_string(l) + ".";
    for (const auto& [name, shape] : layer) {
      HfTensor t{"transformer." + p + name, p + name, shape};
      t.transpose = shape.size() == 2;
      plan->tensors.push_back(std::move(t));
    }
  }
  for (const char* name : {"ln_f.weight", "ln_f.bias"}) {
    plan->tensors.push_back({std::string("transformer.") + name, name, {c}});
  }
  const nlohmann::ordered_json json = {{"architectures", {"GPT2LMHeadModel"}},
                                       {"model_type", "gpt2"},
                                       {"vocab_size", g.vocab_size()},
                                       {"n_positions", g.max_seq_len()},
                                       {"n_ctx", g.max_seq_len()},
                                       {"n_embd", c},
                                       {"n_layer", g.n_layer()},
                                       {"n_head", g.n_head()},
                                       {"n_inner", 4 * c},
                                       {"activation_function", "gelu_new"},
                                       {"layer_norm_epsilon", 1e-5},
                                       {"resid_pdrop", 0.0},
                                       {"embd_pdrop", 0.0},
                                       {"attn_pdrop", 0.0},
                                       {"initializer_range", 0.02},
                                       {"tie_word_embeddings", true},
                                       {"bos_token_id", g.vocab_size() - 1},
                                       {"eos_token_id", g.vocab_size() - 1},
                                       {"torch_dtype", "float32"}};
  plan->config_json = json.dump(2) + "\n";
  plan->config_keys = {{"vocab_size", "model.gpt2.vocab_size"}, {"n_positions", "model.gpt2.max_seq_len"},
                       {"n_ctx", "model.gpt2.max_seq_len"},     {"n_embd", "model.gpt2.n_embd"},
                       {"n_layer", "model.gpt2.n_layer"},       {"n_head", "model.gpt2.n_head"}};
  return Status::OK();
}

}  // namespace

ModelSpec Gpt2Spec() {
  ModelSpec spec;
  spec.kind = "gpt2";
  spec.build = &Build;
  spec.check_data = &CheckData;
  spec.resolve_auto = &ResolveAuto;
  spec.tokens = &Tokens;
  spec.weights_metadata = &WeightsMetadata;
  spec.hf_export = &HfExport;
  spec.memory_plan = &MemoryPlanOf;
  spec.activation_policies = &ActivationPolicies;
  spec.memory_knobs = &MemoryKnobs;
  return spec;
}

}  // namespace dtrain::models
