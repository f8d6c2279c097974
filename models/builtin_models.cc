#include "models/builtin_models.h"

namespace dtrain::models {

std::vector<ModelSpec> BuiltinModels() { return {MlpSpec(), CnnSpec(), Gpt2Spec(), LlamaSpec()}; }

}  // namespace dtrain::models
