#include "runtime/train/data_source.h"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <limits>
#include <string>

#include "core/check.h"
#include "core/logging.h"
#include "data/convert.h"
#include "data/manifest.h"
#include "data/remote_cache.h"
#include "data/synthetic_tokens.h"
#include "runtime/train/model_factory.h"
#include "runtime/train/step_graph.h"
#include "storage/config_options.h"
#include "storage/scheme.h"

namespace dtrain::runtime {
namespace {

namespace fs = std::filesystem;

std::string CacheDir(const proto::DataConfig& d) {
  return d.cache_dir().empty() ? data::DefaultCacheDir() : d.cache_dir();
}

// Fashion-MNIST's IDX split converted into shards under the cache, once per (source dir, split, limit).
// Ranks race safely: each converts into its own temporary directory and renames it into place; a
// rank that finds the directory taken by another's rename uses that one.
Status FashionMnistShards(const proto::DataConfig& d, bool train, std::string* dir) {
  const int64_t limit = train ? d.limit_train() : d.limit_test();
  const std::string split = train ? "train" : "t10k";
  std::error_code ec;
  const fs::path src = fs::absolute(d.dir(), ec);
  uint64_t h = 1469598103934665603ull;  // FNV-1a of the source directory
  for (unsigned char c : src.string()) h = (h ^ c) * 1099511628211ull;
  char name[96];
  std::snprintf(name, sizeof(name), "fashion-mnist-%016llx-%s-%lld", static_cast<unsigned long long>(h), split.c_str(),
                static_cast<long long>(limit));
  const fs::path out = fs::path(CacheDir(d)) / name;
  *dir = out.string();
  proto::DatasetManifest m;
  if (data::ReadManifest(*dir, &m).ok()) return Status::OK();
  fs::create_directories(out.parent_path(), ec);
  if (ec) return Status::IoError("cannot create data.cache_dir " + out.parent_path().string() + ": " + ec.message());
  const std::string tmp = *dir + ".tmp." + std::to_string(getpid());
  fs::remove_all(tmp, ec);
  DT_RETURN_IF_ERROR(data::ConvertFashionMnist(d.dir(), split, tmp, /*samples_per_shard=*/10000, limit)
                         .WithContext("converting Fashion-MNIST (data.dir) into shards"));
  if (std::rename(tmp.c_str(), dir->c_str()) != 0) {
    const int err = errno;
    fs::remove_all(tmp, ec);
    if (err != ENOTEMPTY && err != EEXIST) {
      return Status::IoError("cannot move converted shards to " + *dir + ": " + std::strerror(err));
    }
  }
  DT_LOG_INFO(kData, "Fashion-MNIST {} split converted into shards in {}", split, *dir);
  return Status::OK();
}

// The local dataset directory for the training (train) or evaluation split; "" = no such split. A dataset in a remote
// store (storage/scheme.h) is fetched into the local shard cache first.
Status ResolveDataset(const proto::DataConfig& d, const proto::StorageConfig& s, bool train, std::string* dir) {
  if (d.dataset() == "fashion_mnist") return FashionMnistShards(d, train, dir);
  const std::string& url = train ? d.train_shards() : d.test_shards();
  if (url.empty()) {
    *dir = "";
    if (train) return Status::InvalidArgument("data.train_shards is empty: dataset 'shards' needs a dataset URL");
    return Status::OK();
  }
  if (storage::LocalDir(url, dir)) return Status::OK();
  data::RemoteCacheOptions o;
  o.cache_dir = CacheDir(d);
  o.limit_bytes = static_cast<uint64_t>(d.cache_limit_mb()) << 20;
  o.storage = storage::OptionsFromConfig(s);
  return data::FetchDataset(url, o, dir).WithContext(train ? "data.train_shards" : "data.test_shards");
}

// DTRAIN_SAMPLE_LOG=DIR (a debug/test switch, data/sample_log.h): the file recording the training samples this rank
// takes in this attempt, DIR/samples.attempt<DTRAIN_RESTART_COUNT>.rank<R>.txt; "" when unset.
std::string SampleLogPath(int rank, int attempt) {
  const char* dir = std::getenv("DTRAIN_SAMPLE_LOG");
  if (dir == nullptr || *dir == '\0') return "";
  return std::string(dir) + "/samples.attempt" + std::to_string(attempt) + ".rank" + std::to_string(rank) + ".txt";
}

// --- The loader over a sharded dataset ---

class LoaderSource final : public DataSource {
 public:
  LoaderSource(const proto::Config& cfg, int world)
      : global_batch_(cfg.data().batch_size() * world),
        accum_(cfg.train().grad_accum_steps()),
        pad_(cfg.data().remainder() == "pad") {}

