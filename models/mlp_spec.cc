// model.kind mlp (models/mlp.h): a classifier of flat inputs, in fp32.
#include <memory>
#include <string>

#include "core/check.h"
#include "models/builtin_models.h"
#include "models/mlp.h"

namespace dtrain::models {
namespace {

// Every width in [1, kMaxModelDim] and the parameter count within kMaxModelParams, each error naming its key.
Status CheckSizes(const proto::MlpConfig& cfg) {
  DT_RETURN_IF_ERROR(CheckModelSize("model.mlp.input_dim", cfg.input_dim(), 1));
  DT_RETURN_IF_ERROR(CheckModelSize("model.mlp.num_classes", cfg.num_classes(), 2));
  int64_t in = cfg.input_dim(), params = 0;
  for (int i = 0; i < cfg.hidden_size(); ++i) {
    DT_RETURN_IF_ERROR(CheckModelSize("model.mlp.hidden[" + std::to_string(i) + "]", cfg.hidden(i), 1));
    DT_RETURN_IF_ERROR(AddModelParams("model.mlp", in + 1, cfg.hidden(i), &params));
    in = cfg.hidden(i);
  }
  return AddModelParams("model.mlp", in + 1, cfg.num_classes(), &params);
}

Status Build(const proto::Config& config, DeviceContext& ctx, std::unique_ptr<Model>* out) {
  const proto::MlpConfig& cfg = config.model().mlp();
  DT_RETURN_IF_ERROR(CheckSizes(cfg));
  const std::string& precision = config.train().precision();
  if (precision != "auto" && precision != "fp32") {
    return Status::InvalidArgument(
        "train.precision: " + precision +
        " is not implemented for model.kind mlp, which trains in fp32 (use auto or fp32; README's `train.precision` "
        "says which models take which precision)");
  }
  MlpOptions opts;
  opts.input_dim = cfg.input_dim();
  opts.hidden.assign(cfg.hidden().begin(), cfg.hidden().end());
  opts.num_classes = cfg.num_classes();
  opts.gelu = cfg.activation() == "gelu";
  std::unique_ptr<Mlp> mlp;
  DT_RETURN_IF_ERROR(Mlp::Create(ctx, opts, &mlp));
  *out = std::move(mlp);
  return Status::OK();
}

Status CheckData(const proto::Config& config, const std::string& what, const proto::DatasetSchema& schema) {
  const proto::MlpConfig& cfg = config.model().mlp();
  DT_RETURN_IF_ERROR(CheckSizes(cfg));  // the run check, before any allocation
  return CheckImageClassifierData("mlp", what, schema, {cfg.input_dim()}, "model.mlp.input_dim", cfg.num_classes(),
                                  "model.mlp.num_classes");
}

void WeightsMetadata(const proto::Config& config, std::map<std::string, std::string>* m) {
  const proto::MlpConfig& cfg = config.model().mlp();
  (*m)["num_classes"] = std::to_string(cfg.num_classes());
  (*m)["input_shape"] = std::to_string(cfg.input_dim());
}

}  // namespace

ModelSpec MlpSpec() {
  ModelSpec spec;
  spec.kind = "mlp";
  spec.build = &Build;
  spec.check_data = &CheckData;
  spec.weights_metadata = &WeightsMetadata;
  return spec;
}

}  // namespace dtrain::models
