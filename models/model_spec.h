#pragma once
// ModelSpec: everything the rest of dtrain needs to know about one model kind (`model.kind` in the config), so
// that nothing outside models/ asks which model it holds. One record per kind, the same for the built-ins
// (mlp, cnn, gpt2: models/<kind>_spec.cc, listed in models/builtin_models.cc) and for custom models
// (runtime::RegisterModel, runtime/train/model_factory.h, wraps a factory into a ModelSpec). The records live
// in models/model_registry.h.
//
// Only `kind` and `build` are required; every other part is optional and says what the model does not do when
// left empty (no run check of the data, not a token model, no extra weights metadata, no Hugging Face export, no memory
// plan and no activation-checkpointing policies for train.memory_budget_gib).
// The functions are called from any thread, so they must not keep state.

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/device_context.h"
#include "core/status.h"
#include "models/memory_plan.h"
#include "models/model.h"
#include "proto/config.pb.h"
#include "proto/shard.pb.h"

namespace dtrain::models {

// Whether the model's params are bf16 under train.master_weights: "bf16" (bf16 masters) or "split" (the bf16 high
// halves of fp32 masters; the optimizer keeps the low halves). Any other value, "" of a config built in code among
// them, is fp32.
bool Bf16Params(const proto::TrainConfig& train);

// A language model's samples: token sequences of seq_len inputs (records of seq_len + 1 tokens) with ids below
// vocab_size. Gives the tokens per sample of the tokens/s metric and the shape of data.dataset synthetic_tokens'
// random batches (throughput runs).
struct TokenInput {
  int64_t seq_len = 0;
  int64_t vocab_size = 0;
};

// One tensor of a Hugging Face checkpoint, made from one of dtrain's parameters.
struct HfTensor {
  std::string name;                  // HF's name ("transformer.h.0.attn.c_attn.weight")
  std::string param;                 // dtrain's parameter ("h.0.attn.c_attn.weight")
  std::vector<int64_t> param_shape;  // the parameter's shape, checked before the export
  bool transpose = false;            // a [rows, cols] matrix written as [cols, rows] (after the row slice below)
  // A slice of dim 0: rows [row_begin, row_begin + keep_rows) of the parameter (keep_rows -1: to the end). E.g. an
  // unpadded vocabulary (keep_rows = vocab_size), or q_proj out of a fused qkv weight (row_begin 0, keep_rows NH*hs).
  int64_t row_begin = 0;
  int64_t keep_rows = -1;
};

// What `dtrain ckpt export --format hf` writes: model.safetensors with `tensors` (in this order) and
// config.json with `config_json`. The import (`model.init_from: hf:DIR`, runtime/train/hf_import.h) inverts it.
struct HfExportPlan {
  std::vector<HfTensor> tensors;
  std::string config_json;
  // config.json keys the import checks against config_json, each with the dtrain config key that sets it
  // ({"n_embd", "model.gpt2.n_embd"}), for the error message. The import also checks the usual structural keys
  // of HF configs (sizes, heads, vocab, rope_theta, eps, tie_word_embeddings, activation) without this map.
  std::map<std::string, std::string> config_keys;
};

// One activation-checkpointing policy a model offers (ModelSpec::activation_policies): its name for the log
// ("selective", "full on layers 0-3, selective after"), the config edit that selects it, and what it recomputes as a
// share of the step's forward + backward work (full: one more forward, ~1/3; optim.offload auto weighs it against
// the PCIe time of the optimizer state it lets stay on the GPU).
struct ActivationPolicy {
  std::string name;
  std::string setting;  // the config that selects it, for messages ("model.llama.activation_checkpointing: full")
  std::function<void(proto::Config* cfg)> apply;
  double recompute = 0;
};

// A config edit of the model's own that lowers a run's memory without changing what it computes beyond float
// summation order (e.g. the chunked LM head and loss). A run refused for memory names each with the plan it would give
// (runtime/train/memory_fit.h).
struct MemoryKnob {
  std::string setting;  // the config it sets, for messages ("model.llama.loss_chunk_tokens: 1024")
  std::function<void(proto::Config* cfg)> apply;
};

struct ModelSpec {
  std::string kind;  // `model.kind`: [A-Za-z0-9_.-]+

  // Makes the model for the whole resolved config (model.<kind>, data.batch_size, train.precision,
  // train.recompute ...) on ctx's device, with params()/grads() there; the trainer calls InitParams next (or
  // restores a checkpoint). InvalidArgument naming the config key for a config the model cannot do. Required.
  std::function<Status(const proto::Config& cfg, DeviceContext& ctx, std::unique_ptr<Model>* out)> build;

  // The run check (runtime/train/run_check.h): whether a dataset whose records `schema` describes can feed this
  // model. `what` names the data in errors ("data.train_shards /data/x", "data.dataset fashion_mnist").
  // InvalidArgument naming both the data and the config key that does not fit. Empty: takes any data.
  std::function<Status(const proto::Config& cfg, const std::string& what, const proto::DatasetSchema& schema)>
      check_data;

