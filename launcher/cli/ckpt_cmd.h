#pragma once
// `dtrain ckpt list|verify|inspect|export`: look into a checkpoint store (runtime/checkpoint/checkpoint.h).
//
//   dtrain ckpt list URL                      every step directory: valid or partial, size, `latest`
//   dtrain ckpt verify URL [--step N]         reads every file and checks sizes and CRC32C; DataLoss
//                                             (exit 2) naming each bad checkpoint
//   dtrain ckpt inspect URL [--step N]        the manifest of the newest valid checkpoint (or step N)
//   dtrain ckpt export URL --out PATH [--step N] [--format safetensors|hf] [--overwrite]
//                                             the parameters as safetensors (PyTorch), or (hf: models with an
//                                             HF layout, GPT-2 today) a Hugging Face model directory
//                                             (runtime/train/hf_export.h). An existing PATH or one inside a
//                                             checkpoint store is refused (exit 2) unless --overwrite, which
//                                             moves the existing PATH aside; one inside the store it reads,
//                                             always (runtime/checkpoint/export_target.h)
// URL: file:///dir, a directory, or s3://bucket/prefix (credentials from AWS_* variables); for verify, inspect
// and export also a step directory of one (runs/x/checkpoints/step-00000030: that step).
// Output goes to stdout.

#include <cstdint>
#include <string>
#include <vector>

#include "core/status.h"

namespace CLI {
class App;
}  // namespace CLI

namespace dtrain::launcher {

struct CkptArgs {
  std::string verb;  // list | verify | inspect | export
  std::string url, out, format = "safetensors";
  int64_t step = -1;       // -1: newest valid
  bool overwrite = false;  // export: move an existing --out aside
};

// Registers `ckpt` and its verbs (each with its own flags) on `parent` (launcher/cli_parse.h);
// *out must outlive `parent`. Returns the `ckpt` group.
CLI::App* AddCkptCommand(CLI::App* parent, CkptArgs* out);

Status RunCkpt(const CkptArgs& args);

}  // namespace dtrain::launcher
