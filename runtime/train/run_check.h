#pragma once
// CheckRun: everything about a run that can be checked from its config and the data it names, before any
// worker starts. `dtrain launch` calls it (also with --dry-run) so that a bad run is one message and exit 2
// instead of one error per rank inside mpirun's banner; `dtrain train` calls it too, for workers started by
// mpirun/srun directly.
//
// Checked: the model kind is known (FindModelSpec); the data exists and fits the model, as the model's
// ModelSpec::check_data says (models/model_spec.h; a model without one takes any data) —
//   fashion_mnist: the four IDX files are in data.dir; checked as labelled 28x28 images of 10 classes;
//   shards (local directories; s3:// ones are checked by the workers after the download): the manifest reads
//                  and validates, and its schema is checked (the built-ins: mlp/cnn take labelled images of
//                  their input shape and at most num_classes classes; gpt2 takes tokens with vocab_size <=
//                  model.gpt2.vocab_size and records of at most max_seq_len + 1 tokens);
//   synthetic_tokens: a token model (ModelSpec::tokens) and train.max_steps set;
// and the schedule: the run's optimizer steps at `world_size` ranks, and warmup_steps beyond them (a warning:
// LrSchedule clips the warmup to the run). Errors are InvalidArgument / NotFound / DataLoss naming the key or
// file; every problem found is reported at once (JoinProblems), so a run with three mistakes is not fixed in three
// tries. Thread-safe; reads files only.

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

// The problems of a check as one Status: OK when all are OK; the one that is not; with several bad-input ones
// (InvalidArgument, NotFound, DataLoss), InvalidArgument "N problems, each of which stops the run:" and each message
// on a line of its own ("\n  - ..."). Any other failure (an IoError: a file that could not be read) is returned
// alone, as it is.
Status JoinProblems(const std::vector<Status>& problems);

}  // namespace dtrain::runtime
