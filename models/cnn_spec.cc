// model.kind cnn (models/cnn.h): a ResNet-style image classifier; bf16 channels-last on a GPU by default.
#include <memory>
#include <string>

#include "core/check.h"
#include "models/builtin_models.h"
#include "models/cnn.h"

namespace dtrain::models {
namespace {

// Every size in range, each error naming its key.
Status CheckSizes(const proto::CnnConfig& cfg) {
  constexpr int64_t kMaxImage = 1 << 16, kMaxChannels = 1 << 16;
  DT_RETURN_IF_ERROR(CheckModelSize("model.cnn.in_channels", cfg.in_channels(), 1, kMaxChannels));
  DT_RETURN_IF_ERROR(CheckModelSize("model.cnn.image_size", cfg.image_size(), 4, kMaxImage));
  DT_RETURN_IF_ERROR(CheckModelSize("model.cnn.num_classes", cfg.num_classes(), 2));
  for (int i = 0; i < cfg.channels_size(); ++i) {
    DT_RETURN_IF_ERROR(
        CheckModelSize("model.cnn.channels[" + std::to_string(i) + "]", cfg.channels(i), 1, kMaxChannels));
  }
  return Status::OK();
}

Status Build(const proto::Config& config, DeviceContext& ctx, std::unique_ptr<Model>* out) {
  const proto::CnnConfig& cfg = config.model().cnn();
  DT_RETURN_IF_ERROR(CheckSizes(cfg));
  const std::string& precision = config.train().precision();
  if (precision == "fp16" || precision == "fp8") {
    return Status::InvalidArgument("train.precision: " + precision +
                                   " is not implemented for model.kind cnn (use auto, fp32 or bf16)");
  }
  CnnOptions opts;
  opts.in_channels = cfg.in_channels();
  opts.image_size = cfg.image_size();
  opts.channels.assign(cfg.channels().begin(), cfg.channels().end());
  opts.blocks_per_stage = cfg.blocks_per_stage();
  opts.num_classes = cfg.num_classes();
  // auto: bf16 channels-last on a GPU (faster at the same accuracy:
  // bench/results/2026-12-02-cnn-bf16-channels-last-h200.md).
  if (precision == "bf16" || (precision == "auto" && ctx.is_cuda())) opts.precision = Precision::kBf16;
  if (opts.precision == Precision::kBf16 && !ctx.is_cuda()) {
    return Status::InvalidArgument("train.precision: bf16 needs a GPU; the CNN's CPU path is fp32");
  }
  std::unique_ptr<Cnn> cnn;
  DT_RETURN_IF_ERROR(Cnn::Create(ctx, opts, &cnn));
  *out = std::move(cnn);
  return Status::OK();
}

Status CheckData(const proto::Config& config, const std::string& what, const proto::DatasetSchema& schema) {
  const proto::CnnConfig& cfg = config.model().cnn();
  return CheckImageClassifierData("cnn", what, schema, {cfg.in_channels(), cfg.image_size(), cfg.image_size()},
                                  "model.cnn.in_channels x image_size x image_size", cfg.num_classes(),
                                  "model.cnn.num_classes");
}

void WeightsMetadata(const proto::Config& config, std::map<std::string, std::string>* m) {
  const proto::CnnConfig& cfg = config.model().cnn();
  (*m)["num_classes"] = std::to_string(cfg.num_classes());
  (*m)["input_shape"] = std::to_string(cfg.in_channels()) + "x" + std::to_string(cfg.image_size()) + "x" +
                        std::to_string(cfg.image_size());
}

}  // namespace

ModelSpec CnnSpec() {
  ModelSpec spec;
  spec.kind = "cnn";
  spec.build = &Build;
  spec.check_data = &CheckData;
  spec.weights_metadata = &WeightsMetadata;
  return spec;
}

}  // namespace dtrain::models
