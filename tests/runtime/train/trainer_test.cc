// Trainer in process (runtime/train/trainer.h): one CPU rank, no communicator, an MLP on a small labelled image
// dataset the test writes itself. Covers the loop (epochs, checkpoints, final weights), a resume from a periodic
// checkpoint after a failed step, and a preemption request (Preemption::Raise, as the SIGTERM handler does): each
// resumed run ends with exactly the losses and weights of the uninterrupted one. Then the start decisions (issue 38,
// each written as the user's mistake): --resume STEP over newer checkpoints, a step that never existed, refused and
// no-op starts writing nothing, retention meeting a user's file in an old step directory.

#include "runtime/train/trainer.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <csignal>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "comm/dist_env.h"
#include "core/check.h"
#include "core/device_context.h"
#include "data/manifest.h"
#include "data/shard_writer.h"
#include "runtime/checkpoint/preemption.h"
#include "runtime/config/config.h"
#include "tests/testing/fixtures.h"
#include "tests/testing/safetensors_diff.h"

namespace dtrain::runtime {
namespace {

using testing::TempDir;

constexpr int kSamples = 512;  // 16 steps of 32 per epoch

// kSamples labelled 4x4 images: pixels from a fixed LCG, label = how many of the first two pixels are bright.
void WriteDataset(const std::string& dir) {
  proto::DatasetSchema schema;
  schema.set_kind(proto::DatasetSchema::IMAGE);
  schema.add_dims(4);
  schema.add_dims(4);
  schema.set_has_label(true);
  schema.set_num_classes(3);
  schema.set_pixel_mean(0.5f);
  schema.set_pixel_std(0.25f);
  std::unique_ptr<data::DatasetWriter> w;
  ASSERT_TRUE(data::DatasetWriter::Create(dir, schema, /*samples_per_shard=*/200, &w).ok());
  ASSERT_EQ(data::RecordBytes(schema), 4u + 16u);
  uint32_t x = 12345;
  for (int i = 0; i < kSamples; ++i) {
    unsigned char rec[20];
    for (int p = 0; p < 16; ++p) {
      x = x * 1664525u + 1013904223u;
      rec[4 + p] = static_cast<unsigned char>(x >> 24);
    }
    const uint32_t label = (rec[4] > 127) + (rec[5] > 127);
    for (int b = 0; b < 4; ++b) rec[b] = static_cast<unsigned char>(label >> (8 * b));  // uint32 LE
    ASSERT_TRUE(w->Add(rec, sizeof(rec)).ok());
  }
  ASSERT_TRUE(w->Finish("trainer_test").ok());
}

// The run's config: an MLP 16 -> 8 -> 3 on `data`, 2 epochs of 16 steps, a checkpoint every 5 steps.
Status Config(const std::string& data, const std::string& run_dir, proto::Config* cfg) {
  const std::string yaml =
      "model:\n  kind: mlp\n  mlp:\n    input_dim: 16\n    hidden: [8]\n    num_classes: 3\n"
      "data:\n  dataset: shards\n  train_shards: " +
      data +
      "\n  batch_size: 32\n  shuffle: true\n  workers: 1\n"
      "optim:\n  name: adamw\n  lr: 0.01\n"
      "schedule:\n  kind: cosine\n  warmup_steps: 3\n"
      "train:\n  epochs: 2\n  seed: 7\n  log_every: 1\n  device: cpu\n  eval: false\n"
      "checkpoint:\n  every_steps: 5\n"
      "run:\n  dir: " +
      run_dir + "\n";
  return ParseConfig(yaml, "trainer_test.yaml", {}, cfg);
}

// The bytes of `path` ("" when it cannot be read).
std::string Slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

// Builds a trainer for `cfg` on the CPU as rank 0 of 1 and runs it.
Status Train(const proto::Config& cfg, TrainSummary* summary) {
  std::unique_ptr<DeviceContext> ctx;
  DT_RETURN_IF_ERROR(DeviceContext::CreateCpu(&ctx));
  std::unique_ptr<Trainer> trainer;
  DT_RETURN_IF_ERROR(Trainer::Create(cfg, *ctx, nullptr, nullptr, comm::DistEnv(), &trainer));
  return trainer->Run(summary);
}

// `key` ("loss", "grad_norm") of every logged step in <run_dir>/metrics.jsonl (log_every 1: one step per record);
// steps whose record lacks the key are left out.
std::map<int64_t, double> Series(const std::string& run_dir, const std::string& key = "loss") {
  std::map<int64_t, double> out;
  std::ifstream in(run_dir + "/metrics.jsonl");
  for (std::string line; std::getline(in, line);) {
    const auto j = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (j.is_object() && j.value("kind", "") == "train" && j.contains(key)) {
      out[j.at("step").get<int64_t>()] = j.at(key).get<double>();
    }
  }
  return out;
}
std::map<int64_t, double> Losses(const std::string& run_dir) { return Series(run_dir); }

class TrainerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    WriteDataset(dir_.File("data"));
    Preemption::Clear();
  }
  void TearDown() override {
    Preemption::Clear();
    unsetenv("DTRAIN_FAULT");
  }
  // The uninterrupted run, in <dir>/full.
  void TrainFull() {
    proto::Config cfg;
    ASSERT_TRUE(Config(dir_.File("data"), dir_.File("full"), &cfg).ok());
    TrainSummary s;
    const Status st = Train(cfg, &s);
    ASSERT_TRUE(st.ok()) << st.ToString();
    EXPECT_EQ(s.steps, 32);
    EXPECT_EQ(s.samples, 32 * 32);
    full_ = Losses(dir_.File("full"));
    ASSERT_EQ(full_.size(), 32u);
    EXPECT_LT(full_.at(32), full_.at(1));  // it learns
    // Every record carries the step's global gradient norm (the replicated optimizer computes it every step).
    full_norms_ = Series(dir_.File("full"), "grad_norm");
    ASSERT_EQ(full_norms_.size(), 32u);
    for (const auto& [step, norm] : full_norms_) EXPECT_TRUE(std::isfinite(norm) && norm > 0) << step << ": " << norm;
  }
  // `run`'s losses from `from_step` on and its final weights equal the uninterrupted run's.
  void ExpectSameAsFull(const std::string& run, int64_t from_step) {
    const std::map<int64_t, double> l = Losses(dir_.File(run));
    for (int64_t step = from_step; step <= 32; ++step) {
      ASSERT_EQ(l.count(step), 1u) << run << " step " << step;
      EXPECT_EQ(l.at(step), full_.at(step)) << run << " step " << step;
      EXPECT_EQ(Series(dir_.File(run), "grad_norm").at(step), full_norms_.at(step)) << run << " step " << step;
    }
    EXPECT_EQ(
        testing::MaxSafetensorsDiff(dir_.File("full") + "/final.safetensors", dir_.File(run) + "/final.safetensors"),
        0.0);
  }

