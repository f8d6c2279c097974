#include "runtime/train/run_check.h"

#include <sys/stat.h>

#include <algorithm>
#include <string>

#include "core/check.h"
#include "data/manifest.h"
#include "runtime/train/model_factory.h"
#include "storage/scheme.h"

namespace dtrain::runtime {
namespace {

constexpr int64_t kFashionTrain = 60000;

bool IsFile(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

// The model's image input (channels, pixels per image) and class count; false for token models.
bool ImageModel(const proto::Config& cfg, int64_t* pixels, int64_t* channels, int64_t* side, int64_t* classes) {
  const auto& m = cfg.model();
  if (m.kind() == "mlp") {
    *pixels = m.mlp().input_dim();
    *channels = *side = 0;
    *classes = m.mlp().num_classes();
    return true;
  }
  if (m.kind() == "cnn") {
    *channels = m.cnn().in_channels();
    *side = m.cnn().image_size();
    *pixels = *channels * *side * *side;
    *classes = m.cnn().num_classes();
    return true;
  }
  return false;
}

Status CheckFashionMnist(const proto::Config& cfg, RunCheck* out) {
  const std::string dir = cfg.data().dir();
  for (const char* name :
       {"train-images-idx3-ubyte", "train-labels-idx1-ubyte", "t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte"}) {
    const std::string path = dir + "/" + name;
    if (!IsFile(path + ".gz") && !IsFile(path)) {
      return Status::NotFound("data.dir: " + path + ".gz not found (data.dataset fashion_mnist reads Debian's " +
                              "dataset-fashion-mnist: apt-get install dataset-fashion-mnist, or set data.dir)");
    }
  }
  const int64_t limit = cfg.data().limit_train();
  out->train_samples = limit > 0 ? std::min(limit, kFashionTrain) : kFashionTrain;
  int64_t pixels, channels, side, classes;
  if (cfg.model().kind() == "gpt2") {
    return Status::InvalidArgument(
        "data.dataset fashion_mnist holds 28x28 images: model.kind gpt2 takes tokens (use data.dataset shards or "
        "synthetic_tokens)");
  }
  if (!ImageModel(cfg, &pixels, &channels, &side, &classes)) return Status::OK();  // a registered model's own inputs
  if (pixels != 784 || (channels != 0 && (channels != 1 || side != 28))) {
    return Status::InvalidArgument(
        "fashion_mnist images are 1x28x28 (784 pixels) but the " + cfg.model().kind() + " takes " +
        (channels ? std::to_string(channels) + "x" + std::to_string(side) + "x" + std::to_string(side) + " images"
                  : "model.mlp.input_dim " + std::to_string(pixels)));
  }
  if (classes < 10) {
    return Status::InvalidArgument("fashion_mnist has 10 classes but model." + cfg.model().kind() + ".num_classes is " +
                                   std::to_string(classes));
  }
  return Status::OK();
}

Status CheckShards(const proto::Config& cfg, const std::string& key, const std::string& url, bool train,
                   RunCheck* out) {
  const storage::Scheme* scheme = nullptr;
  DT_RETURN_IF_ERROR(storage::FindScheme(url, &scheme).WithContext(key));
  std::string dir;
  if (!storage::LocalDir(url, &dir)) return Status::OK();  // a remote dataset: checked by the workers once fetched
  proto::DatasetManifest m;
  DT_RETURN_IF_ERROR(data::ReadManifest(dir, &m).WithContext(key));
  const auto& s = m.schema();
  const std::string what = key + " " + dir;
  int64_t pixels, channels, side, classes;
  if (ImageModel(cfg, &pixels, &channels, &side, &classes)) {
    if (s.kind() != proto::DatasetSchema::IMAGE) {
      return Status::InvalidArgument(what + " holds tokens, but model.kind " + cfg.model().kind() + " takes images");
    }
    int64_t n = 1;
    for (int64_t d : s.dims()) n *= d;
    if (n != pixels) {
      return Status::InvalidArgument(what + " has images of " + std::to_string(n) + " values, but the " +
                                     cfg.model().kind() + " takes " + std::to_string(pixels) +
                                     (channels ? " (in_channels x image_size^2)" : " (model.mlp.input_dim)"));
    }
    if (!s.has_label()) return Status::InvalidArgument(what + " has no labels: a classifier cannot train on it");
    if (s.num_classes() > classes) {
      return Status::InvalidArgument(what + " has " + std::to_string(s.num_classes()) + " classes, but model." +
                                     cfg.model().kind() + ".num_classes is " + std::to_string(classes));
    }
  } else if (cfg.model().kind() == "gpt2") {
    const auto& g = cfg.model().gpt2();
    if (s.kind() != proto::DatasetSchema::TOKENS) {
      return Status::InvalidArgument(what + " holds images, but model.kind gpt2 takes tokens");
    }
    if (s.vocab_size() > g.vocab_size()) {
      return Status::InvalidArgument(what + " has token ids up to " + std::to_string(s.vocab_size() - 1) +
                                     " (vocab_size " + std::to_string(s.vocab_size()) +
                                     "), but model.gpt2.vocab_size is " + std::to_string(g.vocab_size()) +
                                     ": raise it to at least " + std::to_string(s.vocab_size()));
    }
    if (s.dims_size() > 0 && s.dims(0) - 1 > g.max_seq_len()) {
      return Status::InvalidArgument(what + " has records of " + std::to_string(s.dims(0)) + " tokens (sequences of " +
                                     std::to_string(s.dims(0) - 1) + "), longer than model.gpt2.max_seq_len " +
                                     std::to_string(g.max_seq_len()));
    }
  }  // a custom model's inputs are its own business
  if (train) {
    const int64_t limit = cfg.data().limit_train();
    const int64_t n = static_cast<int64_t>(m.total_samples());
    out->train_samples = limit > 0 ? std::min(limit, n) : n;
  }
  return Status::OK();
}

}  // namespace

Status CheckRun(const proto::Config& cfg, int world_size, RunCheck* out) {
  *out = RunCheck();
  DT_RETURN_IF_ERROR(CheckModelKind(cfg));
  const auto& d = cfg.data();
  const auto& t = cfg.train();
  if (d.dataset() == "fashion_mnist") {
    DT_RETURN_IF_ERROR(CheckFashionMnist(cfg, out));
  } else if (d.dataset() == "shards") {
    if (d.train_shards().empty()) return Status::InvalidArgument("data.dataset shards needs data.train_shards");
    DT_RETURN_IF_ERROR(CheckShards(cfg, "data.train_shards", d.train_shards(), /*train=*/true, out));
    if (t.eval() && !d.test_shards().empty()) {
      DT_RETURN_IF_ERROR(CheckShards(cfg, "data.test_shards", d.test_shards(), /*train=*/false, out));
    }
  } else if (d.dataset() == "synthetic_tokens") {
    if (cfg.model().kind() != "gpt2") {
      return Status::InvalidArgument("data.dataset synthetic_tokens feeds token models: model.kind must be gpt2");
    }
    if (t.max_steps() == 0)
      return Status::InvalidArgument("data.dataset synthetic_tokens has no epochs: set train.max_steps");
  }

  // The run's length, as the trainer counts it: whole optimizer steps per epoch (the remainder dropped).
  const int64_t global = d.batch_size() * t.grad_accum_steps() * std::max(1, world_size);
  if (out->train_samples > 0) {
    const int64_t per_epoch = out->train_samples / global;
    if (per_epoch == 0) {
      return Status::InvalidArgument("data.batch_size x train.grad_accum_steps x " + std::to_string(world_size) +
                                     " ranks (" + std::to_string(global) + ") exceeds the " +
                                     std::to_string(out->train_samples) +
                                     " training samples: no full step fits in an epoch");
    }
    out->total_steps = t.epochs() * per_epoch;
    if (t.max_steps() > 0) out->total_steps = std::min(out->total_steps, t.max_steps());
  } else if (t.max_steps() > 0) {
    out->total_steps = t.max_steps();
  }
  const int64_t warmup = cfg.schedule().warmup_steps();
  if (out->total_steps > 0 && warmup > out->total_steps) {
    out->warnings.push_back("schedule.warmup_steps " + std::to_string(warmup) + " exceeds the run's " +
                            std::to_string(out->total_steps) + " optimizer steps: the warmup is clipped to " +
                            std::to_string(out->total_steps) + " steps (the LR never reaches its decay)");
  }
  return Status::OK();
}

}  // namespace dtrain::runtime
