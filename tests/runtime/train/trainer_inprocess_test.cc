// The Trainer built in this process (no binary, no MPI): one CPU rank (no communicators), a small MLP on a
// 4-class 8x8 image dataset the test writes. Covers the loop (the loss falls, the run's records), a resume that
// ends with the parameters of an uninterrupted run, bit for bit, and a preemption request: Run returns Preempted
// after saving a checkpoint that the next run resumes from.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "comm/dist_env.h"
#include "core/check.h"
#include "core/device_context.h"
#include "data/shard_writer.h"
#include "runtime/checkpoint/preemption.h"
#include "runtime/checkpoint/safetensors.h"
#include "runtime/config/config.h"
#include "runtime/train/trainer.h"
#include "tests/testing/fixtures.h"

namespace dtrain::runtime {
namespace {

using ::dtrain::testing::TempDir;

constexpr int kSide = 8, kClasses = 4;

// `n` records of class i % 4: a bright quadrant (the class) on a dim background with a little deterministic noise.
void WriteImages(const std::string& dir, int n, uint32_t seed) {
  proto::DatasetSchema schema;
  schema.set_kind(proto::DatasetSchema::IMAGE);
  schema.add_dims(kSide);
  schema.add_dims(kSide);
  schema.set_has_label(true);
  schema.set_num_classes(kClasses);
  schema.set_pixel_mean(0.3f);
  schema.set_pixel_std(0.3f);
  std::unique_ptr<data::DatasetWriter> w;
  ASSERT_TRUE(data::DatasetWriter::Create(dir, schema, /*samples_per_shard=*/100, &w).ok());
  uint32_t x = seed;
  for (int i = 0; i < n; ++i) {
    const uint32_t label = static_cast<uint32_t>(i % kClasses);
    std::vector<uint8_t> rec(4 + kSide * kSide);
    for (int b = 0; b < 4; ++b) rec[b] = static_cast<uint8_t>(label >> (8 * b));
    for (int r = 0; r < kSide; ++r) {
      for (int c = 0; c < kSide; ++c) {
        x = x * 1664525u + 1013904223u;
        const int quadrant = (r >= kSide / 2 ? 2 : 0) + (c >= kSide / 2 ? 1 : 0);
        rec[4 + r * kSide + c] = static_cast<uint8_t>((quadrant == static_cast<int>(label) ? 180 : 40) + (x >> 27));
      }
    }
    ASSERT_TRUE(w->Add(rec.data(), rec.size()).ok());
  }
  ASSERT_TRUE(w->Finish("trainer_inprocess_test").ok());
}

class TrainerInProcessTest : public ::testing::Test {
 protected:
  void SetUp() override {
    Preemption::Clear();
    WriteImages(dir_.File("train"), 256, 1);
    WriteImages(dir_.File("test"), 64, 2);
  }
  void TearDown() override { Preemption::Clear(); }

  // The config of a run in run_dir: 2 epochs of 16 steps (batch 16), a checkpoint every 8 steps.
  proto::Config Config(const std::string& run_dir, const std::vector<std::string>& more = {}) const {
    std::vector<std::string> sets = {"model.kind=mlp",
                                     "model.mlp.input_dim=64",
                                     "model.mlp.hidden=[16]",
                                     "model.mlp.num_classes=4",
                                     "data.dataset=shards",
                                     "data.train_shards=" + dir_.File("train"),
                                     "data.test_shards=" + dir_.File("test"),
                                     "data.batch_size=16",
                                     "data.eval_batch_size=32",
                                     "data.workers=1",
                                     "optim.name=adamw",
                                     "optim.lr=0.01",
                                     "train.epochs=2",
                                     "train.seed=7",
                                     "train.log_every=4",
                                     "train.device=cpu",
                                     "train.eval=true",
                                     "checkpoint.every_steps=8",
                                     "run.dir=" + run_dir};
    sets.insert(sets.end(), more.begin(), more.end());
    proto::Config cfg;
    const Status st = ParseConfig("", "test", sets, &cfg);
    EXPECT_TRUE(st.ok()) << st.ToString();
    return cfg;
  }

  // Builds a trainer for `cfg` on one CPU rank and runs it.
  Status Train(const proto::Config& cfg, TrainSummary* s) {
    std::unique_ptr<DeviceContext> ctx;
    DT_RETURN_IF_ERROR(DeviceContext::CreateCpu(&ctx));
    comm::DistEnv env;  // one process: rank 0 of 1
    env.rank = 0;
    env.world_size = 1;
    std::unique_ptr<Trainer> t;
    DT_RETURN_IF_ERROR(Trainer::Create(cfg, *ctx, /*grad_comm=*/nullptr, /*host_comm=*/nullptr, env, &t));
    return t->Run(s);
  }