  // Sizes that the config leaves to the data (0 = auto: model.gpt2.vocab_size ...): sets them in *cfg from `schema`,
  // the training dataset's (runtime/train/auto_sizes.h calls it once, right after the config is loaded). `schema` is
  // null when there is no local dataset to read; `what` names the data, or says why there is none. An auto size that
  // cannot be resolved is InvalidArgument naming its key and the data. Empty: the model has no auto sizes.
  std::function<Status(const proto::DatasetSchema* schema, const std::string& what, proto::Config* cfg)> resolve_auto;

  // Language models only: their token input (TokenInput). Empty: not a token model (no tokens/s; synthetic_tokens
  // data is refused).
  std::function<TokenInput(const proto::Config& cfg)> tokens;

  // Adds the model's own keys to the "__metadata__" of exported weights (runtime/train/weights_metadata.h):
  // e.g. num_classes and input_shape, or vocab_size and max_seq_len. A model that sets "input_shape" takes the
  // dataset's pixels: the metadata then also gets the dataset's input normalization. Empty: none.
  std::function<void(const proto::Config& cfg, std::map<std::string, std::string>* metadata)> weights_metadata;

  // The Hugging Face layout of the model's weights (`dtrain ckpt export --format hf`). Empty: no HF export.
  std::function<Status(const proto::Config& cfg, HfExportPlan* plan)> hf_export;

  // The model's part of one rank's memory plan (models/memory_plan.h) for the resolved config, mirroring what `build`
  // allocates: params, grads, working_copy, activations (under the config's activation checkpointing; the policy's
  // name in activation_policy), backward_scratch, logits, workspace. The runtime fills the other fields.
  // InvalidArgument as `build` would be for a config the model cannot do. Empty: no plan (the launcher checks no
  // memory and train.memory_budget_gib is refused).
  std::function<Status(const proto::Config& cfg, const MemoryPlanInputs& in, MemoryPlan* plan)> memory_plan;

  // The model's activation-checkpointing policies, cheapest (least recompute) first, the last one the least memory.
  // *open: the config leaves the choice to train.memory_budget_gib (else it fixes the policy, and the budget only
  // checks it). Empty function: the model has no policies.
  std::function<std::vector<ActivationPolicy>(const proto::Config& cfg, bool* open)> activation_policies;

  // The model's memory knobs that this config has not set yet. Empty function: none.
  std::function<std::vector<MemoryKnob>(const proto::Config& cfg)> memory_knobs;
};

// The run check of an image classifier, for check_data: `schema` must hold labelled images of the model's
// input shape with at most `num_classes` classes. `input_shape` is {values} (a flat input: only the count
// must match) or {C, H, W} (an image schema of [H, W] counts as one channel); `input_key` names the config keys
// that set it ("model.mlp.input_dim"), `classes_key` the one of num_classes.
Status CheckImageClassifierData(const std::string& kind, const std::string& what, const proto::DatasetSchema& schema,
                                const std::vector<int64_t>& input_shape, const std::string& input_key,
                                int64_t num_classes, const std::string& classes_key);

// The token sizes of a language model given as 0 (auto), from the training dataset `schema` (null: none, `what`
// says why): *vocab_size from its vocab_size, *max_seq_len from its record length - 1; sizes not 0 are kept.
// InvalidArgument naming "model.<kind>.<key>" when one is auto and the data has no token vocabulary.
Status ResolveAutoTokenSizes(const std::string& kind, const proto::DatasetSchema* schema, const std::string& what,
                             int64_t* vocab_size, int64_t* max_seq_len);

// A language model's chunked LM head and loss as a memory knob: "model.<kind>.loss_chunk_tokens: 1024", applied by
// `set`; none when the run already chunks (current > 0) or its batch has no more than 1024 tokens.
std::vector<MemoryKnob> ChunkedLossKnob(const std::string& kind, int64_t current, int64_t batch_tokens,
                                        std::function<void(proto::Config* cfg, int64_t tokens)> set);

// The run check of a language model, for check_data: `schema` must hold token records of at most max_seq_len + 1
// tokens with ids below vocab_size. Keys are named "model.<kind>.vocab_size" and "model.<kind>.max_seq_len".
Status CheckTokenData(const std::string& kind, const std::string& what, const proto::DatasetSchema& schema,
                      int64_t vocab_size, int64_t max_seq_len);

// Size checks of a model's config before anything is allocated (a width of 2e9 used to ask the allocator for
// 4e18 bytes, naming no field). kMaxModelDim bounds one size, kMaxModelParams a model's parameter count (2^34:
// 64 GiB of fp32 weights, before gradients and optimizer state).
constexpr int64_t kMaxModelDim = int64_t{1} << 24;
constexpr int64_t kMaxModelParams = int64_t{1} << 34;
// InvalidArgument "<key>: <v> is outside [lo, hi]" (`key` is the config key, e.g. "model.mlp.hidden[1]").
Status CheckModelSize(const std::string& key, int64_t v, int64_t lo, int64_t hi = kMaxModelDim);
// *total += rows x cols, checked; InvalidArgument naming `model` ("model.mlp") when the count overflows or passes
// kMaxModelParams.
Status AddModelParams(const std::string& model, int64_t rows, int64_t cols, int64_t* total);

}  // namespace dtrain::models
