#pragma once
// Hugging Face export: `dtrain ckpt export URL --format hf --out DIR` writes DIR/config.json and
// DIR/model.safetensors so that transformers' from_pretrained(DIR) loads them, for every model kind whose
// ModelSpec has an hf_export (models/model_spec.h; today GPT-2, as GPT2LMHeadModel: models/gpt2_spec.cc). The
// spec gives the plan — each HF tensor's name, the dtrain parameter it comes from, a transpose, the rows it keeps —
// and config.json; this file checks the parameters against it and writes the files.
// Thread-safe; writes files only (each through a .tmp file and a rename).

#include <map>
#include <string>
#include <vector>

#include "core/status.h"
#include "proto/config.pb.h"
#include "runtime/checkpoint/safetensors.h"

namespace dtrain::runtime {

// `params` are dtrain's parameters by name (as in a checkpoint or final.safetensors) for the model of `cfg`.
// InvalidArgument for a model kind without an HF export (or an unknown one), or a parameter missing or
// mis-shaped (named); IoError naming the file when DIR cannot be written. `metadata` goes into model.safetensors.
Status ExportHuggingFace(const proto::Config& cfg, const std::vector<NamedTensor>& params,
                         const std::map<std::string, std::string>& metadata, const std::string& dir);

}  // namespace dtrain::runtime