  TempDir dir_;
  std::map<int64_t, double> full_, full_norms_;
};

TEST_F(TrainerTest, RunsTwoEpochsSavingCheckpointsAndTheFinalWeights) {
  ASSERT_NO_FATAL_FAILURE(TrainFull());
  namespace fs = std::filesystem;
  EXPECT_TRUE(fs::exists(dir_.File("full") + "/final.safetensors"));
  int checkpoints = 0;
  for (const auto& e : fs::directory_iterator(dir_.File("full") + "/checkpoints")) checkpoints += e.is_directory();
  EXPECT_EQ(checkpoints, 3);  // keep_last 3 of the saves at 5, 10, ..., 30 and the end (32)
  // A finished run started again trains nothing.
  proto::Config cfg;
  ASSERT_TRUE(Config(dir_.File("data"), dir_.File("full"), &cfg).ok());
  TrainSummary again;
  ASSERT_TRUE(Train(cfg, &again).ok());
  EXPECT_TRUE(again.already_done);
}

// run.final_weights false: no final.safetensors (the last checkpoint holds the weights). The same run started again
// with it true is already done (the key is not part of what a run trains) and writes the file from that checkpoint:
// the uninterrupted run's weights.
TEST_F(TrainerTest, FinalWeightsOffWritesNoneAndAStartWithThemOnCompletesTheRun) {
  ASSERT_NO_FATAL_FAILURE(TrainFull());
  namespace fs = std::filesystem;
  proto::Config cfg;
  ASSERT_TRUE(Config(dir_.File("data"), dir_.File("nofinal"), &cfg).ok());
  cfg.mutable_run()->set_final_weights(false);
  TrainSummary s;
  ASSERT_TRUE(Train(cfg, &s).ok());
  EXPECT_EQ(s.steps, 32);
  EXPECT_FALSE(fs::exists(dir_.File("nofinal") + "/final.safetensors"));
  EXPECT_TRUE(fs::exists(dir_.File("nofinal") + "/checkpoints/step-00000032/manifest.pb"));
  ASSERT_TRUE(Train(cfg, &s).ok());  // again, still off: already done, still no file
  EXPECT_TRUE(s.already_done);
  EXPECT_FALSE(fs::exists(dir_.File("nofinal") + "/final.safetensors"));
  cfg.mutable_run()->set_final_weights(true);
  ASSERT_TRUE(Train(cfg, &s).ok());
  EXPECT_TRUE(s.already_done);
  ExpectSameAsFull("nofinal", 1);
}