  Status Init(const proto::Config& cfg, DeviceContext& ctx, const comm::DistEnv& env);

  Status Next(data::Batch* b) override { return train_->Next(b); }
  data::SamplerState Position() const override { return train_->state(); }
  Status Restore(const data::SamplerState& pos) override {
    if (pos.consumed > samples_) {
      return Status::InvalidArgument("stopped " + std::to_string(pos.consumed) +
                                     " samples into an epoch, but the training data has only " +
                                     std::to_string(samples_) + " samples: another dataset?");
    }
    return train_->Restore(pos);
  }
  bool StepFits(const data::SamplerState& s) const override {
    if (pad_) return s.consumed + (accum_ - 1) * global_batch_ < samples_;
    return samples_ - s.consumed >= accum_ * global_batch_;
  }
  int64_t StepsLeft(const data::SamplerState& pos, int64_t epochs) const override {
    if (pos.epoch >= epochs) return 0;
    int64_t left = 0;
    for (data::SamplerState s = pos; StepFits(s); s.consumed += accum_ * global_batch_) ++left;  // the rest of it
    return left + (epochs - pos.epoch - 1) * steps_per_epoch_;
  }
  int64_t ScheduleSteps(int64_t epochs, int64_t sps) const override {
    const int64_t per_epoch = sps == 0 ? steps_per_epoch_ : pad_ ? (samples_ + sps - 1) / sps : samples_ / sps;
    return epochs * per_epoch;
  }

  bool has_eval() const override { return eval_ != nullptr; }
  Status BeginEval(int64_t max_batches, int64_t* batches) override {
    *batches = 0;
    if (!eval_) return Status::OK();
    DT_RETURN_IF_ERROR(eval_->Restore({seed_, 0, 0}));
    *batches = eval_->batches_per_epoch();
    if (max_batches > 0) *batches = std::min(*batches, max_batches);
    return Status::OK();
  }
  Status NextEval(data::Batch* b) override { return eval_->Next(b); }

 private:
  const int64_t global_batch_;  // data.batch_size x world: one micro-batch of every rank
  const int64_t accum_;
  const bool pad_;  // data.remainder pad: the last batch of an epoch is padded (else dropped)
  uint64_t seed_ = 0;
  int64_t samples_ = 0;                         // samples per epoch
  int64_t steps_per_epoch_ = 0;                 // optimizer steps of an epoch at this global batch
  std::unique_ptr<data::Loader> train_, eval_;  // eval_ null without evaluation data
};

Status LoaderSource::Init(const proto::Config& cfg, DeviceContext& ctx, const comm::DistEnv& env) {
  const auto& d = cfg.data();
  const int64_t accum = cfg.train().grad_accum_steps();
  const int rank = env.rank, world = env.world_size;
  data::LoaderOptions lo;
  lo.batch_size = d.batch_size();
  lo.rank = rank;
  lo.world = world;
  lo.seed = cfg.train().seed();
  lo.shuffle = d.shuffle();
  lo.remainder = d.remainder() == "pad" ? data::RemainderPolicy::kPad : data::RemainderPolicy::kDrop;
  lo.num_threads = static_cast<int>(d.workers());
  lo.prefetch_depth = static_cast<int>(d.prefetch());
  // A graphed step takes all its micro-batches before queueing work on them (runtime/train/step_graph.h): they must
  // stay in the device buffers meanwhile, and 2 * accum buffers make every step start at one of two buffer sets.
  lo.device_buffers = static_cast<int>(2 * std::min<int64_t>(accum, StepGraph::kMaxAccum));
  if (d.augment()) lo.augment = data::RandomCropFlip(/*pad=*/4, /*hflip=*/true, /*fill=*/0.f);
  lo.sample_log = SampleLogPath(rank, env.restart_count);
  lo.limit = d.limit_train();  // Fashion-MNIST's shards are converted limited already: then a no-op
  DT_RETURN_IF_ERROR(ResolveDataset(d, cfg.storage(), /*train=*/true, &lo.dataset_dir));
  DT_RETURN_IF_ERROR(data::Loader::Create(lo, &ctx, &train_).WithContext("training data"));
  seed_ = lo.seed;
  samples_ = train_->num_samples();

  std::string eval_dir;
  if (cfg.train().eval()) DT_RETURN_IF_ERROR(ResolveDataset(d, cfg.storage(), /*train=*/false, &eval_dir));
  if (!eval_dir.empty()) {
    data::LoaderOptions eo = lo;
    eo.dataset_dir = eval_dir;
    eo.batch_size = d.eval_batch_size();
    eo.shuffle = false;
    eo.remainder = data::RemainderPolicy::kPad;  // every test sample once; padding rows are not counted
    eo.augment = nullptr;
    eo.sample_log.clear();
    eo.limit = d.limit_test();
    eo.num_threads = std::max<int>(1, lo.num_threads / 2);
    eo.device_buffers = 2;  // evaluation queues each batch's work before taking the next
    DT_RETURN_IF_ERROR(data::Loader::Create(eo, &ctx, &eval_).WithContext("evaluation data"));
  }

  for (data::SamplerState s{lo.seed, 0, 0}; StepFits(s); s.consumed += accum * d.batch_size() * world) {
    ++steps_per_epoch_;
  }
  if (steps_per_epoch_ == 0) {
    return Status::InvalidArgument("data.batch_size x train.grad_accum_steps x world size (" +
                                   std::to_string(d.batch_size() * accum * world) + ") exceeds the " +
                                   std::to_string(samples_) + " training samples: no full step fits in an epoch");
  }
  const int64_t sps = cfg.schedule().samples_per_step();
  if (sps > samples_) {
    return Status::InvalidArgument("schedule.samples_per_step " + std::to_string(sps) + " exceeds the " +
                                   std::to_string(samples_) + " training samples of an epoch");
  }
  DT_LOG_INFO(kRuntime, "data: {} training samples{}, {} steps per epoch, {} reader threads, prefetch {}", samples_,
              samples_ < train_->dataset().size()
                  ? " (data.limit_train of " + std::to_string(train_->dataset().size()) + ")"
                  : std::string(),
              steps_per_epoch_, lo.num_threads, lo.prefetch_depth);
  return Status::OK();
}

// --- Synthetic tokens: no epochs, no position, no evaluation ---

class SyntheticSource final : public DataSource {
 public:
  explicit SyntheticSource(uint64_t seed) : seed_(seed) {}
  data::SyntheticTokens& tokens() { return tokens_; }

