// The trainer's input (runtime/train/trainer.h): dataset resolution, loaders, epochs, evaluation.
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <limits>

#include "core/check.h"
#include "core/logging.h"
#include "core/nvtx.h"
#include "data/convert.h"
#include "data/manifest.h"
#include "data/remote_cache.h"
#include "runtime/train/trainer.h"
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
std::string SampleLogPath(int rank) {
  const char* dir = std::getenv("DTRAIN_SAMPLE_LOG");
  if (dir == nullptr || *dir == '\0') return "";
  const char* restart = std::getenv("DTRAIN_RESTART_COUNT");
  return std::string(dir) + "/samples.attempt" + (restart != nullptr && *restart != '\0' ? restart : "0") + ".rank" +
         std::to_string(rank) + ".txt";
}

}  // namespace

Status Trainer::SetupData() {
  const auto& d = cfg_.data();
  const int64_t accum = cfg_.train().grad_accum_steps();
  if (d.dataset() == "synthetic_tokens") {
    if (cfg_.model().kind() != "gpt2") {
      return Status::InvalidArgument("data.dataset synthetic_tokens feeds token models: model.kind must be gpt2");
    }
    if (cfg_.train().max_steps() == 0) {
      return Status::InvalidArgument("data.dataset synthetic_tokens has no epochs: set train.max_steps");
    }
    const auto& g = cfg_.model().gpt2();
    synthetic_ = std::make_unique<data::SyntheticTokens>();
    // 8 distinct batches (fewer are memorized within a benchmark's steps, and a memorized batch runs measurably
    // slower), handed out through 2 * accum buffers as the loader's (a graphed step starts at one of two sets).
    const int buffers = static_cast<int>(2 * std::min<int64_t>(accum, StepGraph::kMaxAccum));
    DT_RETURN_IF_ERROR(data::SyntheticTokens::Create(ctx_, d.batch_size(), g.max_seq_len(), g.vocab_size(),
                                                     cfg_.train().seed() + rank_, /*distinct=*/8, buffers,
                                                     synthetic_.get()));
    return Status::OK();
  }
  data::LoaderOptions lo;
  lo.batch_size = d.batch_size();
  lo.rank = rank_;
  lo.world = world_;
  lo.seed = cfg_.train().seed();
  lo.shuffle = d.shuffle();
  lo.remainder = d.remainder() == "pad" ? data::RemainderPolicy::kPad : data::RemainderPolicy::kDrop;
  lo.num_threads = static_cast<int>(d.workers());
  lo.prefetch_depth = static_cast<int>(d.prefetch());
  // A graphed step takes all its micro-batches before queueing work on them (runtime/train/step_graph.h): they must
  // stay in the device buffers meanwhile, and 2 * accum buffers make every step start at one of two buffer sets.
  lo.device_buffers = static_cast<int>(2 * std::min<int64_t>(accum, StepGraph::kMaxAccum));
  if (d.augment()) lo.augment = data::RandomCropFlip(/*pad=*/4, /*hflip=*/true, /*fill=*/0.f);
  lo.sample_log = SampleLogPath(rank_);
  DT_RETURN_IF_ERROR(ResolveDataset(d, cfg_.storage(), /*train=*/true, &lo.dataset_dir));
  DT_RETURN_IF_ERROR(data::Loader::Create(lo, &ctx_, &train_loader_).WithContext("training data"));
  train_samples_ = train_loader_->dataset().size();

  std::string eval_dir;
  if (cfg_.train().eval()) DT_RETURN_IF_ERROR(ResolveDataset(d, cfg_.storage(), /*train=*/false, &eval_dir));
  if (!eval_dir.empty()) {
    data::LoaderOptions eo = lo;
    eo.dataset_dir = eval_dir;
    eo.batch_size = d.eval_batch_size();
    eo.shuffle = false;
    eo.remainder = data::RemainderPolicy::kPad;  // every test sample once; padding rows are not counted
    eo.augment = nullptr;
    eo.sample_log.clear();
    eo.num_threads = std::max<int>(1, lo.num_threads / 2);
    eo.device_buffers = 2;  // evaluation queues each batch's work before taking the next
    DT_RETURN_IF_ERROR(data::Loader::Create(eo, &ctx_, &eval_loader_).WithContext("evaluation data"));
  }

  for (data::SamplerState s{lo.seed, 0, 0}; StepFits(s); s.consumed += accum * d.batch_size() * world_) {
    ++steps_per_epoch_;
  }
  if (steps_per_epoch_ == 0) {
    return Status::InvalidArgument("data.batch_size x train.grad_accum_steps x world size (" +
                                   std::to_string(d.batch_size() * accum * world_) + ") exceeds the " +
                                   std::to_string(train_samples_) + " training samples: no full step fits in an epoch");
  }
  const int64_t sps = cfg_.schedule().samples_per_step();
  if (sps > train_samples_) {
    return Status::InvalidArgument("schedule.samples_per_step " + std::to_string(sps) + " exceeds the " +
                                   std::to_string(train_samples_) + " training samples of an epoch");
  }
  DT_LOG_INFO(kRuntime, "data: {} training samples, {} steps per epoch, {} reader threads, prefetch {}", train_samples_,
              steps_per_epoch_, lo.num_threads, lo.prefetch_depth);
  return Status::OK();
}

