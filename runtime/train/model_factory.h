#pragma once
// Builds the model named by `model.kind` in the config, on the context's device, for the batch size and
// precision the config gives: the built-in kinds (mlp, cnn, gpt2) and any kind registered with
// RegisterModel.
//
// Custom models (README "Custom model in C++", examples/custom_model/): a program that links dtrain
// registers its factories first thing in main() and then hands over to the dtrain command line,
//
//   int main(int argc, char** argv) {
//     dtrain::Status st = dtrain::runtime::RegisterModel("my_mlp", &MyMlp::Build);
//     if (!st.ok()) { ... }
//     return dtrain::launcher::Main(argc, argv);   // launcher/cli.h
//   }
//
// so that `my_trainer launch ... cfg.yaml` starts `my_trainer train cfg.yaml` workers (the launcher
// re-executes its own binary), which all know `model.kind: my_mlp`. The registry is process-wide
// (the one exception to "no globals": the worker's model is chosen by a config string, and the
// factory must be reachable from the trainer without threading it through every layer); it is only
// ever added to, and is thread-safe.

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "core/device_context.h"
#include "models/model.h"
#include "proto/config.pb.h"

namespace dtrain::runtime {

// Makes a model for `cfg` on ctx's device. The factory gets the whole resolved config: model
// shapes may come from any of its sections (e.g. reuse model.mlp's input_dim/hidden/num_classes),
// data.batch_size, train.precision ... It must return a model whose params()/grads() live on ctx's
// device; the trainer calls InitParams(train.seed) next (or restores a checkpoint). Errors are
// returned as-is (InvalidArgument for a config the model cannot do: exit code 2).
using ModelFactory =
    std::function<Status(const proto::Config& cfg, DeviceContext& ctx, std::unique_ptr<models::Model>* out)>;

// Registers `factory` for `model.kind: kind`. InvalidArgument when `kind` is empty, not made of
// [A-Za-z0-9_.-], a built-in kind, or already registered; or when `factory` is empty.
// Call before any model is built (first thing in main). Thread-safe.
Status RegisterModel(const std::string& kind, ModelFactory factory);

// Every kind BuildModel knows: the built-ins (mlp, cnn, gpt2), then the registered ones sorted.
std::vector<std::string> ModelKinds();

// OK when BuildModel knows `model.kind` (a built-in or registered kind); otherwise BuildModel's
// InvalidArgument. Lets a worker refuse a misspelt kind before it touches devices and communicators.
Status CheckModelKind(const proto::Config& cfg);

// Built-in kinds are built here; any other kind by its registered factory. InvalidArgument naming
// `model.kind` and the known kinds for an unknown one. train.precision other than auto/fp32 is
// refused for the built-in mlp and cnn; a registered factory decides for itself.
Status BuildModel(const proto::Config& cfg, DeviceContext& ctx, std::unique_ptr<models::Model>* out);

}  // namespace dtrain::runtime
