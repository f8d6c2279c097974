// model.kind llama (models/llama.h): the Llama language model, with its Hugging Face export (LlamaForCausalLM).
#include <algorithm>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "core/check.h"
#include "kernels/attention.h"
#include "kernels/embedding.h"
#include "kernels/matmul_fp8.h"
#include "kernels/rmsnorm.h"
#include "models/builtin_models.h"
#include "models/llama.h"

namespace dtrain::models {
namespace {

constexpr int64_t kMaxHeadSize = 256;
// ActivationPolicies: the per-layer weight cast's extra pass costs about kLayerCastTokens / tokens of a step: it reads
// 4 and writes 2 bytes a parameter (~3.3 TB/s on an H200) where the step does 6 x parameters x tokens FLOPs (~625
// TFLOP/s of bf16 GEMM). An estimate from those rates, not a measurement of the pass.
constexpr double kLayerCastTokens = 190.0;

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

// Activation checkpointing as LlamaOptions takes it, from model.llama.activation_checkpointing, its old keys
// (train.recompute: full, model.llama.recompute_pointwise: selective; read under auto) and full_checkpoint_layers.
struct Checkpointing {
  int64_t full_layers = 0;
  bool selective = false;
  bool fixed = false;  // the config fixes the policy (not auto, an old key, or full layers): the budget only checks
};

Status CheckpointingOf(const proto::Config& config, Checkpointing* out) {
  const proto::LlamaConfig& g = config.model().llama();
  const std::string& policy = g.activation_checkpointing();
  const int64_t n_layer = g.n_layer(), k = g.full_checkpoint_layers();
  const bool old_full = config.train().recompute(), old_selective = g.recompute_pointwise();
  if (k > n_layer) {
    return Status::InvalidArgument("model.llama.full_checkpoint_layers " + std::to_string(k) +
                                   " must be at most model.llama.n_layer " + std::to_string(n_layer));
  }
  Checkpointing c;
  if (policy.empty() || policy == "auto") {
    c.fixed = old_full || old_selective || k > 0;
    c.full_layers = old_full ? n_layer : k;
    c.selective = old_selective && !old_full;
  } else if (policy == "full") {
    if (k != 0 && k != n_layer) {
      return Status::InvalidArgument(
          "model.llama.full_checkpoint_layers " + std::to_string(k) +
          " with model.llama.activation_checkpointing full: full covers every layer; for the first " +
          std::to_string(k) + " layers only set activation_checkpointing to none or selective");
    }
    c.fixed = true;
    c.full_layers = n_layer;
  } else if (policy == "none" || policy == "selective") {
    if (old_full) {
      return Status::InvalidArgument(
          "train.recompute: true (the old key of model.llama.activation_checkpointing: full) disagrees with "
          "model.llama.activation_checkpointing: " +
          policy + "; drop train.recompute");
    }
    if (old_selective && policy == "none") {
      return Status::InvalidArgument(
          "model.llama.recompute_pointwise: true (the old key of activation_checkpointing: selective) disagrees "
          "with model.llama.activation_checkpointing: none; drop recompute_pointwise");
    }
    c.fixed = true;
    c.selective = policy == "selective";
    c.full_layers = k;
  } else {
    return Status::InvalidArgument("model.llama.activation_checkpointing '" + policy +
                                   "' is none of auto|none|selective|full");
  }
  if (c.full_layers == n_layer) c.selective = false;  // no layer left for it
  *out = c;
  return Status::OK();
}

std::string PolicyName(const Checkpointing& c, int64_t n_layer) {
  const char* rest = c.selective ? "selective" : "none";
  if (c.full_layers == 0) return rest;
  if (c.full_layers == n_layer) return "full";
  return "full on the first " + std::to_string(c.full_layers) + " of " + std::to_string(n_layer) + " layers, " + rest +
         " on the rest";
}

// The run's precision as Build resolves it: bf16 or fp8 (*mixed, and *fp8 with its layers) or fp32; InvalidArgument
// for the ones Llama cannot run and for model.llama.fp8_layers set without fp8.
Status MixedOf(const proto::Config& config, bool cuda, bool* mixed, bool* fp8, Fp8LayerSet* layers) {
  const std::string& precision = config.train().precision();
  const proto::LlamaConfig& g = config.model().llama();
  *mixed = precision == "bf16" || precision == "fp8" || (precision == "auto" && cuda);
  *fp8 = precision == "fp8";
  if (precision == "fp16") {
    return Status::InvalidArgument("train.precision: fp16 is not supported by model.kind llama; use bf16, fp8 or fp32");
  }
  const std::string fp8_layers = g.fp8_layers().empty() ? "auto" : g.fp8_layers();
  if (precision != "fp8" && fp8_layers != "auto") {
    return Status::InvalidArgument("model.llama.fp8_layers: '" + fp8_layers + "' is set but train.precision is " +
                                   precision + " (it applies to fp8 only)");
  }
  if (precision == "fp8") {
    DT_RETURN_IF_ERROR(ParseLlamaFp8Layers(fp8_layers, g.hidden(), layers));
  }
  DT_RETURN_IF_ERROR(ParseFp8Gradients(precision, config.train().fp8_gradients(), layers));
  if (*mixed && !cuda)
    return Status::InvalidArgument("train.precision: " + precision + " needs a GPU; the CPU path is fp32");
  return Status::OK();
}

// model.llama.weight_cast layer needs a bf16 copy of f32 masters to make: mixed precision and fp32 master weights.
// (The memory plan takes it as it comes: it plans no copy without one.)
Status CheckWeightCast(const proto::Config& config, bool mixed) {
  if (config.model().llama().weight_cast() != "layer") return Status::OK();
  if (mixed && !Bf16Params(config.train())) return Status::OK();
  return Status::InvalidArgument(
      "model.llama.weight_cast: layer casts the f32 master weights into the GEMMs' bf16 copy layer by layer; this run "
      "has no such copy (train.precision " +
      config.train().precision() + ", train.master_weights " + config.train().master_weights() +
      "): set weight_cast step, or train.precision bf16 or fp8 with train.master_weights fp32");
}

Status Build(const proto::Config& config, DeviceContext& ctx, std::unique_ptr<Model>* out) {
  const proto::LlamaConfig& g = config.model().llama();
  LlamaOptions opts;
  bool mixed = false, fp8 = false;
  DT_RETURN_IF_ERROR(MixedOf(config, ctx.is_cuda(), &mixed, &fp8, &opts.fp8_layers));
  if (mixed) opts.precision = fp8 ? Precision::kFp8 : Precision::kBf16;
  if (fp8) DT_RETURN_IF_ERROR(ops::CheckFp8Device(ctx, "train.precision: fp8"));
  opts.bf16_masters = Bf16Params(config.train());
  if (opts.bf16_masters && !mixed) {
    return Status::InvalidArgument("train.master_weights: " + config.train().master_weights() +
                                   " needs train.precision bf16 or fp8 on CUDA (the CPU path is fp32), got "
                                   "train.precision " +
                                   config.train().precision() + (ctx.is_cuda() ? "" : " on the CPU"));
  }
  DT_RETURN_IF_ERROR(CheckConfig(g, ctx.is_cuda()));
  DT_RETURN_IF_ERROR(CheckWeightCast(config, mixed));
  opts.layer_cast = g.weight_cast() == "layer";
  opts.bf16_grads = config.train().gradients() == "bf16";
  if (opts.bf16_grads && !mixed) {
    return Status::InvalidArgument(
        "train.gradients: bf16 needs train.precision bf16 or fp8 on CUDA (the CPU path is fp32), got train.precision " +
        config.train().precision() + (ctx.is_cuda() ? "" : " on the CPU"));
  }
  Checkpointing ckpt;
  DT_RETURN_IF_ERROR(CheckpointingOf(config, &ckpt));
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
  opts.full_layers = ckpt.full_layers;
  opts.selective = ckpt.selective;
  opts.fused_classifier = true;  // training runs; eval mode keeps the logits
  opts.loss_chunk_tokens = g.loss_chunk_tokens();
  std::unique_ptr<Llama> llama;
  DT_RETURN_IF_ERROR(Llama::Create(ctx, opts, config.data().batch_size(), g.max_seq_len(), &llama));
  *out = std::move(llama);
  return Status::OK();
}

// What Llama::Create and EnsureActivations allocate (models/llama.cc), tensor by tensor, for Build's batch
// [data.batch_size, max_seq_len]; plus the largest transient kernel workspace on CUDA.
Status MemoryPlanOf(const proto::Config& config, const MemoryPlanInputs& in, MemoryPlan* plan) {
  const proto::LlamaConfig& g = config.model().llama();
  DT_RETURN_IF_ERROR(CheckConfig(g, in.cuda));
  bool mixed = false, fp8 = false;
  Fp8LayerSet fp8_layers;
  DT_RETURN_IF_ERROR(MixedOf(config, in.cuda, &mixed, &fp8, &fp8_layers));
  Checkpointing ckpt;
  DT_RETURN_IF_ERROR(CheckpointingOf(config, &ckpt));
  const int64_t b = config.data().batch_size(), t = g.max_seq_len(), n = b * t;
  const int64_t c = g.hidden(), f = g.ffn_hidden(), L = g.n_layer(), hs = c / g.n_head();
  const int64_t qkv = (g.n_head() + 2 * g.n_kv_head()) * hs, vp = Llama::PaddedVocab(g.vocab_size());
  const int64_t layer_params = 2 * c + qkv * c + c * g.n_head() * hs + 3 * f * c;
  const int64_t params = vp * c * (g.tie_embeddings() ? 1 : 2) + L * layer_params + c;
  const DType act = mixed ? DType::kBF16 : DType::kF32, stat = DType::kF32;
  auto bytes = [&](int64_t numel, DType dt) { return in.Bytes(numel, dt); };

  *plan = MemoryPlan();
  plan->activation_policy = PolicyName(ckpt, L);
  plan->num_params = params;
  plan->params = bytes(params, in.master_dtype);
  plan->grads = bytes(params, in.grad_dtype);  // train.gradients (f32 with bf16 masters too, unless it says bf16)
  // The bf16 copy (Llama::MakeWeightCopy): the LM head and the block linears' weights that do not run in FP8, of every
  // layer, or (weight_cast layer) of one.
  const std::vector<Fp8LinearShape> linears = LlamaLinears(c, g.n_head(), g.n_kv_head(), f);
  int64_t copied_per_layer = 0;
  for (size_t j = 0; j < linears.size(); ++j) {
    if (!(fp8 && fp8_layers.on[j])) copied_per_layer += linears[j].out * linears[j].in;
  }
  const int64_t copied = vp * c + (g.weight_cast() == "layer" ? 1 : L) * copied_per_layer;
  if (mixed && in.master_dtype != DType::kBF16) plan->working_copy = bytes(copied, DType::kBF16);
  plan->workspace = 2 * bytes(t * hs / 2, DType::kF32) + bytes(c, act);  // RoPE cos/sin tables, zero bias

  const int64_t k = ckpt.full_layers;
  const bool any_selective = ckpt.selective && k < L;
  const int64_t sets = (k > 0 ? 1 : 0) + (L - k);
  if (fp8) plan->fp8 = Fp8Linears::Bytes(in, linears, fp8_layers, L, sets, n);
  // Per set: what every set keeps whatever the policy.
  const int64_t set_fixed = bytes(n, stat) + bytes(n * qkv, act) + bytes(n * c, act) + bytes(b * g.n_head() * t, stat) +
                            bytes(n * c, act) + bytes(n, stat) + bytes(2 * n * f, act);
  int64_t acts = (L + 1) * bytes(n * c, act) + sets * set_fixed;  // x_ and the sets
  // ln1, ln2 and act: each set's own, and the shared buffers once (LlamaSharedActsOf).
  bool shared_ln = false, shared_act = false;
  for (const bool full_set : {true, false}) {
    const int64_t count = full_set ? (k > 0 ? 1 : 0) : L - k;
    if (count == 0) continue;
    const LlamaSharedActs s = LlamaSharedActsOf(full_set, any_selective, fp8 ? &fp8_layers : nullptr);
    acts +=
        count * ((s.ln1 ? 0 : bytes(n * c, act)) + (s.ln2 ? 0 : bytes(n * c, act)) + (s.act ? 0 : bytes(n * f, act)));
    shared_ln = shared_ln || s.ln1 || s.ln2;
    shared_act = shared_act || s.act;
  }
  acts += (shared_ln ? bytes(n * c, act) : 0) + (shared_act ? bytes(n * f, act) : 0);
  acts += bytes(n * c, act) + bytes(n, stat);  // lnf, lnf_rstd
  plan->activations = acts;
  // logits (dlogits in place), losses; chunked (loss_chunk_tokens): [chunk, Vp] logits and the eval argmax per token.
  const int64_t chunk = g.loss_chunk_tokens();
  plan->logits = chunk > 0 ? bytes(std::min(chunk, n) * vp, act) + bytes(n, stat) + bytes(n, DType::kI32)
                           : bytes(n * vp, act) + bytes(n, stat);
  plan->backward_scratch = 3 * bytes(n * c, act) + bytes(n * qkv, act) + bytes(2 * n * f, act) + bytes(n * f, act);
#if DT_HAVE_CUDA
  if (in.cuda) {     // freed when the kernel returns; the largest one counts (the flash path's delta for attention)
    size_t emb = 0;  // cub's sort sizes need the CUDA runtime; without a GPU here, its id buffers and as much again
    if (!ops::EmbeddingBackwardScratchBytes(n, vp, &emb).ok()) emb = 8 * static_cast<size_t>(n) * sizeof(int32_t);
    const int64_t transient = std::max({bytes(ops::RmsNormBackwardScratchFloats(n, c), DType::kF32),
                                        in.Round(static_cast<int64_t>(emb)), bytes(b * g.n_head() * t, DType::kF32)});
    plan->workspace += transient;
  }
#endif
  return Status::OK();
}

// The chunked loss, the per-layer weight cast, bf16 gradients and split masters (each named only where it plans less).
std::vector<MemoryKnob> MemoryKnobs(const proto::Config& config) {
  const proto::LlamaConfig& g = config.model().llama();
  std::vector<MemoryKnob> knobs = ChunkedLossKnob(
      "llama", g.loss_chunk_tokens(), config.data().batch_size() * g.max_seq_len(),
      [](proto::Config* c, int64_t t) { c->mutable_model()->mutable_llama()->set_loss_chunk_tokens(t); });
  if (g.weight_cast() != "layer") {
    knobs.push_back({"model.llama.weight_cast: layer (the bf16 weight copy per layer)",
                     [](proto::Config* c) { c->mutable_model()->mutable_llama()->set_weight_cast("layer"); }});
  }
  if (config.train().gradients() != "bf16" && config.train().precision() != "fp32") {
    knobs.push_back({"train.gradients: bf16 (bf16 weight gradients)",
                     [](proto::Config* c) { c->mutable_train()->set_gradients("bf16"); }});
  }
  // (With no copy left to cast per layer, weight_cast layer goes.)
  if (!Bf16Params(config.train()) && config.train().precision() != "fp32") {
    const bool layer = g.weight_cast() == "layer";
    knobs.push_back({std::string("train.master_weights: split") + (layer ? ", model.llama.weight_cast: step" : "") +
                         " (fp32 masters without their bf16 copy)",
                     [layer](proto::Config* c) {
                       c->mutable_train()->set_master_weights("split");
                       if (layer) c->mutable_model()->mutable_llama()->set_weight_cast("step");
                     }});
  }
  return knobs;
}

// none, selective, then full on the first 2, 3, ... layers (each with none, then selective on the rest), then full:
// the order of recompute cost (a full layer re-runs its forward, far more than the element-wise passes of selective).
// *open under auto with no old key and no full_checkpoint_layers. With model.llama.weight_cast auto each comes twice,
// with the bf16 weight copy per step and per layer, the latter's extra cast pass counted as recompute
// (kLayerCastTokens), the whole list in the order of that cost.
std::vector<ActivationPolicy> ActivationPolicies(const proto::Config& config, bool* open) {
  Checkpointing c;
  *open = CheckpointingOf(config, &c).ok() && !c.fixed;
  const int64_t n_layer = config.model().llama().n_layer();
  const bool cast_open = config.model().llama().weight_cast() == "auto";
  const double tokens = static_cast<double>(config.data().batch_size() * config.model().llama().max_seq_len());
  const double cast_cost = kLayerCastTokens / std::max(1.0, tokens);
  std::vector<ActivationPolicy> out;
  auto add = [&](const std::string& policy, int64_t k, bool layer_cast) {
    Checkpointing named;
    named.full_layers = policy == "full" ? n_layer : k;
    named.selective = policy == "selective";
    std::string setting = "model.llama.activation_checkpointing: " + policy;
    if (k > 0) setting += ", full_checkpoint_layers: " + std::to_string(k);
    if (layer_cast) setting += ", weight_cast: layer";
    // A full layer recomputes its forward (a third of its forward + backward); a selective one its element-wise and
    // norm kernels (+0.5% of the step, measured at the 8B shape: bench/results/2026-12-04-llama-offload-keep-h200.md).
    const double full = static_cast<double>(named.full_layers) / static_cast<double>(n_layer);
    const double recompute =
        full / 3.0 + (named.selective ? (1.0 - full) * 0.005 : 0.0) + (layer_cast ? cast_cost : 0.0);
    out.push_back({PolicyName(named, n_layer) + (layer_cast ? ", weights cast per layer" : ""), setting,
                   [policy, k, layer_cast, cast_open](proto::Config* cfg) {
                     proto::LlamaConfig* g = cfg->mutable_model()->mutable_llama();
                     g->set_activation_checkpointing(policy);
                     g->set_full_checkpoint_layers(k);
                     if (cast_open) g->set_weight_cast(layer_cast ? "layer" : "step");
                     g->set_recompute_pointwise(false);  // the old keys, now said by the policy
                     cfg->mutable_train()->set_recompute(false);
                   },
                   recompute});
  };
  for (const bool layer_cast : {false, true}) {
    if (layer_cast && !cast_open) break;
    for (int64_t k = 0; k < n_layer; ++k) {
      if (k == 1) continue;  // one full layer saves nothing: the full layers' shared set replaces its own
      add("none", k, layer_cast);
      add("selective", k, layer_cast);
    }
    add("full", 0, layer_cast);
  }
  std::stable_sort(out.begin(), out.end(),
                   [](const ActivationPolicy& a, const ActivationPolicy& b) { return a.recompute < b.recompute; });
  return out;
}

Status CheckData(const proto::Config& config, const std::string& what, const proto::DatasetSchema& s) {
  const proto::LlamaConfig& g = config.model().llama();
  // The model's own constraints first: the run check (dtrain launch) reports them before any worker starts.
  DT_RETURN_IF_ERROR(CheckConfig(g, /*cuda=*/false));
  // train.precision auto may be bf16 on the workers' GPUs: Build checks weight_cast again with the device known.
  DT_RETURN_IF_ERROR(CheckWeightCast(config, config.train().precision() != "fp32"));
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
  spec.memory_plan = &MemoryPlanOf;
  spec.activation_policies = &ActivationPolicies;
  spec.memory_knobs = &MemoryKnobs;
  return spec;
}

}  // namespace dtrain::models
