#pragma once
// The model registry: one ModelSpec (models/model_spec.h) per `model.kind`. It starts with the built-in kinds
// (models/builtin_models.cc: mlp, cnn, gpt2, in that order) and is only ever added to, by RegisterModel (custom
// models register first thing in main, through runtime::RegisterModel). Process-wide — the one exception to "no
// globals": a worker's model is chosen by a config string, and every part of the runtime that must know about it
// (build, run check, tokens/s, synthetic data, weights metadata, HF export) reaches its spec from the config alone.
// Thread-safe; a spec, once registered, stays at the same address until the process ends.

#include <string>
#include <vector>

#include "core/status.h"
#include "models/model_spec.h"

namespace dtrain::models {

// Adds `spec`. InvalidArgument when spec.kind is empty or not made of [A-Za-z0-9_.-], is a built-in kind or
// already registered, or spec.build is empty.
Status RegisterModel(ModelSpec spec);

// The spec of `kind`; nullptr when no such kind is registered.
const ModelSpec* FindModel(const std::string& kind);

// Every registered kind: the built-ins in their order, then the others sorted.
std::vector<std::string> ModelKinds();

}  // namespace dtrain::models
