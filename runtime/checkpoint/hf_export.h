#pragma once
// Hugging Face export of GPT-2 weights: `dtrain ckpt export URL --format hf --out DIR` writes DIR/config.json
// and DIR/model.safetensors so that `transformers.GPT2LMHeadModel.from_pretrained(DIR)` loads them.
//
// What changes on the way: names gain HF's "transformer." prefix; the Linear weights (dtrain stores
// [out, in], PyTorch's Linear layout) are transposed to the [in, out] of HF's Conv1D (c_attn, c_proj, c_fc);
// wte loses the rows past model.gpt2.vocab_size (dtrain pads the vocabulary for GEMM shapes; HF ties lm_head
// to wte, so its logits are exactly dtrain's first vocab_size logits). config.json states what dtrain's GPT-2
// computes: GELU with the tanh approximation ("gelu_new"), layer norm eps 1e-5, no dropout, tied embeddings.
// Thread-safe; writes files only (each through a .tmp file and a rename).

#include <map>
#include <string>
#include <vector>

#include "core/status.h"
#include "proto/config.pb.h"
#include "runtime/checkpoint/safetensors.h"

namespace dtrain::runtime {

// `params` are dtrain's GPT-2 parameters by name (as in a checkpoint or final.safetensors) for the model of
// `cfg` (model.kind gpt2). InvalidArgument for another model kind, or a parameter missing or mis-shaped
// (named); IoError naming the file when DIR cannot be written. `metadata` goes into model.safetensors.
Status ExportHuggingFaceGpt2(const proto::Config& cfg, const std::vector<NamedTensor>& params,
                             const std::map<std::string, std::string>& metadata, const std::string& dir);

}  // namespace dtrain::runtime
