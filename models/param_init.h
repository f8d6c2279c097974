#pragma once
// The host-side start values of a model's flat parameter buffer, shared by the GPT-2 and Llama inits: each parameter
// is a constant or N(0, std) draws, the draws taken in parameter order from one NormalSampler(seed) stream (a
// constant takes no draws). Filled on several threads, each from its own position in that stream (NormalSampler::
// Seek), so the values are those of the one-thread loop bit for bit, on every machine — an 8B model's 8e9 draws
// take about 2 minutes on one core.

#include <cstdint>
#include <functional>
#include <vector>

#include "core/status.h"
#include "core/tensor.h"
#include "models/model.h"

namespace dtrain::models {

// How one parameter starts: every element `value` (normal false), or value * N(0, 1) draws (normal true).
struct ParamInit {
  bool normal = false;
  double value = 0.0;
};

// Writes the start values of every parameter of `infos` into `staging` (host memory, f32 or f64, numel = the flat
// buffer's) from `rule(info)` and `seed`, on up to `threads` threads (0: the machine's hardware threads).
// InvalidArgument for another dtype or device, or a parameter outside staging.
Status FillParamInit(const std::vector<ParamInfo>& infos, const std::function<ParamInit(const ParamInfo&)>& rule,
                     uint64_t seed, Tensor* staging, int threads = 0);

}  // namespace dtrain::models
