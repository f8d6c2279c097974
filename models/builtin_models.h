#pragma once
// The built-in model kinds, each defined in its own models/<kind>_spec.cc. A new built-in model adds its
// function here and to BuiltinModels() (models/builtin_models.cc), which the registry loads on first use.

#include <vector>

#include "models/model_spec.h"

namespace dtrain::models {

ModelSpec MlpSpec();    // models/mlp_spec.cc
ModelSpec CnnSpec();    // models/cnn_spec.cc
ModelSpec Gpt2Spec();   // models/gpt2_spec.cc
ModelSpec LlamaSpec();  // models/llama_spec.cc

// Every built-in spec, in the order ModelKinds() lists them.
std::vector<ModelSpec> BuiltinModels();

}  // namespace dtrain::models