TEST_F(TrainerTest, AFailedStepResumesFromTheLastCheckpointAsIfUninterrupted) {
  ASSERT_NO_FATAL_FAILURE(TrainFull());
  proto::Config cfg;
  ASSERT_TRUE(Config(dir_.File("data"), dir_.File("failed"), &cfg).ok());
  ASSERT_EQ(setenv("DTRAIN_FAULT", "step=12,action=error", 1), 0);  // at the start of step 13 (0-based 12)
  TrainSummary s;
  const Status failed = Train(cfg, &s);
  EXPECT_EQ(failed.code(), Status::Code::kInternal) << failed.ToString();
  ASSERT_EQ(unsetenv("DTRAIN_FAULT"), 0);
  ASSERT_TRUE(Train(cfg, &s).ok());  // resumes at step 10, in the first epoch
  EXPECT_EQ(s.steps, 32);
  ExpectSameAsFull("failed", 11);
}

TEST_F(TrainerTest, APreemptionRequestSavesStopsAndResumesAsIfUninterrupted) {
  ASSERT_NO_FATAL_FAILURE(TrainFull());
  proto::Config cfg;
  ASSERT_TRUE(Config(dir_.File("data"), dir_.File("preempted"), &cfg).ok());
  Preemption::Raise(SIGTERM);  // what the handler stores: the trainer sees it after the first step
  TrainSummary s;
  const Status st = Train(cfg, &s);
  EXPECT_EQ(st.code(), Status::Code::kPreempted) << st.ToString();
  EXPECT_NE(st.message().find("checkpoint of step 1 saved"), std::string::npos) << st.ToString();
  Preemption::Clear();
  ASSERT_TRUE(Train(cfg, &s).ok());
  EXPECT_EQ(s.steps, 32);
  ExpectSameAsFull("preempted", 2);
}

// A user who wants to train on from an older checkpoint (`--resume 25`) while newer ones exist: refused, naming them,
// with nothing changed; with --overwrite the newer ones are moved aside (not deleted) and the run continues from 25
// exactly as the uninterrupted run did.
TEST_F(TrainerTest, ResumeAtAnOlderStepOverNewerCheckpointsIsRefusedUnlessOverwriteMovesThemAside) {
  ASSERT_NO_FATAL_FAILURE(TrainFull());
  namespace fs = std::filesystem;
  const std::string run = dir_.File("full"), final_path = run + "/final.safetensors";
  const std::string final_before = Slurp(final_path);
  proto::Config cfg;
  ASSERT_TRUE(Config(dir_.File("data"), run, &cfg).ok());
  cfg.mutable_checkpoint()->set_resume("25");
  TrainSummary s;
  const Status refused = Train(cfg, &s);
  EXPECT_EQ(refused.code(), Status::Code::kInvalidArgument) << refused.ToString();  // exit 2
  EXPECT_NE(refused.message().find("step-00000030, step-00000032"), std::string::npos) << refused.ToString();
  EXPECT_NE(refused.message().find("--overwrite"), std::string::npos) << refused.ToString();
  EXPECT_TRUE(fs::exists(run + "/checkpoints/step-00000030/manifest.pb"));
  EXPECT_TRUE(fs::exists(run + "/checkpoints/step-00000032/manifest.pb"));
  EXPECT_EQ(Slurp(final_path), final_before);

  cfg.mutable_checkpoint()->set_overwrite(true);
  ASSERT_TRUE(Train(cfg, &s).ok());
  EXPECT_EQ(s.steps, 32);
  std::vector<std::string> aside;
  for (const auto& e : fs::directory_iterator(run)) {
    if (e.path().filename().string().rfind("checkpoints.overwritten-", 0) == 0) aside.push_back(e.path().string());
  }
  ASSERT_EQ(aside.size(), 1u);
  EXPECT_TRUE(fs::exists(aside[0] + "/step-00000030/manifest.pb"));
  EXPECT_TRUE(fs::exists(aside[0] + "/step-00000032/params.bin"));
  EXPECT_FALSE(fs::exists(aside[0] + "/step-00000025"));
  // Steps 26..32 trained again from 25's state: the same weights as the first time, bit for bit.
  EXPECT_TRUE(Slurp(aside[0] + "/step-00000032/params.bin") == Slurp(run + "/checkpoints/step-00000032/params.bin"));
  EXPECT_EQ(Slurp(final_path), final_before);
}

