#pragma once
// The model sizes a config leaves to the data (0 = auto: model.gpt2.vocab_size, max_seq_len, padded_vocab_size;
// model.llama.vocab_size, max_seq_len), resolved from the training dataset's schema through the model's
// ModelSpec::resolve_auto (models/model_spec.h). Called right after the config is loaded, by `dtrain launch` (before
// its run check) and by every worker, so that the run check, the model, <run.dir>/config.yaml and checkpoints all see
// the resolved numbers. The dataset is data.train_shards of data.dataset shards, read when it is a local directory
// (its manifest only); for fashion_mnist, synthetic_tokens and s3:// datasets an auto size is an error naming the key
// and the reason. Thread-safe; reads one manifest.

#include "core/status.h"
#include "proto/config.pb.h"

namespace dtrain::runtime {

// Fills the auto sizes of cfg's model in place. OK and unchanged for a model kind without auto sizes; the errors of
// FindModelSpec for an unknown kind are left to the run check.
Status ResolveAutoSizes(proto::Config* cfg);

}  // namespace dtrain::runtime
