// The model owns its inputs (models/model.h): InputsFromBatch shapes a loader batch for Forward (with the config
// key named when a sample has the wrong size), and EvalBatch scores a batch — loss sum, correct predictions and
// rows scored over the real samples only — against the model's own losses()/logits() read back here.
#include "models/model.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <vector>

#include "core/device_context.h"
#include "models/cnn.h"
#include "models/gpt2.h"
#include "models/mlp.h"
#include "tests/testing/grad_check.h"

namespace dtrain::models {
namespace {

using testing::Fetch;
using testing::MakeTensor;

std::unique_ptr<DeviceContext> Cpu() {
  std::unique_ptr<DeviceContext> ctx;
  EXPECT_TRUE(DeviceContext::CreateCpu(&ctx).ok());
  return ctx;
}

// The expected EvalBatch results from the last Forward's losses and logits (argmax over `classes` columns).
void Expected(DeviceContext& ctx, const Model& m, const Tensor& targets, int64_t classes, int64_t real_rows,
              double* loss, int64_t* correct) {
  std::vector<double> losses, logits, labels;
  DT_ASSERT_OK(Fetch(ctx, m.losses(), &losses));
  DT_ASSERT_OK(Fetch(ctx, m.logits(), &logits));
  DT_ASSERT_OK(Fetch(ctx, targets, &labels));
  const int64_t cols = m.logits().numel() / m.losses().numel();
  *loss = 0;
  *correct = 0;
  for (int64_t r = 0; r < real_rows; ++r) {
    *loss += losses[r];
    const auto row = logits.begin() + r * cols;
    const int64_t pred = std::max_element(row, row + classes) - row;
    *correct += pred == static_cast<int64_t>(labels[r]);
  }
}

TEST(ModelTest, MlpShapesItsInputsAndNamesTheKey) {
  auto ctx = Cpu();
  MlpOptions o;
  o.input_dim = 6;
  o.hidden = {5};
  o.num_classes = 4;
  std::unique_ptr<Mlp> m;
  DT_ASSERT_OK(Mlp::Create(*ctx, o, &m));
  Tensor batch, x;
  DT_ASSERT_OK(MakeTensor(*ctx, DType::kF32, {3, 2, 3}, testing::RandomVector(18, 1), &batch));
  DT_ASSERT_OK(m->InputsFromBatch(batch, &x));
  EXPECT_EQ(x.shape(), (std::vector<int64_t>{3, 6}));
  EXPECT_EQ(x.data(), batch.data());  // a view
  Tensor wrong;
  DT_ASSERT_OK(MakeTensor(*ctx, DType::kF32, {3, 5}, testing::RandomVector(15, 1), &wrong));
  const Status st = m->InputsFromBatch(wrong, &x);
  EXPECT_EQ(st.code(), Status::Code::kInvalidArgument);
  EXPECT_EQ(st.message(), "model.mlp.input_dim is 6 but the dataset's samples have 5 values");
}

TEST(ModelTest, CnnShapesItsInputsAsImages) {
  auto ctx = Cpu();
  CnnOptions o;
  o.in_channels = 1;
  o.image_size = 4;
  o.channels = {2};
  o.num_classes = 3;
  std::unique_ptr<Cnn> m;
  DT_ASSERT_OK(Cnn::Create(*ctx, o, &m));
  Tensor batch, x;
  DT_ASSERT_OK(MakeTensor(*ctx, DType::kF32, {2, 16}, testing::RandomVector(32, 2), &batch));
  DT_ASSERT_OK(m->InputsFromBatch(batch, &x));
  EXPECT_EQ(x.shape(), (std::vector<int64_t>{2, 1, 4, 4}));
  Tensor wrong;
  DT_ASSERT_OK(MakeTensor(*ctx, DType::kF32, {2, 15}, testing::RandomVector(30, 2), &wrong));
  const Status st = m->InputsFromBatch(wrong, &x);
  EXPECT_EQ(st.code(), Status::Code::kInvalidArgument);
  EXPECT_EQ(st.message(), "model.cnn expects 1x4x4 images but the dataset's samples have 15 values");
}

TEST(ModelTest, MlpEvalBatchSkipsPaddingSamples) {
  auto ctx = Cpu();
  MlpOptions o;
  o.input_dim = 6;
  o.hidden = {8};
  o.num_classes = 3;
  std::unique_ptr<Mlp> m;
  DT_ASSERT_OK(Mlp::Create(*ctx, o, &m));
  DT_ASSERT_OK(m->InitParams(3));
  Tensor x, y;
  DT_ASSERT_OK(MakeTensor(*ctx, DType::kF32, {10, 6}, testing::RandomVector(60, 4, -3, 3), &x));
  DT_ASSERT_OK(MakeTensor(*ctx, DType::kI32, {10}, {0, 1, 2, 0, 1, 2, 0, 1, 2, 0}, &y));
  double loss = 0.5;  // EvalBatch adds to what is there
  int64_t correct = 1, count = 2;
  DT_ASSERT_OK(m->EvalBatch(*ctx, x, y, /*num_real=*/7, &loss, &correct, &count));
  double want_loss = 0;
  int64_t want_correct = 0;
  Expected(*ctx, *m, y, 3, 7, &want_loss, &want_correct);
  EXPECT_NEAR(loss, 0.5 + want_loss, 1e-9);
  EXPECT_EQ(correct, 1 + want_correct);
  EXPECT_EQ(count, 2 + 7);
  EXPECT_GT(want_loss, 0.0);
  EXPECT_EQ(m->EvalBatch(*ctx, x, y, 11, &loss, &correct, &count).code(), Status::Code::kInvalidArgument);
}

TEST(ModelTest, AddMeanLossAccumulatesTheWeightedMeanOnTheDevice) {
  auto ctx = Cpu();
  MlpOptions o;
  o.input_dim = 4;
  o.hidden = {3};
  o.num_classes = 2;
  std::unique_ptr<Mlp> m;
  DT_ASSERT_OK(Mlp::Create(*ctx, o, &m));
  DT_ASSERT_OK(m->InitParams(8));
  Tensor x, y, acc;
  DT_ASSERT_OK(MakeTensor(*ctx, DType::kF32, {5, 4}, testing::RandomVector(20, 9, -2, 2), &x));
  DT_ASSERT_OK(MakeTensor(*ctx, DType::kI32, {5}, {0, 1, 1, 0, 1}, &y));
  DT_ASSERT_OK(MakeTensor(*ctx, DType::kF32, {1, 1}, {0.25}, &acc));
  DT_ASSERT_OK(m->Forward(x, y));
  DT_ASSERT_OK(m->AddMeanLoss(*ctx, 0.5f, &acc));
  DT_ASSERT_OK(m->AddMeanLoss(*ctx, 0.5f, &acc));
  std::vector<double> losses, got;
  DT_ASSERT_OK(Fetch(*ctx, m->losses(), &losses));
  DT_ASSERT_OK(Fetch(*ctx, acc, &got));
  double mean = 0;
  for (double l : losses) mean += l / 5.0;
  EXPECT_GT(mean, 0.0);
  EXPECT_NEAR(got[0], 0.25 + mean, 1e-6);
}

TEST(ModelTest, Gpt2EvalBatchScoresEveryTokenOverTheRealVocabulary) {
  auto ctx = Cpu();
  Gpt2Options o;
  o.vocab_size = 13;
  o.padded_vocab_size = 16;
  o.max_seq_len = 4;
  o.n_layer = 1;
  o.n_head = 2;
  o.n_embd = 8;
  std::unique_ptr<Gpt2> m;
  DT_ASSERT_OK(Gpt2::Create(*ctx, o, 3, 4, &m));
  DT_ASSERT_OK(m->InitParams(5));
  std::vector<double> tok = testing::RandomVector(12, 6, 0.0, 13.0), tgt = testing::RandomVector(12, 7, 0.0, 13.0);
  for (double& t : tok) t = std::floor(t);
  for (double& t : tgt) t = std::floor(t);
  Tensor x, y, in;
  DT_ASSERT_OK(MakeTensor(*ctx, DType::kI32, {3, 4}, tok, &x));
  DT_ASSERT_OK(MakeTensor(*ctx, DType::kI32, {3, 4}, tgt, &y));
  DT_ASSERT_OK(m->InputsFromBatch(x, &in));  // tokens as they are
  EXPECT_EQ(in.shape(), x.shape());
  double loss = 0;
  int64_t correct = 0, count = 0;
  DT_ASSERT_OK(m->EvalBatch(*ctx, in, y, /*num_real=*/2, &loss, &correct, &count));
  EXPECT_EQ(count, 2 * 4);  // one row per token of the real samples
  double want_loss = 0;
  int64_t want_correct = 0;
  Expected(*ctx, *m, y, /*classes=*/13, 8, &want_loss, &want_correct);
  EXPECT_NEAR(loss, want_loss, 1e-9);
  EXPECT_EQ(correct, want_correct);
}

}  // namespace
}  // namespace dtrain::models
