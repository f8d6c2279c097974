#pragma once
// Hugging Face import: `model.init_from: hf:DIR` starts a run from a Hugging Face model directory (what
// transformers' save_pretrained writes, or a hub download): DIR/config.json and DIR/model.safetensors, or the
// shards DIR/model.safetensors.index.json names. The inverse of `dtrain ckpt export --format hf`
// (runtime/train/hf_export.h), for every model kind whose ModelSpec has an hf_export: the spec's HfExportPlan for
// the run's config says, per HF tensor, which dtrain parameter and rows it fills and whether it is transposed;
// nothing here knows a model.
//
// What is checked, each failure an error naming the file and the tensor or key:
//   - config.json against the plan's config_json: the structural keys (sizes, heads, kv heads, vocab, rope_theta,
//     norm eps, tie_word_embeddings, activation; the plan's config_keys) must agree; InvalidArgument naming the HF
//     key, both values and the dtrain config key to set;
//   - RoPE scaling: transformers 4's rope_scaling (null, or {"rope_type" (or "type"), numbers...}) or transformers
//     5's rope_parameters (rope_type "default": none) must be the plan's rope_scaling, the same rope_type and every
//     number equal; a rope_type the dtrain key does not take (yarn, linear, dynamic, longrope for llama) is an error
//     naming it and the kinds the key takes;
//   - every HF tensor of the plan is present with the shape the plan implies (after the row slice and transpose);
//   - no tensor the plan does not name, except HF buffers that are not weights (kIgnoredHfBuffers in the .cc:
//     GPT-2's attn.bias / attn.masked_bias masks, RoPE's inv_freq, lm_head.weight when the head is tied and it
//     equals the embedding);
//   - sizes and offsets in the files are untrusted (runtime/checkpoint/safetensors.h bounds-checks them; index
//     shard names must be plain file names in DIR).
// Parameter rows no HF tensor covers (the padded vocabulary past vocab_size) are zero. F32, BF16 and F16 files
// are read (widened to f32 exactly). Tensors named without the plan's first name component (the hub's gpt2 file
// has "h.0..." for "transformer.h.0...") are taken as transformers takes them.
// Thread-safe; reads files only.

#include <string>
#include <vector>

#include "core/status.h"
#include "proto/config.pb.h"
#include "runtime/checkpoint/safetensors.h"

namespace dtrain::runtime {

// True when `init_from` (model.init_from) names a Hugging Face directory: "hf:DIR", or a directory holding
// config.json; *dir gets DIR. False for anything else (a safetensors file of dtrain's parameter names).
bool HfInitDir(const std::string& init_from, std::string* dir);

// dtrain's parameters (names and full shapes, in the plan's order) for the model of `cfg` from the HF directory
// `dir`. InvalidArgument for a model kind without an HF layout, a config.json that disagrees with `cfg`, a
// missing, mis-shaped or unknown tensor; NotFound when DIR, its config.json or its weights are missing; DataLoss
// for a corrupt file. *params is complete only on OK.
Status ImportHuggingFace(const proto::Config& cfg, const std::string& dir, std::vector<NamedTensor>* params);

// The tokenizer and generation files of an HF directory that `dtrain ckpt export --format hf` copies from the
// run's hf: source (tokenizer.json, tokenizer_config.json, special_tokens_map.json, vocab.json, merges.txt,
// tokenizer.model, generation_config.json).
const std::vector<std::string>& HfTokenizerFiles();

}  // namespace dtrain::runtime
