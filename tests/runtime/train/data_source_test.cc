// DataSource: the loader-backed source's epoch arithmetic (whole steps per epoch, steps left from a position,
// the schedule's length in steps or in samples_per_step units) in closed form for drop and pad, its restore check
// and evaluation batches; the synthetic source has no epochs, no position and no evaluation.
#include "runtime/train/data_source.h"

#include <gtest/gtest.h>

#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "data/shard_writer.h"
#include "runtime/config/config.h"
#include "tests/testing/fixtures.h"

namespace dtrain::runtime {
namespace {

using ::dtrain::testing::TempDir;

// `n` 2x2 images of 2 classes.
void WriteImages(const std::string& dir, int n) {
  proto::DatasetSchema schema;
  schema.set_kind(proto::DatasetSchema::IMAGE);
  schema.add_dims(2);
  schema.add_dims(2);
  schema.set_has_label(true);
  schema.set_num_classes(2);
  schema.set_pixel_mean(0.5f);
  schema.set_pixel_std(0.25f);
  std::unique_ptr<data::DatasetWriter> w;
  ASSERT_TRUE(data::DatasetWriter::Create(dir, schema, /*samples_per_shard=*/64, &w).ok());
  for (int i = 0; i < n; ++i) {
    const std::vector<uint8_t> rec = {static_cast<uint8_t>(i % 2), 0, 0, 0, 10, 20, 30, static_cast<uint8_t>(i)};
    ASSERT_TRUE(w->Add(rec.data(), rec.size()).ok());
  }
  ASSERT_TRUE(w->Finish("data_source_test").ok());
}

class DataSourceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(DeviceContext::CreateCpu(&ctx_).ok());
    WriteImages(dir_.File("train"), 100);
    WriteImages(dir_.File("test"), 30);
  }

  // 100 training samples, batch 8, 2 micro-batches a step: a step takes 16 samples.
  Status Make(const std::vector<std::string>& more, std::unique_ptr<DataSource>* out) {
    std::vector<std::string> sets = {"data.dataset=shards",
                                     "data.train_shards=" + dir_.File("train"),
                                     "data.test_shards=" + dir_.File("test"),
                                     "data.batch_size=8",
                                     "data.eval_batch_size=8",
                                     "data.workers=1",
                                     "train.grad_accum_steps=2",
                                     "train.seed=3"};
    sets.insert(sets.end(), more.begin(), more.end());
    proto::Config cfg;
    const Status st = ParseConfig("", "test", sets, &cfg);
    if (!st.ok()) return st;
    comm::DistEnv env;
    env.rank = 0;
    env.world_size = 1;
    return MakeDataSource(cfg, *ctx_, env, out);
  }

  TempDir dir_;
  std::unique_ptr<DeviceContext> ctx_;
};

TEST_F(DataSourceTest, DropCountsWholeStepsOnly) {
  std::unique_ptr<DataSource> s;
  ASSERT_TRUE(Make({"data.remainder=drop"}, &s).ok());
  // 100 / 16 = 6 whole steps an epoch (96 samples); the last 4 are dropped.
  EXPECT_TRUE(s->StepFits({3, 0, 80}));
  EXPECT_FALSE(s->StepFits({3, 0, 96}));
  EXPECT_EQ(s->StepsLeft({3, 0, 0}, 2), 12);
  EXPECT_EQ(s->StepsLeft({3, 1, 32}, 2), 4);
  EXPECT_EQ(s->StepsLeft({3, 2, 0}, 2), 0);
  EXPECT_EQ(s->ScheduleSteps(3, 0), 18);
  EXPECT_EQ(s->ScheduleSteps(3, 30), 9);  // floor(100 / 30) = 3 an epoch
  const data::SamplerState start = s->Position();
  EXPECT_EQ(start.seed, 3u);
  EXPECT_EQ(start.epoch, 0);
  EXPECT_EQ(start.consumed, 0);
  data::Batch b;
  ASSERT_TRUE(s->Next(&b).ok());
  EXPECT_EQ(b.num_real, 8);
  EXPECT_EQ(s->Position().consumed, 8);
}

TEST_F(DataSourceTest, PadFitsAStepWhoseLastMicroBatchStartsInsideTheEpoch) {
  std::unique_ptr<DataSource> s;
  // One micro-batch of 8 a step: drop has 12 steps (96 samples), pad 13 (the last one padded from 4 samples).
  ASSERT_TRUE(Make({"data.remainder=pad", "train.grad_accum_steps=1"}, &s).ok());
  EXPECT_TRUE(s->StepFits({3, 0, 96}));
  EXPECT_FALSE(s->StepFits({3, 0, 104}));
  EXPECT_EQ(s->StepsLeft({3, 0, 0}, 1), 13);
  EXPECT_EQ(s->ScheduleSteps(2, 30), 8);  // ceil(100 / 30) = 4 an epoch
  // Two micro-batches a step: the one at 96 would start its second micro-batch at 104, beyond the epoch.
  ASSERT_TRUE(Make({"data.remainder=pad"}, &s).ok());
  EXPECT_TRUE(s->StepFits({3, 0, 80}));
  EXPECT_FALSE(s->StepFits({3, 0, 96}));
  EXPECT_EQ(s->StepsLeft({3, 0, 0}, 1), 6);
}

