#pragma once
// CheckRun: everything about a run that can be checked from its config and the data it names, before any
// worker starts. `dtrain launch` calls it (also with --dry-run) so that a bad run is one message and exit 2
// instead of one error per rank inside mpirun's banner; `dtrain train` calls it too, for workers started by
// mpirun/srun directly.
//
// Checked: the model kind is known (CheckModelKind); the data exists and fits the model —
//   fashion_mnist: the four IDX files are in data.dir; the model takes 28x28 single-channel images of at
//                  least 10 classes (mlp.input_dim 784, cnn in_channels 1 and image_size 28);
//   shards (local directories; s3:// ones are checked by the workers after the download): the manifest reads
//                  and validates; an IMAGE dataset feeds mlp/cnn (pixels per image = mlp.input_dim, or the
//                  cnn's channels and image size) with labels below the model's num_classes; a TOKENS dataset
//                  feeds gpt2 with vocab_size <= model.gpt2.vocab_size and records of at most
//                  max_seq_len + 1 tokens;
//   synthetic_tokens: gpt2 and train.max_steps set;
// and the schedule: the run's optimizer steps at `world_size` ranks, and warmup_steps beyond them (a warning:
// LrSchedule clips the warmup to the run). Errors are InvalidArgument / NotFound / DataLoss naming the key or
// file. Thread-safe; reads files only.

#include <string>
#include <vector>

#include "core/status.h"
#include "proto/config.pb.h"

namespace dtrain::runtime {

struct RunCheck {
  int64_t train_samples = 0;  // 0 when unknown here (s3:// data, synthetic tokens)
  int64_t total_steps = 0;    // optimizer steps of the whole run; 0 when unknown
  std::vector<std::string> warnings;
};

Status CheckRun(const proto::Config& cfg, int world_size, RunCheck* out);

}  // namespace dtrain::runtime
