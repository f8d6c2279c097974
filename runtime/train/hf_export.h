#pragma once
// Hugging Face export: `dtrain ckpt export URL --format hf --out DIR` writes DIR/config.json and
// DIR/model.safetensors so that transformers' from_pretrained(DIR) loads them, for every model kind whose
// ModelSpec has an hf_export (models/model_spec.h; today GPT-2, as GPT2LMHeadModel: models/gpt2_spec.cc). The
// spec gives the plan — each HF tensor's name, the dtrain parameter it comes from, a transpose, the rows it keeps —
// and config.json; this file checks the parameters against it and writes the files.
// The import (`model.init_from: hf:DIR`) is its inverse: runtime/train/hf_import.h.
// Thread-safe; writes files only (each through a .tmp file and a rename).

#include <map>
#include <string>
#include <vector>

#include "core/status.h"
#include "proto/config.pb.h"
#include "runtime/checkpoint/safetensors.h"

namespace dtrain::runtime {

// What an export did besides config.json and model.safetensors.
struct HfExportReport {
  // Written beside the weights: copied from the run's hf:DIR (HfTokenizerFiles, hf_import.h), else the training
  // dataset's tokenizer (its schema's TokenizerInfo) under transformers' names plus a tokenizer_config.json.
  std::vector<std::string> tokenizer_files;
  std::string warning;  // set when the tokenizer source is gone or changed: no tokenizer files written
};

// `params` are dtrain's parameters by name (as in a checkpoint or final.safetensors) for the model of `cfg`.
// InvalidArgument for a model kind without an HF export (or an unknown one), or a parameter missing or
// mis-shaped (named); IoError naming the file when DIR cannot be written. `metadata` goes into model.safetensors.
// When cfg's model.init_from is hf:SRC (a relative SRC is taken from the current directory) and SRC still holds
// tokenizer files, they are copied into DIR, so that DIR loads with its tokenizer; config.json stays the plan's.
// Otherwise, when data.train_shards is a local dataset whose schema names a GPT-2 BPE or SentencePiece tokenizer
// (`convert-text --tokenizer`), its files are written under transformers' names with a tokenizer_config.json (the
// CRC32C recorded at conversion must still match; a warning otherwise). Relative paths are taken from the current
// directory, as when the run started.
Status ExportHuggingFace(const proto::Config& cfg, const std::vector<NamedTensor>& params,
                         const std::map<std::string, std::string>& metadata, const std::string& dir,
                         HfExportReport* report = nullptr);

}  // namespace dtrain::runtime
