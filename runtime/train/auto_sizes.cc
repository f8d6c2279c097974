#include "runtime/train/auto_sizes.h"

#include <string>

#include "data/manifest.h"
#include "runtime/train/model_factory.h"
#include "storage/scheme.h"

namespace dtrain::runtime {

Status ResolveAutoSizes(proto::Config* cfg) {
  const models::ModelSpec* spec = nullptr;
  if (!FindModelSpec(*cfg, &spec).ok() || !spec->resolve_auto) return Status::OK();
  const auto& d = cfg->data();
  std::string dir;
  if (d.dataset() != "shards") {
    return spec->resolve_auto(nullptr, "data.dataset is " + d.dataset() + " (auto needs data.dataset shards)", cfg);
  }
  if (!storage::LocalDir(d.train_shards(), &dir)) {
    return spec->resolve_auto(nullptr,
                              "data.train_shards " + d.train_shards() +
                                  " is not a local directory (auto reads its "
                                  "manifest before the start; give the sizes for remote data)",
                              cfg);
  }
  proto::DatasetManifest m;
  const Status read = data::ReadManifest(dir, &m);
  if (!read.ok()) return spec->resolve_auto(nullptr, "data.train_shards cannot be read: " + read.ToString(), cfg);
  return spec->resolve_auto(&m.schema(), "data.train_shards " + dir, cfg);
}

}  // namespace dtrain::runtime
