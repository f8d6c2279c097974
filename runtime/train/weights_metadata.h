#pragma once
// WeightsMetadata: the safetensors "__metadata__" that makes exported weights usable without dtrain's config
// (final.safetensors, `dtrain ckpt export`): format "pt", producer "dtrain" and its version, model_kind, the
// model section of the config as YAML (model_config), and the model's own keys (its ModelSpec::weights_metadata,
// models/model_spec.h: the built-in image models give input_shape ("CxHxW" or the MLP's feature count) and
// num_classes, GPT-2 vocab_size and max_seq_len). A model that gives input_shape also gets its input
// normalization, input_normalization "(pixel / 255 - mean) / std" with input_mean / input_std: Fashion-MNIST's
// constants, or a local `shards` dataset's manifest values (omitted when its manifest cannot be read here).
// Thread-safe; reads a dataset manifest at most.

#include <map>
#include <string>

#include "core/status.h"
#include "proto/config.pb.h"

namespace dtrain::runtime {

Status WeightsMetadata(const proto::Config& cfg, std::map<std::string, std::string>* out);

}  // namespace dtrain::runtime
