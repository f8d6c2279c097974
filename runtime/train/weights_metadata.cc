#include "runtime/train/weights_metadata.h"

#include <cstdio>
#include <string>

#include "data/fashion_mnist.h"
#include "data/manifest.h"
#include "models/model_registry.h"
#include "runtime/config/config.h"
#include "storage/scheme.h"

namespace dtrain::runtime {
namespace {

// The config's model section alone, as YAML: "model:" and its indented lines.
std::string ModelYaml(const proto::Config& cfg) {
  const std::string all = ConfigToYaml(cfg);
  size_t begin = all.rfind("model:\n", 0) == 0 ? 0 : all.find("\nmodel:\n");
  if (begin == std::string::npos) return "";
  if (begin != 0) ++begin;
  size_t end = all.find('\n', begin);
  while (end != std::string::npos && end + 1 < all.size() && all[end + 1] == ' ') end = all.find('\n', end + 1);
  return all.substr(begin, end == std::string::npos ? std::string::npos : end + 1 - begin);
}

std::string Num(double v) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.9g", v);
  return buf;
}

}  // namespace

Status WeightsMetadata(const proto::Config& cfg, std::map<std::string, std::string>* out) {
  auto& m = *out;
  m.clear();
  m["format"] = "pt";
  m["producer"] = "dtrain";
  m["dtrain_version"] = DTRAIN_VERSION;
  m["model_kind"] = cfg.model().kind();
  m["model_config"] = ModelYaml(cfg);
  const models::ModelSpec* spec = models::FindModel(cfg.model().kind());
  if (spec == nullptr || !spec->weights_metadata) return Status::OK();
  spec->weights_metadata(cfg, &m);
  if (m.count("input_shape") == 0) return Status::OK();  // not an image model: no pixel normalization
  double mean = 0, std = 0;
  std::string shards_dir;  // a local dataset's (a remote one's manifest is not read here)
  if (cfg.data().dataset() == "fashion_mnist") {
    mean = data::kFashionMnistMean;
    std = data::kFashionMnistStd;
  } else if (cfg.data().dataset() == "shards" && storage::LocalDir(cfg.data().train_shards(), &shards_dir)) {
    proto::DatasetManifest dm;
    if (data::ReadManifest(shards_dir, &dm).ok()) {
      mean = dm.schema().pixel_mean();
      std = dm.schema().pixel_std();
    }
  }
  if (std > 0) {
    m["input_normalization"] = "(pixel / 255 - input_mean) / input_std";
    m["input_mean"] = Num(mean);
    m["input_std"] = Num(std);
  }
  return Status::OK();
}

}  // namespace dtrain::runtime
