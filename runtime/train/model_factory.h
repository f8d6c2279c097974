#pragma once
// The runtime's door to the model registry (models/model_registry.h): builds the model named by `model.kind` in
// the config, on the context's device, and finds the kind's ModelSpec for the parts of the runtime that need to
// know more about it (run check, tokens/s, synthetic data, weights metadata, Hugging Face export). Built-in kinds
// (mlp, cnn, gpt2) and registered ones are found the same way.
//
// Custom models (README "Custom model in C++", examples/custom_model/): a program that links dtrain
// registers its factories first thing in main() and then hands over to the dtrain command line,
//
//   int main(int argc, char** argv) {
//     dtrain::Status st = dtrain::runtime::RegisterModel("my_mlp", &MyMlp::Build);
//     if (!st.ok()) { ... }
//     return dtrain::launcher::Main(argc, argv);   // launcher/cli/cli.h
//   }
//
// so that `my_trainer launch ... cfg.yaml` starts `my_trainer train cfg.yaml` workers (the launcher
// re-executes its own binary), which all know `model.kind: my_mlp`. A program that wants to give its model a
// run check, tokens/s or an HF export registers a whole models::ModelSpec with models::RegisterModel instead.
// The registry is process-wide, only ever added to, and thread-safe.

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "core/device_context.h"
#include "models/model.h"
#include "models/model_spec.h"
#include "proto/config.pb.h"

namespace dtrain::runtime {

// Makes a model for `cfg` on ctx's device. The factory gets the whole resolved config: model
// shapes may come from any of its sections (e.g. reuse model.mlp's input_dim/hidden/num_classes),
// data.batch_size, train.precision ... It must return a model whose params()/grads() live on ctx's
// device; the trainer calls InitParams(train.seed) next (or restores a checkpoint). Errors are
// returned as-is (InvalidArgument for a config the model cannot do: exit code 2).
using ModelFactory =
    std::function<Status(const proto::Config& cfg, DeviceContext& ctx, std::unique_ptr<models::Model>* out)>;

// Registers `factory` for `model.kind: kind`, as a ModelSpec with only a build (its errors gain the context
// "model.kind <kind>"; a factory returning no model is Internal). InvalidArgument when `kind` is empty, not
// made of [A-Za-z0-9_.-], a built-in kind, or already registered; or when `factory` is empty.
// Call before any model is built (first thing in main). Thread-safe.
Status RegisterModel(const std::string& kind, ModelFactory factory);

// Every kind BuildModel knows: the built-ins (mlp, cnn, gpt2), then the registered ones sorted.
std::vector<std::string> ModelKinds();

// The spec of `model.kind`, or InvalidArgument naming `model.kind`, every known kind and RegisterModel.
Status FindModelSpec(const proto::Config& cfg, const models::ModelSpec** spec);

// OK when BuildModel knows `model.kind`; otherwise FindModelSpec's InvalidArgument. Lets a worker refuse a
// misspelt kind before it touches devices and communicators.
Status CheckModelKind(const proto::Config& cfg);

// Builds the model of `model.kind` with its spec's build (the built-ins: train.precision other than auto/fp32
// is refused for mlp, fp16 for cnn; a registered factory decides for itself).
Status BuildModel(const proto::Config& cfg, DeviceContext& ctx, std::unique_ptr<models::Model>* out);

// Tokens in one sample of `model.kind` (its spec's TokenInput seq_len), for tokens/s; 0 for a model that does not
// take tokens or an unknown kind.
int64_t TokensPerSample(const proto::Config& cfg);

// The token input of `model.kind` for data.dataset synthetic_tokens; InvalidArgument when the model takes no
// tokens (or its kind is unknown).
Status SyntheticTokenInput(const proto::Config& cfg, models::TokenInput* tokens);

}  // namespace dtrain::runtime
