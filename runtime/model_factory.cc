#include "runtime/model_factory.h"

#include "models/mlp.h"
#include "runtime/core/check.h"

namespace dtrain::runtime {

Status BuildModel(const proto::ModelConfig& cfg, DeviceContext& ctx, std::unique_ptr<models::Model>* out) {
  if (cfg.kind() == "mlp") {
    models::MlpOptions opts;
    opts.input_dim = cfg.mlp().input_dim();
    opts.hidden.assign(cfg.mlp().hidden().begin(), cfg.mlp().hidden().end());
    opts.num_classes = cfg.mlp().num_classes();
    opts.gelu = cfg.mlp().activation() == "gelu";
    std::unique_ptr<models::Mlp> mlp;
    DT_RETURN_IF_ERROR(models::Mlp::Create(ctx, opts, &mlp));
    *out = std::move(mlp);
    return Status::OK();
  }
  return Status::InvalidArgument("model.kind: unknown model '" + cfg.kind() + "' (expected: mlp)");
}

}  // namespace dtrain::runtime