Status Trainer::NextBatch(data::Batch* b) {
  if (synthetic_) return synthetic_->Next(b);
  return train_loader_->Next(b);
}

data::SamplerState Trainer::DataPosition() const {
  if (synthetic_) return {cfg_.train().seed(), 0, 0};
  return train_loader_->state();
}

bool Trainer::StepFits(const data::SamplerState& s) const {
  if (synthetic_) return true;
  const int64_t g = cfg_.data().batch_size() * world_, accum = cfg_.train().grad_accum_steps();
  if (cfg_.data().remainder() == "pad") return s.consumed + (accum - 1) * g < train_samples_;
  return train_samples_ - s.consumed >= accum * g;
}

int64_t Trainer::ScheduleSteps() const {
  const int64_t max_steps = cfg_.train().max_steps(), sps = cfg_.schedule().samples_per_step();
  if (synthetic_) return max_steps;
  const bool pad = cfg_.data().remainder() == "pad";
  const int64_t per_epoch = sps == 0 ? steps_per_epoch_ : pad ? (train_samples_ + sps - 1) / sps : train_samples_ / sps;
  const int64_t steps = cfg_.train().epochs() * per_epoch;
  return max_steps > 0 ? std::min(steps, max_steps) : steps;
}

int64_t Trainer::EndStep() const {
  const int64_t epochs = cfg_.train().epochs(), max_steps = cfg_.train().max_steps();
  const int64_t global = cfg_.data().batch_size() * cfg_.train().grad_accum_steps() * world_;
  int64_t left = std::numeric_limits<int64_t>::max();  // synthetic data: no epochs
  if (!synthetic_) {
    data::SamplerState s = DataPosition();
    left = 0;
    if (s.epoch < epochs) {
      for (; StepFits(s); s.consumed += global) ++left;  // the rest of this epoch
      left += (epochs - s.epoch - 1) * steps_per_epoch_;
    }
  }
  if (max_steps > 0) {
    const int64_t sps = cfg_.schedule().samples_per_step();
    const int64_t to_max = sps == 0 ? max_steps - start_step_ : (max_steps * sps - samples_seen_ + global - 1) / global;
    left = std::min(left, std::max<int64_t>(to_max, 0));
  }
  return start_step_ + left;
}

double Trainer::StepLr(int64_t step) const {
  const int64_t sps = cfg_.schedule().samples_per_step();
  return schedule_->LrAt(sps == 0 ? static_cast<double>(step)
                                  : static_cast<double>(samples_seen_) / static_cast<double>(sps));
}

Status Trainer::Evaluate(double* loss, double* accuracy) {
  DT_NVTX_RANGE("evaluate");
  *loss = *accuracy = std::numeric_limits<double>::quiet_NaN();
  if (!eval_loader_) return Status::OK();
  comm::WatchdogScope armed(watchdog_, "evaluation (device syncs, metric all-reduce)");
  model_->set_training(false);
  DT_RETURN_IF_ERROR(eval_loader_->Restore({cfg_.train().seed(), 0, 0}));
  double loss_sum = 0;
  int64_t correct = 0, count = 0;
  for (int64_t k = 0; k < eval_loader_->batches_per_epoch(); ++k) {
    data::Batch b;
    DT_RETURN_IF_ERROR(eval_loader_->Next(&b));
    Tensor x;
    DT_RETURN_IF_ERROR(model_->InputsFromBatch(b.inputs, &x));
    DT_RETURN_IF_ERROR(model_->EvalBatch(ctx_, x, b.targets, b.num_real, &loss_sum, &correct, &count));
  }
  model_->set_training(true);
  // Evaluation batches may have reallocated the model's activations: the step graph must be captured anew.
  if (step_graph_) step_graph_->Reset();
  std::vector<double> v = {loss_sum, static_cast<double>(correct), static_cast<double>(count)};
  DT_RETURN_IF_ERROR(AllReduceHost(&v));
  if (v[2] > 0) {
    *loss = v[0] / v[2];
    *accuracy = v[1] / v[2];
  }
  return Status::OK();
}

}  // namespace dtrain::runtime