  Status Next(data::Batch* b) override { return tokens_.Next(b); }
  data::SamplerState Position() const override { return {seed_, 0, 0}; }
  Status Restore(const data::SamplerState&) override { return Status::OK(); }
  bool StepFits(const data::SamplerState&) const override { return true; }
  int64_t StepsLeft(const data::SamplerState&, int64_t) const override { return std::numeric_limits<int64_t>::max(); }
  int64_t ScheduleSteps(int64_t, int64_t) const override { return std::numeric_limits<int64_t>::max(); }
  bool has_eval() const override { return false; }
  Status BeginEval(int64_t, int64_t* batches) override {
    *batches = 0;
    return Status::OK();
  }
  Status NextEval(data::Batch*) override {
    return Status::FailedPrecondition("synthetic input has no evaluation data");
  }

 private:
  const uint64_t seed_;
  data::SyntheticTokens tokens_;
};

}  // namespace

Status MakeDataSource(const proto::Config& cfg, DeviceContext& ctx, const comm::DistEnv& env,
                      std::unique_ptr<DataSource>* out) {
  const auto& d = cfg.data();
  const int64_t accum = cfg.train().grad_accum_steps();
  if (d.dataset() == "synthetic_tokens") {
    models::TokenInput tokens;
    DT_RETURN_IF_ERROR(SyntheticTokenInput(cfg, &tokens));
    if (cfg.train().max_steps() == 0) {
      return Status::InvalidArgument("data.dataset synthetic_tokens has no epochs: set train.max_steps");
    }
    auto synthetic = std::make_unique<SyntheticSource>(cfg.train().seed());
    // 8 distinct batches (fewer are memorized within a benchmark's steps, and a memorized batch runs measurably
    // slower), handed out through 2 * accum buffers as the loader's (a graphed step starts at one of two sets).
    const int buffers = static_cast<int>(2 * std::min<int64_t>(accum, StepGraph::kMaxAccum));
    DT_RETURN_IF_ERROR(data::SyntheticTokens::Create(ctx, d.batch_size(), tokens.seq_len, tokens.vocab_size,
                                                     cfg.train().seed() + env.rank, /*distinct=*/8, buffers,
                                                     &synthetic->tokens()));
    *out = std::move(synthetic);
    return Status::OK();
  }
  auto loader = std::make_unique<LoaderSource>(cfg, env.world_size);
  DT_RETURN_IF_ERROR(loader->Init(cfg, ctx, env));
  *out = std::move(loader);
  return Status::OK();
}

}  // namespace dtrain::runtime
