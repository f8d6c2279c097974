// `dtrain report`: the price from config.yaml or --price, a metrics file given directly, errors, and
// the real binary's output and exit code.

#include "launcher/cli/report_cmd.h"

#include <gtest/gtest.h>

#include <string>

#include "launcher/exit_codes.h"
#include "tests/testing/subprocess.h"

namespace dtrain::launcher {
namespace {

using dtrain::testing::DtrainBin;
using dtrain::testing::RunCommand;
using dtrain::testing::TempDir;
using dtrain::testing::WriteFile;

// One attempt of 2 GPUs for 1800 s: 1 GPU-hour.
constexpr const char* kMetrics =
    R"({"kind":"start","time":0,"restart":0,"resume_step":0,"world":2,"device":"cuda","total_steps":100}
{"kind":"train","epoch":0,"step":50,"time":900,"loss":0.75,"step_ms":40}
{"kind":"checkpoint","step":100,"time":1700,"stall_ms":300,"wait_ms":0,"async":0}
{"kind":"end","time":1800,"step":100,"status":"done"}
)";

bool Contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

TEST(ReportCmdTest, PriceFromConfigOrFlag) {
  TempDir run;
  WriteFile(run.path() + "/metrics.jsonl", kMetrics);
  std::string text;
  ASSERT_TRUE(BuildReport({run.path()}, &text).ok());
  EXPECT_TRUE(Contains(text, "  GPU-hours      1.000 (1 attempt)\n")) << text;
  EXPECT_TRUE(Contains(text, "(no price: set run.price_per_gpu_hour or pass --price)")) << text;
  EXPECT_TRUE(Contains(text, "  checkpointing  0.3 s stalled in 1 checkpoints")) << text;

  WriteFile(run.path() + "/config.yaml", "run:\n  price_per_gpu_hour: 2.5\n");
  ASSERT_TRUE(BuildReport({run.path()}, &text).ok());
  EXPECT_TRUE(Contains(text, "  cost           $2.50 at $2.50 per GPU-hour\n")) << text;

  ASSERT_TRUE(BuildReport({run.path(), "--price", "3.2"}, &text).ok());  // the flag wins
  EXPECT_TRUE(Contains(text, "  cost           $3.20 at $3.20 per GPU-hour\n")) << text;

  // The metrics file itself; config.yaml is looked up next to it.
  ASSERT_TRUE(BuildReport({run.path() + "/metrics.jsonl"}, &text).ok());
  EXPECT_TRUE(Contains(text, "run summary: " + run.path() + "/metrics.jsonl\n")) << text;
  EXPECT_TRUE(Contains(text, "$2.50 at $2.50")) << text;

  // An unreadable config.yaml is a note, not an error: the summary does not depend on it.
  WriteFile(run.path() + "/config.yaml", "run:\n  price_per_gpu_hour: cheap\n");
  ASSERT_TRUE(BuildReport({run.path()}, &text).ok());
  EXPECT_TRUE(Contains(text, "  note: price not read from " + run.path() + "/config.yaml")) << text;
  EXPECT_TRUE(Contains(text, "(no price:")) << text;
}

// An elastic launch's record next to the metrics: the report adds the attempts, the goodput and the costs.
TEST(ReportCmdTest, ElasticRecordAddsGoodputAndCosts) {
  TempDir run;
  std::string metrics = kMetrics;
  metrics.replace(metrics.find("\"total_steps\":100"), 17, "\"total_steps\":100,\"global_batch\":10000");
  WriteFile(run.path() + "/metrics.jsonl", metrics);
  std::string text;
  ASSERT_TRUE(BuildReport({run.path()}, &text).ok());
  EXPECT_FALSE(Contains(text, "goodput")) << text;  // not an elastic launch
  WriteFile(
      run.path() + "/elastic.jsonl",
      R"({"kind":"attempt","attempt":0,"hosts":"a,b","world":2,"start":0,"end":1800,"noticed":1800,"reason":"done","lost":""}
)");
  ASSERT_TRUE(BuildReport({run.path(), "--price-spot", "1", "--price-on-demand", "3"}, &text).ok());
  EXPECT_TRUE(Contains(text, "  attempt 1: world 2 on a,b; steps 0 -> 100 (100 count); ended: done\n")) << text;
  EXPECT_TRUE(Contains(text, "  rank-hours     1.0000 held")) << text;
  // 1 rank-hour held at $1 for 1M samples (100 steps x 10000).
  EXPECT_TRUE(Contains(text, "  cost/1M spot   $1.0000 ")) << text;
  EXPECT_TRUE(Contains(text, "cost/1M o-d    $")) << text;
  WriteFile(run.path() + "/elastic.jsonl", "garbage\n{}\n");
  EXPECT_EQ(BuildReport({run.path()}, &text).code(), Status::Code::kDataLoss);
}

// Was: an end record before its start (a clock that jumped back) printed a negative wall time and GPU-hours, and a
// cost of $-inf for extreme times. Figures no run can have are shown as 0 with a note naming them.
TEST(ReportCmdTest, UnbelievableFiguresAreClampedWithANote) {
  TempDir run;
  WriteFile(run.path() + "/metrics.jsonl",
            R"({"kind":"start","time":-1e308,"restart":0,"resume_step":0,"world":2,"device":"cuda","total_steps":100}
{"kind":"train","epoch":0,"step":50,"time":900,"loss":0.75,"step_ms":-1e308}
{"kind":"end","time":1e308,"step":100,"status":"done"}
)");
  std::string text;
  ASSERT_TRUE(BuildReport({run.path(), "--price", "2.5"}, &text).ok());
  const std::string figures = text.substr(0, text.find("  note:"));
  EXPECT_FALSE(Contains(figures, "inf")) << text;
  EXPECT_FALSE(Contains(figures, "$-")) << text;
  EXPECT_FALSE(Contains(figures, " -0")) << text;
  EXPECT_FALSE(Contains(figures, "~-")) << text;
  EXPECT_FALSE(Contains(figures, " in -")) << text;  // an attempt's duration
  EXPECT_FALSE(Contains(figures, "e+")) << text;
  EXPECT_TRUE(Contains(text,
                       "  note: the wall time was inf in the records (a clock jump or a damaged record?): "
                       "shown as 0\n"))
      << text;
  EXPECT_TRUE(Contains(text, "  note: the mean step time was -1e+308")) << text;
  EXPECT_TRUE(Contains(text, "  note: attempt 1's duration was inf")) << text;
  EXPECT_TRUE(Contains(text, "$0.00 at $2.50")) << text;
}

TEST(ReportCmdTest, ArgumentErrors) {
  std::string text;
  Status st = BuildReport({}, &text);
  EXPECT_EQ(st.code(), Status::Code::kInvalidArgument);
  st = BuildReport({"runs/x", "--price", "-1"}, &text);
  EXPECT_EQ(st.code(), Status::Code::kInvalidArgument);
  EXPECT_TRUE(Contains(st.message(), "--price: expects a number >= 0, got '-1'")) << st.ToString();
  st = BuildReport({"runs/x", "--price"}, &text);
  EXPECT_EQ(st.code(), Status::Code::kInvalidArgument);
  st = BuildReport({"runs/x", "--bogus"}, &text);
  EXPECT_TRUE(Contains(st.message(), "unknown flag '--bogus'")) << st.ToString();
  st = BuildReport({"a", "b"}, &text);
  EXPECT_EQ(st.code(), Status::Code::kInvalidArgument);

  TempDir empty;
  st = BuildReport({empty.path()}, &text);
  EXPECT_EQ(st.code(), Status::Code::kNotFound);
  EXPECT_TRUE(Contains(st.message(), empty.path() + "/metrics.jsonl")) << st.ToString();

  ASSERT_TRUE(BuildReport({"--help"}, &text).ok());
  EXPECT_TRUE(Contains(text, "Usage: dtrain report [OPTIONS] [RUN_DIR]")) << text;
  EXPECT_TRUE(Contains(text, "--price P")) << text;
}

TEST(ReportCmdTest, BinaryPrintsSummaryAndExitCodes) {
  TempDir run;
  WriteFile(run.path() + "/metrics.jsonl", kMetrics);
  auto r = RunCommand(DtrainBin() + " report " + run.path() + " --price 4");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(Contains(r.output, "  status         done at step 100 of 100\n")) << r.output;
  EXPECT_TRUE(Contains(r.output, "  cost           $4.00 at $4.00 per GPU-hour\n")) << r.output;

  r = RunCommand(DtrainBin() + " report " + run.path() + "/nope");
  EXPECT_EQ(r.exit_code, kExitUsage) << r.output;
  EXPECT_TRUE(Contains(r.output, "dtrain: error: NotFound: no metrics file '" + run.path() + "/nope'")) << r.output;
}

}  // namespace
}  // namespace dtrain::launcher
