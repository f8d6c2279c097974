// model.kind llama (models/llama.h): the Llama language model, with its Hugging Face export (LlamaForCausalLM).
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "core/check.h"
#include "kernels/attention.h"
#include "models/builtin_models.h"
#include "models/llama.h"

namespace dtrain::models {
namespace {

constexpr int64_t kMaxHeadSize = 256;

std::string Num(double x) { return nlohmann::json(x).dump(); }  // shortest round-trip text: 32.0, 0.5

// Every size in range, the Llama constraints and the parameter count within kMaxModelParams, each error naming its
// key. `cuda`: the run's attention is CUDA's, which takes head sizes up to ops::kAttentionMaxHeadSize (bf16 runs 64
// and 128 on the tensor-core flash and cuDNN kernels, other sizes on the slower cuBLAS path: kernels/attention.h).
Status CheckConfig(const proto::LlamaConfig& g, bool cuda) {
  DT_RETURN_IF_ERROR(CheckModelSize("model.llama.vocab_size", g.vocab_size(), 2));
  DT_RETURN_IF_ERROR(CheckModelSize("model.llama.max_seq_len", g.max_seq_len(), 1));
  DT_RETURN_IF_ERROR(CheckModelSize("model.llama.hidden", g.hidden(), 1));
  DT_RETURN_IF_ERROR(CheckModelSize("model.llama.ffn_hidden", g.ffn_hidden(), 1));
  DT_RETURN_IF_ERROR(CheckModelSize("model.llama.n_head", g.n_head(), 1));
  DT_RETURN_IF_ERROR(CheckModelSize("model.llama.n_kv_head", g.n_kv_head(), 1, g.n_head()));
  if (g.n_head() % g.n_kv_head() != 0) {
    return Status::InvalidArgument("model.llama.n_head " + std::to_string(g.n_head()) +
                                   " must be a multiple of model.llama.n_kv_head " + std::to_string(g.n_kv_head()) +
                                   " (grouped-query attention shares each key/value head among n_head / n_kv_head "
                                   "query heads)");
  }
  if (g.hidden() % g.n_head() != 0) {
    return Status::InvalidArgument("model.llama.hidden " + std::to_string(g.hidden()) +
                                   " must be a multiple of model.llama.n_head " + std::to_string(g.n_head()) +
                                   " (head size = hidden / n_head)");
  }
  const int64_t hs = g.hidden() / g.n_head();
  if (hs % 2 != 0 || hs > kMaxHeadSize) {
    return Status::InvalidArgument("model.llama: head size hidden / n_head = " + std::to_string(g.hidden()) + " / " +
                                   std::to_string(g.n_head()) + " = " + std::to_string(hs) +
                                   " must be even (RoPE rotates pairs) and at most " + std::to_string(kMaxHeadSize));
  }
  if (cuda && hs > ops::kAttentionMaxHeadSize) {
    return Status::InvalidArgument("model.llama: head size hidden / n_head = " + std::to_string(hs) +
                                   ", but attention on CUDA runs head sizes up to " +
                                   std::to_string(ops::kAttentionMaxHeadSize) +
                                   " (64 and 128 fastest): change model.llama.hidden or model.llama.n_head");
  }
  const proto::LlamaRopeScaling& rs = g.rope_scaling();
  if (!rs.rope_type().empty() && rs.rope_type() != "none" && rs.rope_type() != "llama3") {
    return Status::InvalidArgument("model.llama.rope_scaling.rope_type '" + rs.rope_type() +
                                   "' is none of none|llama3");
  }
  if (rs.rope_type() == "llama3") {
    if (!(rs.factor() >= 1)) {
      return Status::InvalidArgument("model.llama.rope_scaling.factor " + Num(rs.factor()) +
                                     " must be >= 1 (rope_type llama3 divides the low frequencies by it)");
    }
    if (!(rs.low_freq_factor() > 0 && rs.high_freq_factor() > rs.low_freq_factor())) {
      return Status::InvalidArgument(
          "model.llama.rope_scaling: rope_type llama3 needs 0 < low_freq_factor < "
          "high_freq_factor, got low_freq_factor " +
          Num(rs.low_freq_factor()) + ", high_freq_factor " + Num(rs.high_freq_factor()));
    }
    if (rs.original_max_position_embeddings() < 1) {
      return Status::InvalidArgument("model.llama.rope_scaling.original_max_position_embeddings " +
                                     std::to_string(rs.original_max_position_embeddings()) + " must be >= 1");
    }
  }
  int64_t params = 0;  // embedding (and LM head), then per layer q|k|v, o, gate|up, down and two norms, final norm
  const int64_t vp = Llama::PaddedVocab(g.vocab_size());
  DT_RETURN_IF_ERROR(AddModelParams("model.llama", vp, g.hidden() * (g.tie_embeddings() ? 1 : 2), &params));
  const int64_t per_layer_rows = (g.n_head() + 2 * g.n_kv_head()) * hs + g.n_head() * hs + 3 * g.ffn_hidden() + 2;
  DT_RETURN_IF_ERROR(AddModelParams("model.llama", g.n_layer() * per_layer_rows + 1, g.hidden(), &params));
  return Status::OK();
}

// model.llama.rope_scaling as the RoPE table takes it (CheckConfig has checked it).
ops::RopeScaling RopeScalingOf(const proto::LlamaConfig& g) {
  ops::RopeScaling r;
  const proto::LlamaRopeScaling& rs = g.rope_scaling();
  if (rs.rope_type() != "llama3") return r;
  r.kind = ops::RopeScaling::Kind::kLlama3;
  r.factor = rs.factor();
  r.low_freq_factor = rs.low_freq_factor();
  r.high_freq_factor = rs.high_freq_factor();
  r.original_max_position_embeddings = rs.original_max_position_embeddings();
  return r;
}

Status Build(const proto::Config& config, DeviceContext& ctx, std::unique_ptr<Model>* out) {
  const proto::LlamaConfig& g = config.model().llama();
  const std::string& precision = config.train().precision();
  LlamaOptions opts;
  if (precision == "bf16" || (precision == "auto" && ctx.is_cuda())) {
    opts.precision = Precision::kBf16;
  } else if (precision == "fp16" || precision == "fp8") {
    return Status::InvalidArgument("train.precision: " + precision +
                                   " is not supported by model.kind llama; use bf16 or fp32");
  }
  if (opts.precision != Precision::kFp32 && !ctx.is_cuda()) {
    return Status::InvalidArgument("train.precision: " + precision + " needs a GPU; the CPU path is fp32");
  }
  opts.bf16_masters = config.train().master_weights() == "bf16";
  if (opts.bf16_masters && opts.precision != Precision::kBf16) {
    return Status::InvalidArgument(
        "train.master_weights: bf16 needs train.precision bf16 on CUDA (bf16 compute; the CPU path is fp32), got "
        "train.precision " +
        precision + (ctx.is_cuda() ? "" : " on the CPU"));
  }
  DT_RETURN_IF_ERROR(CheckConfig(g, ctx.is_cuda()));
  opts.vocab_size = g.vocab_size();
  opts.max_seq_len = g.max_seq_len();
  opts.n_layer = g.n_layer();
  opts.n_head = g.n_head();
  opts.n_kv_head = g.n_kv_head();
  opts.hidden = g.hidden();
  opts.ffn_hidden = g.ffn_hidden();
  opts.rope_theta = g.rope_theta();
  opts.rope_scaling = RopeScalingOf(g);
  opts.rms_norm_eps = g.rms_norm_eps();
  opts.tie_embeddings = g.tie_embeddings();
  opts.recompute = config.train().recompute();
  opts.recompute_pointwise = g.recompute_pointwise();
  opts.fused_classifier = true;  // training runs; eval mode keeps the logits
  opts.loss_chunk_tokens = g.loss_chunk_tokens();
  std::unique_ptr<Llama> llama;
  DT_RETURN_IF_ERROR(Llama::Create(ctx, opts, config.data().batch_size(), g.max_seq_len(), &llama));
  *out = std::move(llama);
  return Status::OK();
}

Status CheckData(const proto::Config& config, const std::string& what, const proto::DatasetSchema& s) {
  const proto::LlamaConfig& g = config.model().llama();
  // The model's own constraints first: the run check (dtrain launch) reports them before any worker starts.
  DT_RETURN_IF_ERROR(CheckConfig(g, /*cuda=*/false));
  return CheckTokenData("llama", what, s, g.vocab_size(), g.max_seq_len());
}

// vocab_size and max_seq_len 0 from the data (the model pads the vocabulary itself).
Status ResolveAuto(const proto::DatasetSchema* schema, const std::string& what, proto::Config* config) {
  proto::LlamaConfig* g = config->mutable_model()->mutable_llama();
  int64_t vocab = g->vocab_size(), seq = g->max_seq_len();
  DT_RETURN_IF_ERROR(ResolveAutoTokenSizes("llama", schema, what, &vocab, &seq));
  g->set_vocab_size(vocab);
  g->set_max_seq_len(seq);
  return Status::OK();
}

TokenInput Tokens(const proto::Config& config) {
  return {config.model().llama().max_seq_len(), config.model().llama().vocab_size()};
}

void WeightsMetadata(const proto::Config& config, std::map<std::string, std::string>* m) {
  (*m)["vocab_size"] = std::to_string(config.model().llama().vocab_size());
  (*m)["max_seq_len"] = std::to_string(config.model().llama().max_seq_len());
}

// transformers' LlamaForCausalLM: dtrain's names are HF's, except the two fused projections, which HF keeps apart:
// q_proj, k_proj, v_proj are row slices of qkv_proj, gate_proj and up_proj of gate_up_proj (nn.Linear's [out, in]
// on both sides: no transpose). embed_tokens and lm_head lose the padded rows past vocab_size. config.json states
// what dtrain's Llama computes: SiLU, no biases, no dropout, rope_scaling null or Llama 3's, written as transformers
// 4.4x's save_pretrained writes it ({"factor": 32.0, "high_freq_factor": 4.0, "low_freq_factor": 1.0,
// "original_max_position_embeddings": 8192, "rope_type": "llama3"}; the import also reads transformers 5's
// rope_parameters).
Status HfExport(const proto::Config& config, HfExportPlan* plan) {
  const proto::LlamaConfig& g = config.model().llama();
  DT_RETURN_IF_ERROR(CheckConfig(g, /*cuda=*/false));
  const int64_t c = g.hidden(), f = g.ffn_hidden(), hs = c / g.n_head(), vp = Llama::PaddedVocab(g.vocab_size());
  const int64_t q_rows = g.n_head() * hs, kv_rows = g.n_kv_head() * hs;
  const std::vector<int64_t> qkv_shape = {q_rows + 2 * kv_rows, c}, gate_up_shape = {2 * f, c};
  plan->tensors.clear();
  HfTensor embed{"model.embed_tokens.weight", "model.embed_tokens.weight", {vp, c}};
  embed.keep_rows = g.vocab_size();
  plan->tensors.push_back(embed);
  auto slice = [](std::string name, std::string param, std::vector<int64_t> shape, int64_t begin, int64_t rows) {
    HfTensor t{std::move(name), std::move(param), std::move(shape)};
    t.row_begin = begin;
    t.keep_rows = rows;
    return t;
  };
  for (int64_t l = 0; l < g.n_layer(); ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".";
    const std::string qkv = p + "self_attn.qkv_proj.weight", gate_up = p + "mlp.gate_up_proj.weight";
    plan->tensors.push_back({p + "input_layernorm.weight", p + "input_layernorm.weight", {c}});
    plan->tensors.push_back(slice(p + "self_attn.q_proj.weight", qkv, qkv_shape, 0, q_rows));
    plan->tensors.push_back(slice(p + "self_attn.k_proj.weight", qkv, qkv_shape, q_rows, kv_rows));
    plan->tensors.push_back(slice(p + "self_attn.v_proj.weight", qkv, qkv_shape, q_rows + kv_rows, kv_rows));
    plan->tensors.push_back({p + "self_attn.o_proj.weight", p + "self_attn.o_proj.weight", {c, q_rows}});
    plan->tensors.push_back({p + "post_attention_layernorm.weight", p + "post_attention_layernorm.weight", {c}});
    plan->tensors.push_back(slice(p + "mlp.gate_proj.weight", gate_up, gate_up_shape, 0, f));
    plan->tensors.push_back(slice(p + "mlp.up_proj.weight", gate_up, gate_up_shape, f, f));
    plan->tensors.push_back({p + "mlp.down_proj.weight", p + "mlp.down_proj.weight", {c, f}});
  }
  plan->tensors.push_back({"model.norm.weight", "model.norm.weight", {c}});
  if (!g.tie_embeddings()) {
    HfTensor head{"lm_head.weight", "lm_head.weight", {vp, c}};
    head.keep_rows = g.vocab_size();
    plan->tensors.push_back(head);
  }
  nlohmann::ordered_json rope_scaling = nullptr;
  const proto::LlamaRopeScaling& rs = g.rope_scaling();
  if (rs.rope_type() == "llama3") {  // HF's keys, sorted as save_pretrained sorts them
    rope_scaling = {{"factor", rs.factor()},
                    {"high_freq_factor", rs.high_freq_factor()},
                    {"low_freq_factor", rs.low_freq_factor()},
                    {"original_max_position_embeddings", rs.original_max_position_embeddings()},
                    {"rope_type", "llama3"}};
  }
  const nlohmann::ordered_json json = {{"architectures", {"LlamaForCausalLM"}},
                                       {"model_type", "llama"},
                                       {"vocab_size", g.vocab_size()},
                                       {"hidden_size", c},
                                       {"intermediate_size", f},
                                       {"num_hidden_layers", g.n_layer()},
                                       {"num_attention_heads", g.n_head()},
                                       {"num_key_value_heads", g.n_kv_head()},
                                       {"head_dim", hs},
                                       {"max_position_embeddings", g.max_seq_len()},
                                       {"hidden_act", "silu"},
                                       {"rms_norm_eps", g.rms_norm_eps()},
                                       {"rope_theta", g.rope_theta()},
                                       {"rope_scaling", rope_scaling},
                                       {"attention_bias", false},
                                       {"attention_dropout", 0.0},
                                       {"mlp_bias", false},
                                       {"initializer_range", 0.02},
                                       {"tie_word_embeddings", g.tie_embeddings()},
                                       {"torch_dtype", "float32"}};
  plan->config_json = json.dump(2) + "\n";
  plan->config_keys = {
      {"vocab_size", "model.llama.vocab_size"},
      {"hidden_size", "model.llama.hidden"},
      {"intermediate_size", "model.llama.ffn_hidden"},
      {"num_hidden_layers", "model.llama.n_layer"},
      {"num_attention_heads", "model.llama.n_head"},
      {"num_key_value_heads", "model.llama.n_kv_head"},
      {"rms_norm_eps", "model.llama.rms_norm_eps"},
      {"rope_theta", "model.llama.rope_theta"},
      {"rope_scaling.rope_type", "model.llama.rope_scaling.rope_type"},
      {"rope_scaling.factor", "model.llama.rope_scaling.factor"},
      {"rope_scaling.low_freq_factor", "model.llama.rope_scaling.low_freq_factor"},
      {"rope_scaling.high_freq_factor", "model.llama.rope_scaling.high_freq_factor"},
      {"rope_scaling.original_max_position_embeddings", "model.llama.rope_scaling.original_max_position_embeddings"},
      {"tie_word_embeddings", "model.llama.tie_embeddings"}};
  return Status::OK();
}

}  // namespace

ModelSpec LlamaSpec() {
  ModelSpec spec;
  spec.kind = "llama";
  spec.build = &Build;
  spec.check_data = &CheckData;
  spec.resolve_auto = &ResolveAuto;
  spec.tokens = &Tokens;
  spec.weights_metadata = &WeightsMetadata;
  spec.hf_export = &HfExport;
  return spec;
}

}  // namespace dtrain::models
