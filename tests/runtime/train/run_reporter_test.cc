// RunReporter: one IntervalRecord becomes the progress line's metrics and the metrics.jsonl "train" record; the
// gradient norm appears in both only when it is known (finite), right after the loss. An EvalRecord becomes the "eval"
// record (perplexity for token models); both become metrics.csv rows.
#include "runtime/train/run_reporter.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <limits>
#include <string>

#include "runtime/train/progress_metrics.h"
#include "tests/testing/fixtures.h"

namespace dtrain::runtime {
namespace {

StepPhases Phases() {
  StepPhases p;
  p.step_ms = 10.0;
  p.data_ms = 0.1;
  p.fwd_bwd_ms = 9.0;
  p.optim_ms = 0.9;
  return p;
}

TEST(GradNormTest, OnTheLineAndInTheRecordOnlyWhenFinite) {
  const StepPhases p = Phases();
  std::vector<ProgressMetric> m = IntervalMetrics(0.5, 1e-3, 100, 0, p, 0);
  AddGradNorm(std::numeric_limits<double>::quiet_NaN(), &m);
  AddGradNorm(std::numeric_limits<double>::infinity(), &m);
  EXPECT_EQ(ProgressLine(1, 1, 5, 10, m, p, 1, 1).find("gnorm"), std::string::npos);
  AddGradNorm(1.23456, &m);
  EXPECT_EQ(ProgressLine(1, 1, 5, 10, m, p, 1, 1).rfind("epoch 1/1 step 5/10 | loss 0.5000 | gnorm 1.2346 | lr ", 0),
            0u);
  JsonLine line;
  AddMetrics(m, &line);
  EXPECT_NE(line.str().find("\"loss\":0.5,\"grad_norm\":1.23456,\"lr\""), std::string::npos) << line.str();
  bool tb = false;
  for (const auto& [tag, v] : TensorBoardScalars(m)) tb = tb || (tag == "train/grad_norm" && v == 1.23456);
  EXPECT_TRUE(tb);
}

std::string ReadAll(const std::string& path) {
  std::ifstream f(path);
  return std::string(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
}

TEST(RunReporterTest, RankZeroWritesOneTrainRecordPerInterval) {
  testing::TempDir dir;
  proto::Config cfg;
  cfg.mutable_run()->set_dir(dir.path());
  cfg.mutable_train()->set_epochs(2);
  cfg.mutable_run()->set_csv_metrics(true);
  std::unique_ptr<RunReporter> r;
  ASSERT_TRUE(RunReporter::Create(cfg, ReporterIdentity(), &r).ok());
  ASSERT_TRUE(r->SetPlan(0, 10).ok());
  r->StartLoop();
  EXPECT_TRUE(r->wants_intervals());
  EXPECT_TRUE(r->GpuSlots(GpuWindow()).empty());  // no Prometheus feed
  IntervalRecord rec;
  rec.epoch = 1;
  rec.step = 5;
  rec.loss = 0.75;
  rec.lr = 0.01;
  rec.samples_per_s = 1000;
  rec.phases = Phases();
  ASSERT_TRUE(r->ReportInterval(rec).ok());  // grad_norm NaN: not known
  rec.step = 10;
  rec.grad_norm = 2.5;
  ASSERT_TRUE(r->ReportInterval(rec).ok());
  EvalRecord ev;
  ev.epoch = 1;
  ev.step = 10;
  ev.loss = 0.5;
  ev.accuracy = 0.875;
  ev.seconds = 0.25;
  ASSERT_TRUE(r->ReportEval(ev).ok());
  ev.step = 12;
  ev.tokens = true;  // a token model: perplexity exp(loss)
  ASSERT_TRUE(r->ReportEval(ev).ok());
  const std::string jsonl = ReadAll(dir.File("metrics.jsonl"));
  const size_t second = jsonl.find("\"step\":10");
  ASSERT_NE(second, std::string::npos) << jsonl;
  EXPECT_EQ(jsonl.find("\"grad_norm\""), jsonl.find("\"grad_norm\":2.5")) << jsonl;
  EXPECT_GT(jsonl.find("\"grad_norm\""), second) << jsonl;  // not in the first record
  EXPECT_EQ(jsonl.rfind("{\"kind\":\"train\",\"epoch\":1,\"step\":5,\"time\":", 0), 0u) << jsonl;
  EXPECT_NE(jsonl.find("\"kind\":\"eval\",\"epoch\":1,\"step\":10,"), std::string::npos) << jsonl;
  EXPECT_NE(jsonl.find("\"eval_accuracy\":0.875"), std::string::npos) << jsonl;
  EXPECT_NE(jsonl.find("\"step\":12,"), std::string::npos) << jsonl;
  EXPECT_NE(jsonl.find("\"eval_ppl\":1.64872127,\"eval_s\":0.25}"), std::string::npos) << jsonl;  // e^0.5
  EXPECT_EQ(jsonl.find("\"eval_ppl\""), jsonl.rfind("\"eval_ppl\"")) << "only the token model's record";
  // metrics.csv: the header, then one row per train and eval record, cells as in metrics.jsonl.
  const std::string csv = ReadAll(dir.File("metrics.csv"));
  std::string header;
  for (const std::string& c : CsvColumns()) header += (header.empty() ? "" : ",") + c;
  ASSERT_EQ(csv.rfind(header + "\ntrain,1,5,", 0), 0u) << csv;
  EXPECT_NE(csv.find("\neval,1,12,"), std::string::npos) << csv;
  EXPECT_NE(csv.find(",0.5,0.875,1.64872127,0.25,\n"), std::string::npos) << csv;
  EXPECT_NE(csv.find(",0.5,0.875,,0.25,\n"), std::string::npos) << csv;  // the classifier's: no perplexity
  EXPECT_EQ(std::count(csv.begin(), csv.end(), '\n'), 5);
}

TEST(RunReporterTest, OtherRanksWriteNothing) {
  testing::TempDir dir;
  proto::Config cfg;
  cfg.mutable_run()->set_dir(dir.path());
  ReporterIdentity who;
  who.rank = 1;
  who.world = 2;
  std::unique_ptr<RunReporter> r;
  ASSERT_TRUE(RunReporter::Create(cfg, who, &r).ok());
  ASSERT_TRUE(r->SetPlan(0, 10).ok());
  EXPECT_FALSE(r->wants_intervals());
  EXPECT_TRUE(r->ReportInterval(IntervalRecord()).ok());
  EXPECT_TRUE(r->Write(JsonLine().Add("kind", std::string("start"))).ok());
  EXPECT_FALSE(std::ifstream(dir.File("metrics.jsonl")).good());
}

}  // namespace
}  // namespace dtrain::runtime