TEST_F(DataSourceTest, RestoreRefusesAPositionBeyondTheEpochAndEvaluationCountsEveryTestSample) {
  std::unique_ptr<DataSource> s;
  ASSERT_TRUE(Make({"train.eval=true"}, &s).ok());
  const Status beyond = s->Restore({3, 0, 101});
  EXPECT_EQ(beyond.code(), Status::Code::kInvalidArgument);
  EXPECT_NE(beyond.message().find("only 100 samples"), std::string::npos) << beyond.message();
  ASSERT_TRUE(s->Restore({3, 1, 48}).ok());
  EXPECT_EQ(s->Position().epoch, 1);
  EXPECT_EQ(s->Position().consumed, 48);
  ASSERT_TRUE(s->has_eval());
  int64_t batches = 0;
  ASSERT_TRUE(s->BeginEval(0, &batches).ok());
  ASSERT_EQ(batches, 4);  // 30 samples in batches of 8, the last padded
  int64_t real = 0;
  for (int64_t k = 0; k < batches; ++k) {
    data::Batch b;
    ASSERT_TRUE(s->NextEval(&b).ok());
    real += b.num_real;
  }
  EXPECT_EQ(real, 30);
  std::unique_ptr<DataSource> no_eval;
  ASSERT_TRUE(Make({"train.eval=false"}, &no_eval).ok());
  EXPECT_FALSE(no_eval->has_eval());
}

// data.limit_train / limit_test on shards: the epoch is the first N samples (steps, restore check), evaluation covers
// the first N test samples; eval_batches caps an evaluation at its first K batches, the same ones every time.
TEST_F(DataSourceTest, LimitsShortenTheSplitsAndEvalBatchesCapsAnEvaluation) {
  std::unique_ptr<DataSource> s;
  ASSERT_TRUE(Make({"data.limit_train=50", "data.limit_test=20"}, &s).ok());
  EXPECT_EQ(s->StepsLeft({3, 0, 0}, 1), 3);  // 50 / 16
  EXPECT_EQ(s->ScheduleSteps(2, 0), 6);
  EXPECT_FALSE(s->StepFits({3, 0, 48}));
  const Status beyond = s->Restore({3, 0, 51});
  EXPECT_NE(beyond.message().find("only 50 samples"), std::string::npos) << beyond.message();
  for (int64_t k = 0; k < 3; ++k) {
    data::Batch b;
    ASSERT_TRUE(s->Next(&b).ok());
    for (int64_t i : b.indices) EXPECT_LT(i, 50);
  }
  int64_t batches = 0;
  ASSERT_TRUE(s->BeginEval(0, &batches).ok());
  EXPECT_EQ(batches, 3);  // 20 test samples in batches of 8
  std::vector<int64_t> first;
  ASSERT_TRUE(s->BeginEval(2, &batches).ok());
  ASSERT_EQ(batches, 2);
  for (int64_t k = 0; k < batches; ++k) {
    data::Batch b;
    ASSERT_TRUE(s->NextEval(&b).ok());
    first.insert(first.end(), b.indices.begin(), b.indices.end());
  }
  EXPECT_EQ(first, (std::vector<int64_t>{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15}));
  ASSERT_TRUE(s->BeginEval(5, &batches).ok());  // more than the split has: all of it
  EXPECT_EQ(batches, 3);
  data::Batch again;  // a new evaluation starts at the first batch again
  ASSERT_TRUE(s->NextEval(&again).ok());
  EXPECT_EQ(again.indices.front(), 0);
}

TEST_F(DataSourceTest, SyntheticTokensHaveNoEpochsNoPositionAndNoEvaluation) {
  const std::vector<std::string> gpt2 = {"data.dataset=synthetic_tokens", "model.kind=gpt2",
                                         "model.gpt2.vocab_size=64",      "model.gpt2.padded_vocab_size=64",
                                         "model.gpt2.max_seq_len=8",      "train.eval=true"};
  std::unique_ptr<DataSource> s;
  const Status endless = Make(gpt2, &s);  // train.max_steps 0: no end
  EXPECT_EQ(endless.code(), Status::Code::kInvalidArgument);
  EXPECT_NE(endless.message().find("set train.max_steps"), std::string::npos) << endless.message();
  std::vector<std::string> bounded = gpt2;
  bounded.push_back("train.max_steps=5");
  ASSERT_TRUE(Make(bounded, &s).ok());
  constexpr int64_t kNoEnd = std::numeric_limits<int64_t>::max();
  EXPECT_EQ(s->StepsLeft(s->Position(), 3), kNoEnd);
  EXPECT_EQ(s->ScheduleSteps(3, 0), kNoEnd);
  EXPECT_TRUE(s->StepFits({3, 0, 1000000}));
  EXPECT_FALSE(s->has_eval());
  data::Batch b;
  ASSERT_TRUE(s->Next(&b).ok());
  EXPECT_EQ(b.inputs.shape(), (std::vector<int64_t>{8, 8}));
  EXPECT_EQ(s->Position().consumed, 0);
  EXPECT_TRUE(s->Restore({3, 4, 40}).ok());  // nothing to restore
}

}  // namespace
}  // namespace dtrain::runtime