// `--resume 99999` on a run whose checkpoints end at 32: the step does not exist, and the message lists what does.
TEST_F(TrainerTest, ResumeAtAStepThatNeverExistedSaysItDoesNotExist) {
  ASSERT_NO_FATAL_FAILURE(TrainFull());
  proto::Config cfg;
  ASSERT_TRUE(Config(dir_.File("data"), dir_.File("full"), &cfg).ok());
  cfg.mutable_checkpoint()->set_resume("99999");
  TrainSummary s;
  const Status st = Train(cfg, &s);
  EXPECT_EQ(st.code(), Status::Code::kInvalidArgument) << st.ToString();
  EXPECT_NE(st.message().find("step 99999 does not exist"), std::string::npos) << st.ToString();
  EXPECT_NE(st.message().find("step-00000025, step-00000030, step-00000032"), std::string::npos) << st.ToString();
  EXPECT_EQ(st.message().find("incomplete save"), std::string::npos) << st.ToString();
}

// Starts that are refused (resume never over checkpoints; every checkpoint corrupt) or have nothing to do (a finished
// run again) leave run.dir as they found it: config.yaml (here a user's edit), metrics.jsonl, no TensorBoard files.
TEST_F(TrainerTest, RefusedAndNoOpStartsWriteNothingToTheRunDirectory) {
  ASSERT_NO_FATAL_FAILURE(TrainFull());
  namespace fs = std::filesystem;
  const std::string run = dir_.File("full");
  { std::ofstream(run + "/config.yaml") << "# the user's notes\n"; }
  const std::string metrics = Slurp(run + "/metrics.jsonl");
  auto files = [&] {  // every file under run.dir but the checkpoints (their store is checked apart)
    std::vector<std::string> out;
    for (const auto& e : fs::recursive_directory_iterator(run)) {
      const std::string rel = fs::relative(e.path(), run).string();
      if (rel.rfind("checkpoints", 0) != 0) out.push_back(rel);
    }
    std::sort(out.begin(), out.end());
    return out;
  };
  const std::vector<std::string> before = files();
  auto expect_untouched = [&](const std::string& what) {
    EXPECT_EQ(Slurp(run + "/config.yaml"), "# the user's notes\n") << what;
    EXPECT_EQ(Slurp(run + "/metrics.jsonl"), metrics) << what;
    EXPECT_EQ(files(), before) << what;  // no new TensorBoard events file, no trace
  };
  proto::Config cfg;
  ASSERT_TRUE(Config(dir_.File("data"), run, &cfg).ok());
  cfg.mutable_run()->set_tensorboard(true);
  TrainSummary s;
  ASSERT_TRUE(Train(cfg, &s).ok());  // finished already
  EXPECT_TRUE(s.already_done);
  expect_untouched("a finished run started again");

  cfg.mutable_checkpoint()->set_resume("never");
  const Status never = Train(cfg, &s);
  EXPECT_EQ(never.code(), Status::Code::kInvalidArgument) << never.ToString();
  expect_untouched("resume never over checkpoints");

  cfg.mutable_checkpoint()->set_resume("auto");
  for (const auto& e : fs::directory_iterator(run + "/checkpoints")) {
    if (e.is_directory()) fs::resize_file(e.path() / "params.bin", 4);  // every checkpoint cut short
  }
  const Status corrupt = Train(cfg, &s);
  EXPECT_EQ(corrupt.code(), Status::Code::kInvalidArgument) << corrupt.ToString();
  EXPECT_NE(corrupt.message().find("none of the checkpoints"), std::string::npos) << corrupt.ToString();
  expect_untouched("every checkpoint corrupt");
}

// A user keeps a note inside an old step directory; retention later removes that checkpoint: dtrain's files go, the
// note (and so the directory) stays.
TEST_F(TrainerTest, RetentionDeletesOnlyTheFilesDtrainWrote) {
  namespace fs = std::filesystem;
  proto::Config cfg;
  ASSERT_TRUE(Config(dir_.File("data"), dir_.File("run"), &cfg).ok());
  cfg.mutable_train()->set_max_steps(10);  // checkpoints of steps 5 and 10
  TrainSummary s;
  ASSERT_TRUE(Train(cfg, &s).ok());
  const std::string old_dir = dir_.File("run") + "/checkpoints/step-00000005";
  ASSERT_TRUE(fs::exists(old_dir + "/manifest.pb"));
  { std::ofstream(old_dir + "/notes.txt") << "lr 0.01 looked best\n"; }
  cfg.mutable_train()->set_max_steps(0);  // on to the end: saves at 15, 20, ... retire step 5
  ASSERT_TRUE(Train(cfg, &s).ok());
  EXPECT_EQ(s.steps, 32);
  EXPECT_EQ(Slurp(old_dir + "/notes.txt"), "lr 0.01 looked best\n");
  EXPECT_FALSE(fs::exists(old_dir + "/manifest.pb"));
  EXPECT_FALSE(fs::exists(old_dir + "/params.bin"));
  EXPECT_FALSE(fs::exists(dir_.File("run") + "/checkpoints/step-00000010"));  // no foreign file: gone entirely
}

}  // namespace
}  // namespace dtrain::runtime
