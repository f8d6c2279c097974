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
  std::vector<std::string> tokenizer_files;  // copied from the run's hf:DIR (HfTokenizerFiles, hf_import.h)
  std::string warning;                       // set when the run's hf:DIR is gone: no tokenizer files copied
};

// `params` are dtrain's parameters by name (as in a checkpoint or final.safetensors) for the model of `cfg`.
// InvalidArgument for a model kind without an HF export (or an unknown one), or a parameter missing or
// mis-shaped (named); IoError naming the file when DIR cannot be written. `metadata` goes into model.safetensors.
// When cfg's model.init_from is hf:SRC (a relative SRC is taken from the current directory) and SRC still holds
// tokenizer files, they are copied into DIR, so that DIR loads with its tokenizer; config.json stays the plan's.
Status ExportHuggingFace(const proto::Config& cfg, const std::vector<NamedTensor>& params,
                         const std::map<std::string, std::string>& metadata, const std::string& dir,
                         HfExportReport* report = nullptr);

}  // namespace dtrain::runtime
