// The interval metrics feed three sinks from one list: the progress line's text, the TensorBoard tags and the
// metrics.jsonl keys are pinned here (tests/launcher and bench/ parse them).
#include "runtime/train/progress_metrics.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

namespace dtrain::runtime {
namespace {

StepPhases Phases() {
  StepPhases p;
  p.step_ms = 10.0;
  p.data_ms = 1.0;
  p.fwd_bwd_ms = 6.0;
  p.comm_exposed_ms = 2.0;
  p.optim_ms = 0.5;
  p.ckpt_stall_ms = 0.25;
  return p;
}

TEST(ProgressMetricsTest, ProgressLineText) {
  const StepPhases p = Phases();
  const auto m = IntervalMetrics(0.123456, 1e-3, 1234.4, 0, p, 0.0);
  EXPECT_EQ(ProgressLine(2, 3, 40, 100, m, p, 65, 190),
            "epoch 2/3 step 40/100 | loss 0.1235 | lr 1.000e-03 | 1234 samples/s | step 10.00 ms (" +
                FormatStepBreakdown(p) + ") | 40% 1m 05s elapsed, eta 3m 10s");
  // The peak memory appears only when measured (GPU), truncated to whole MiB; token models add tokens/s.
  const auto g = IntervalMetrics(0.5, 2.5e-4, 99.6, 1024, p, 1023.9);
  EXPECT_EQ(ProgressLine(1, 1, 5, 5, g, p, 3, 0),
            "epoch 1/1 step 5/5 | loss 0.5000 | lr 2.500e-04 | 100 samples/s | 101990 tokens/s | step 10.00 ms (" +
                FormatStepBreakdown(p) + ") | peak 1023 MiB | 100% 3.0 s elapsed, eta 0.0 s");
}

TEST(ProgressMetricsTest, ProgressBar) {
  EXPECT_EQ(ProgressBar(37, 100, 21, 35),
            "[###########-------------------]  37% step 37/100 | 21.0 s elapsed, eta 35.0 s");
  EXPECT_EQ(ProgressBar(0, 0, 0, 0), "[------------------------------]   0% step 0/0 | 0.0 s elapsed, eta 0.0 s");
}

TEST(ProgressMetricsTest, TensorBoardAndJsonlNames) {
  const StepPhases p = Phases();
  const auto m = IntervalMetrics(0.25, 1e-3, 500.0, 0, p, 12.0);
  const std::vector<std::pair<std::string, double>> want = {
      {"train/loss", 0.25},          {"train/lr", 1e-3},     {"train/samples_per_s", 500.0},
      {"time/step_ms", 10.0},        {"time/data_ms", 1.0},  {"time/fwd_bwd_ms", 6.0},
      {"time/comm_exposed_ms", 2.0}, {"time/optim_ms", 0.5}, {"time/ckpt_stall_ms", 0.25}};
  EXPECT_EQ(TensorBoardScalars(m), want);
  JsonLine line;
  AddMetrics(m, &line);
  const std::string json = line.str();
  size_t pos = 0;
  for (const char* key : {"loss", "lr", "samples_per_s", "step_ms", "data_ms", "fwd_bwd_ms", "comm_exposed_ms",
                          "optim_ms", "ckpt_stall_ms", "peak_mem_mib"}) {
    const size_t at = json.find("\"" + std::string(key) + "\":", pos);
    ASSERT_NE(at, std::string::npos) << key << " in order in " << json;
    pos = at;
  }
  EXPECT_NE(json.find("\"peak_mem_mib\":12"), std::string::npos) << json;
}

// The eval line: loss and perplexity exp(loss) for token models, loss and accuracy for classifiers, with the step.
TEST(ProgressMetricsTest, EvalLineAndMetrics) {
  EXPECT_EQ(EvalLine(1, 1, 200, 1000, 2.345678, 0.4, /*tokens=*/true, 1.5),
            "epoch 1/1 step 200/1000 eval | loss 2.3457 | ppl 10.44 | 1.50 s");
  EXPECT_EQ(EvalLine(2, 3, 1876, 2814, 0.456789, 0.83214, /*tokens=*/false, 0.25),
            "epoch 2/3 step 1876/2814 eval | loss 0.4568 | accuracy 83.21% | 0.25 s");
  const auto t = EvalMetrics(2.345678, 0.4, true, 1.5);
  ASSERT_EQ(t.size(), 4u);
  EXPECT_STREQ(t[0].key, "eval_loss");
  EXPECT_STREQ(t[1].key, "eval_accuracy");
  EXPECT_STREQ(t[2].key, "eval_ppl");
  EXPECT_DOUBLE_EQ(t[2].value, std::exp(2.345678));
  EXPECT_STREQ(t[3].key, "eval_s");
  const auto c = EvalMetrics(0.5, 0.8, false, 1.0);
  ASSERT_EQ(c.size(), 3u);  // no perplexity for a classifier
  for (const ProgressMetric& m : c) EXPECT_STRNE(m.key, "eval_ppl");
}

// Every key a train or eval record may hold is a metrics.csv column (a key missing here would vanish from the CSV).
TEST(ProgressMetricsTest, CsvColumnsHoldEveryRecordKey) {
  const std::vector<std::string>& cols = CsvColumns();
  auto has = [&](const std::string& k) { return std::find(cols.begin(), cols.end(), k) != cols.end(); };
  auto m = IntervalMetrics(0.5, 1e-3, 10, 64, Phases(), 100);
  AddGradNorm(1.5, &m);
  AddGpuMetrics(50, 1000, 200, GpuWindow(), &m);
  const auto e = EvalMetrics(1, 0.5, true, 1);
  m.insert(m.end(), e.begin(), e.end());
  for (const ProgressMetric& x : m) EXPECT_TRUE(has(x.key)) << x.key;
  for (const char* k : {"kind", "epoch", "step", "time", "verdict"}) EXPECT_TRUE(has(k)) << k;
  EXPECT_EQ(cols.size(), m.size() + 5) << "a column no record holds";
}

}  // namespace
}  // namespace dtrain::runtime
