#include "runtime/train/run_check.h"

#include <sys/stat.h>

#include <algorithm>
#include <string>
#include <utility>

#include "core/check.h"
#include "core/checked_math.h"
#include "data/fashion_mnist.h"
#include "data/manifest.h"
#include "runtime/optim/parameter_updater.h"
#include "runtime/train/model_factory.h"
#include "storage/scheme.h"

namespace dtrain::runtime {
namespace {

constexpr int64_t kFashionTrain = 60000;

bool IsFile(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

// Fashion-MNIST's records as data::ConvertFashionMnist writes them: labelled 28x28 images of 10 classes.
proto::DatasetSchema FashionMnistSchema() {
  proto::DatasetSchema s;
  s.set_kind(proto::DatasetSchema::IMAGE);
  s.add_dims(28);
  s.add_dims(28);
  s.set_has_label(true);
  s.set_num_classes(data::kFashionMnistClasses);
  return s;
}

Status CheckFashionMnist(const proto::Config& cfg, const models::ModelSpec& spec, RunCheck* out) {
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
  if (!spec.check_data) return Status::OK();  // a model that takes any data
  return spec.check_data(cfg, "data.dataset fashion_mnist", FashionMnistSchema());
}

Status CheckShards(const proto::Config& cfg, const models::ModelSpec& spec, const std::string& key,
                   const std::string& url, bool train, RunCheck* out) {
  const storage::Scheme* scheme = nullptr;
  DT_RETURN_IF_ERROR(storage::FindScheme(url, &scheme).WithContext(key));
  std::string dir;
  if (!storage::LocalDir(url, &dir)) return Status::OK();  // a remote dataset: checked by the workers once fetched
  proto::DatasetManifest m;
  DT_RETURN_IF_ERROR(data::ReadManifest(dir, &m).WithContext(key));
  if (spec.check_data) DT_RETURN_IF_ERROR(spec.check_data(cfg, key + " " + dir, m.schema()));
  if (train) {
    const int64_t limit = cfg.data().limit_train();
    const int64_t n = static_cast<int64_t>(m.total_samples());
    out->train_samples = limit > 0 ? std::min(limit, n) : n;
  }
  return Status::OK();
}

// The run's length at `world_size` ranks (out->total_steps), from out->train_samples when the data check found
// them, and the warmup beyond it (a warning).
Status CheckRunLength(const proto::Config& cfg, int world_size, RunCheck* out) {
  const auto& d = cfg.data();
  const auto& t = cfg.train();
  // The run's length, as the trainer counts it: whole optimizer steps per epoch (the remainder dropped).
  // Every product of config values is checked: an overflow is undefined behaviour, and a wrapped run length used
  // to end the run, exit 0, after one epoch.
  int64_t global = 0;
  DT_RETURN_IF_ERROR(
      CheckedMul<int64_t>(d.batch_size(), t.grad_accum_steps(), "data.batch_size x train.grad_accum_steps", &global));
  DT_RETURN_IF_ERROR(CheckedMul<int64_t>(global, std::max(1, world_size),
                                         "data.batch_size x train.grad_accum_steps x ranks", &global));
  const int64_t sps = cfg.schedule().samples_per_step();
  if (t.max_steps() > 0 && sps > 0) {
    int64_t samples = 0;
    DT_RETURN_IF_ERROR(
        CheckedMul<int64_t>(t.max_steps(), sps, "train.max_steps x schedule.samples_per_step", &samples));
  }
  if (out->train_samples > 0) {
    const int64_t per_epoch = out->train_samples / global;
    if (per_epoch == 0) {
      return Status::InvalidArgument("data.batch_size x train.grad_accum_steps x " + std::to_string(world_size) +
                                     " ranks (" + std::to_string(global) + ") exceeds the " +
                                     std::to_string(out->train_samples) +
                                     " training samples: no full step fits in an epoch");
    }
    int64_t samples = 0;  // the data source counts positions in samples over all epochs
    DT_RETURN_IF_ERROR(
        CheckedMul<int64_t>(t.epochs(), out->train_samples, "train.epochs x training samples", &samples));
    DT_RETURN_IF_ERROR(CheckedMul<int64_t>(t.epochs(), per_epoch, "train.epochs x steps per epoch", &out->total_steps));
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

}  // namespace

Status JoinProblems(const std::vector<Status>& problems) {
  std::vector<const Status*> found;
  for (const Status& st : problems) {
    if (st.ok()) continue;
    // Not bad input (a file that cannot be read, an internal error): that one alone, as it is.
    const Status::Code c = st.code();
    if (c != Status::Code::kInvalidArgument && c != Status::Code::kNotFound && c != Status::Code::kDataLoss) return st;
    found.push_back(&st);
  }
  if (found.empty()) return Status::OK();
  if (found.size() == 1) return *found[0];
  std::string msg = std::to_string(found.size()) + " problems, each of which stops the run:";
  for (const Status* st : found) msg += "\n  - " + st->message();
  return Status::InvalidArgument(msg);
}

Status CheckRun(const proto::Config& cfg, int world_size, RunCheck* out) {
  *out = RunCheck();
  std::vector<Status> problems;  // every one found, so that one check lists them all
  const models::ModelSpec* spec = nullptr;
  problems.push_back(FindModelSpec(cfg, &spec));
  models::ModelSpec any_data;  // an unknown model kind: its data checks are left out
  const models::ModelSpec& model = spec != nullptr ? *spec : any_data;
  const auto& d = cfg.data();
  const auto& t = cfg.train();
  if (t.eval_every() > 0 && !t.eval()) {
    problems.push_back(Status::InvalidArgument("train.eval_every " + std::to_string(t.eval_every()) +
                                               " needs train.eval true (train.eval false turns every evaluation off)"));
  }
  if (d.dataset() == "fashion_mnist") {
    problems.push_back(CheckFashionMnist(cfg, model, out));
  } else if (d.dataset() == "shards") {
    if (d.train_shards().empty()) {
      problems.push_back(Status::InvalidArgument("data.dataset shards needs data.train_shards"));
    } else {
      problems.push_back(CheckShards(cfg, model, "data.train_shards", d.train_shards(), /*train=*/true, out));
    }
    if (t.eval() && !d.test_shards().empty()) {
      problems.push_back(CheckShards(cfg, model, "data.test_shards", d.test_shards(), /*train=*/false, out));
    }
  } else if (d.dataset() == "synthetic_tokens") {
    models::TokenInput tokens;
    const Status token_model = spec != nullptr ? SyntheticTokenInput(cfg, &tokens) : Status::OK();
    problems.push_back(token_model);
    if (spec != nullptr && token_model.ok() && spec->check_data) {
      // the model's own constraints, on the records synthetic_tokens makes
      proto::DatasetSchema schema;
      schema.set_kind(proto::DatasetSchema::TOKENS);
      schema.set_vocab_size(tokens.vocab_size);
      schema.add_dims(tokens.seq_len + 1);
      problems.push_back(spec->check_data(cfg, "data.dataset synthetic_tokens", schema));
    }
    if (t.max_steps() == 0) {
      problems.push_back(Status::InvalidArgument("data.dataset synthetic_tokens has no epochs: set train.max_steps"));
    }
    for (const auto& [key, limit] : {std::pair<const char*, int64_t>{"data.limit_train", d.limit_train()},
                                     std::pair<const char*, int64_t>{"data.limit_test", d.limit_test()}}) {
      if (limit > 0) {
        problems.push_back(Status::InvalidArgument(std::string(key) + " " + std::to_string(limit) +
                                                   ": data.dataset synthetic_tokens has no samples to limit (it runs "
                                                   "train.max_steps steps); set it to 0"));
      }
    }
    if (t.eval_every() > 0) {
      problems.push_back(
          Status::InvalidArgument("train.eval_every " + std::to_string(t.eval_every()) +
                                  ": data.dataset synthetic_tokens has no evaluation data; set it to 0"));
    }
  }
  if (t.eval_every() > 0 && d.dataset() == "shards" && d.test_shards().empty()) {
    out->warnings.push_back("train.eval_every " + std::to_string(t.eval_every()) +
                            " without data.test_shards: there is nothing to evaluate on");
  }
  problems.push_back(CheckZeroOneStorage(t, world_size, cfg.dist().zero1()));
  problems.push_back(CheckRunLength(cfg, world_size, out));
  return JoinProblems(problems);
}

}  // namespace dtrain::runtime