  TempDir dir_;
};

std::vector<NamedTensor> Params(const std::string& run_dir) {
  std::vector<NamedTensor> t;
  const Status st = ReadSafetensors(run_dir + "/final.safetensors", &t);
  EXPECT_TRUE(st.ok()) << st.ToString();
  return t;
}

void ExpectSameParams(const std::string& a, const std::string& b) {
  const std::vector<NamedTensor> pa = Params(a), pb = Params(b);
  ASSERT_EQ(pa.size(), pb.size());
  ASSERT_FALSE(pa.empty());
  for (size_t i = 0; i < pa.size(); ++i) {
    EXPECT_EQ(pa[i].name, pb[i].name);
    EXPECT_EQ(pa[i].data, pb[i].data) << pa[i].name;  // bit for bit
  }
}

int CountLines(const std::string& path, const std::string& needle) {
  std::ifstream f(path);
  int n = 0;
  for (std::string line; std::getline(f, line);) n += line.find(needle) != std::string::npos;
  return n;
}

TEST_F(TrainerInProcessTest, TrainsEvaluatesAndRecordsTheRun) {
  const std::string run = dir_.File("run");
  TrainSummary s;
  const Status st = Train(Config(run), &s);
  ASSERT_TRUE(st.ok()) << st.ToString();
  EXPECT_EQ(s.steps, 32);
  EXPECT_EQ(s.samples, 32 * 16);
  EXPECT_FALSE(s.already_done);
  EXPECT_LT(s.last_train_loss, 0.5 * std::log(4.0));  // well below chance (log 4 = 1.39)
  EXPECT_GT(s.eval_accuracy, 0.9);
  const std::string metrics = run + "/metrics.jsonl";
  EXPECT_EQ(CountLines(metrics, "\"kind\":\"start\""), 1);
  EXPECT_EQ(CountLines(metrics, "\"kind\":\"train\""), 8);  // every 4 steps
  EXPECT_EQ(CountLines(metrics, "\"kind\":\"eval\""), 2);   // after each epoch
  EXPECT_EQ(CountLines(metrics, "\"kind\":\"checkpoint\""), 4);
  EXPECT_EQ(CountLines(metrics, "\"grad_norm\""), 0);  // not known yet: never written
  EXPECT_EQ(CountLines(metrics, "\"status\":\"done\""), 1);
  // Started again, the finished run has nothing to do.
  TrainSummary again;
  ASSERT_TRUE(Train(Config(run), &again).ok());
  EXPECT_TRUE(again.already_done);
  EXPECT_EQ(again.steps, 32);
}

TEST_F(TrainerInProcessTest, AResumeEndsWithTheParametersOfAnUninterruptedRun) {
  const std::string whole = dir_.File("whole"), split = dir_.File("split");
  // A constant LR: train.max_steps below would shorten a cosine schedule (its length is part of the config).
  const std::string lr = "schedule.kind=constant";
  TrainSummary s;
  ASSERT_TRUE(Train(Config(whole, {lr}), &s).ok());
  // The same run stopped after 12 steps (inside the first epoch; checkpoints at step 8 and at the end, 12)...
  TrainSummary first;
  ASSERT_TRUE(Train(Config(split, {lr, "train.max_steps=12"}), &first).ok());
  EXPECT_EQ(first.steps, 12);
  // ...then resumed to the end: the same samples in the same steps, the same updates.
  TrainSummary rest;
  ASSERT_TRUE(Train(Config(split, {lr}), &rest).ok());
  EXPECT_EQ(rest.steps, 32);
  EXPECT_EQ(CountLines(split + "/metrics.jsonl", "\"kind\":\"restore\""), 1);
  ExpectSameParams(whole, split);
  EXPECT_EQ(rest.eval_loss, s.eval_loss);
}

TEST_F(TrainerInProcessTest, APreemptionRequestSavesAndReturnsPreempted) {
  const std::string whole = dir_.File("whole"), run = dir_.File("preempted");
  TrainSummary s;
  ASSERT_TRUE(Train(Config(whole), &s).ok());
  // Requested before the run: the ranks agree on it after the first step, save it and stop.
  Preemption::Raise(15);
  TrainSummary p;
  const Status st = Train(Config(run), &p);
  ASSERT_EQ(st.code(), Status::Code::kPreempted) << st.ToString();
  EXPECT_NE(st.message().find("checkpoint of step 1 saved"), std::string::npos) << st.message();
  EXPECT_EQ(CountLines(run + "/metrics.jsonl", "\"status\":\"preempted\""), 1);
  std::ifstream latest(run + "/checkpoints/latest");
  EXPECT_TRUE(latest.good()) << "no checkpoints/latest";
  // The next attempt resumes at step 1 and ends where the uninterrupted run did.
  Preemption::Clear();
  TrainSummary rest;
  ASSERT_TRUE(Train(Config(run), &rest).ok());
  EXPECT_EQ(rest.steps, 32);
  ExpectSameParams(whole, run);
}

}  // namespace
}  // namespace dtrain::runtime
