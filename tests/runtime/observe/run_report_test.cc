// Run summary: metrics files written by hand with known numbers, every figure asserted.

#include "runtime/observe/run_report.h"

#include <gtest/gtest.h>

#include <string>

#include "tests/testing/subprocess.h"

namespace dtrain::runtime {
namespace {

// Two attempts of 4 GPUs: preempted at step 260 (checkpoint at 200), resumed from 200 after 60 s, done at 400.
constexpr const char* kPreemptedRun =
    R"({"kind":"start","time":1000,"restart":0,"resume_step":0,"world":4,"device":"cuda","total_steps":1000}
{"kind":"train","epoch":0,"step":100,"time":1100,"loss":2.0,"lr":0.001,"samples_per_s":5000,"step_ms":100,"data_ms":5,"fwd_bwd_ms":80,"comm_exposed_ms":5,"optim_ms":5,"ckpt_stall_ms":0}
{"kind":"checkpoint","step":200,"time":1200,"stall_ms":1500,"wait_ms":500,"async":1}
{"kind":"train","epoch":0,"step":250,"time":1250,"loss":1.5,"lr":0.001,"samples_per_s":5000,"step_ms":120,"data_ms":5,"fwd_bwd_ms":80,"comm_exposed_ms":5,"optim_ms":5,"ckpt_stall_ms":0}
{"kind":"end","time":1300,"step":260,"status":"preempted"}
{"kind":"start","time":1360,"restart":1,"resume_step":200,"world":4,"device":"cuda","total_steps":1000}
{"kind":"train","epoch":1,"step":300,"time":1400,"loss":1.0,"lr":0.001,"samples_per_s":5000,"step_ms":80,"data_ms":5,"fwd_bwd_ms":60,"comm_exposed_ms":5,"optim_ms":5,"ckpt_stall_ms":0}
{"kind":"eval","epoch":1,"step":300,"time":1410,"eval_loss":1.1,"eval_accuracy":0.875}
{"kind":"checkpoint","step":400,"time":1500,"stall_ms":2500,"wait_ms":0,"async":1}
{"kind":"end","time":1600,"step":400,"status":"done"}
)";

TEST(RunReportTest, PreemptedAndResumedRun) {
  RunSummary s;
  ASSERT_TRUE(SummarizeMetrics(kPreemptedRun, "m.jsonl", &s).ok());
  ASSERT_EQ(s.attempts.size(), 2u);
  EXPECT_DOUBLE_EQ(s.wall_s, 600);  // 1000 -> 1600
  // (1300 - 1000) x 4 + (1600 - 1360) x 4 = 2160 GPU-seconds.
  EXPECT_DOUBLE_EQ(s.gpu_hours, 2160.0 / 3600.0);
  EXPECT_EQ(s.preemptions, 1);
  EXPECT_EQ(s.restarts, 1);
  EXPECT_EQ(s.steps_recomputed, 60);      // last logged step 260 - resume step 200
  EXPECT_DOUBLE_EQ(s.mean_step_ms, 100);  // (100 + 120 + 80) / 3
  EXPECT_DOUBLE_EQ(s.recompute_s, 6);     // 60 steps x 100 ms
  EXPECT_EQ(s.checkpoints, 2);
  EXPECT_DOUBLE_EQ(s.checkpoint_stall_s, 4.0);
  EXPECT_DOUBLE_EQ(s.checkpoint_wait_s, 0.5);
  EXPECT_DOUBLE_EQ(s.restart_s, 60);  // 1300 -> 1360
  EXPECT_EQ(s.final_step, 400);
  EXPECT_EQ(s.total_steps, 1000);
  EXPECT_DOUBLE_EQ(s.last_loss, 1.0);
  EXPECT_DOUBLE_EQ(s.eval_loss, 1.1);
  EXPECT_DOUBLE_EQ(s.eval_accuracy, 0.875);
  EXPECT_FALSE(s.has_eval_ppl);  // a classifier's record
  EXPECT_EQ(s.skipped_lines, 0);
  EXPECT_FALSE(s.truncated_last_line);
  EXPECT_EQ(s.attempts[0].end_status, "preempted");
  EXPECT_EQ(s.attempts[0].last_step, 260);
  EXPECT_EQ(s.attempts[1].resume_step, 200);
  EXPECT_EQ(s.attempts[1].restart, 1);
  EXPECT_EQ(s.attempts[1].last_step, 400);

  EXPECT_EQ(FormatRunSummary(s, 2.5),
            "run summary: m.jsonl\n"
            "  status         done at step 400 of 1000\n"
            "  wall time      10m 00s (first start to last record)\n"
            "  GPU-hours      0.600 (2 attempts)\n"
            "  cost           $1.50 at $2.50 per GPU-hour\n"
            "  preemptions    1\n"
            "  restarts       1, 1m 00s restarting\n"
            "  recomputed     60 steps, ~6.0 s (a lower bound: see dtrain report --help)\n"
            "  checkpointing  4.0 s stalled in 2 checkpoints, 0.5 s waiting for async saves\n"
            "  loss           1.0000; eval loss 1.1000, accuracy 87.50%\n"
            "  attempt 1      world 4 cuda, steps 0 -> 260 in 5m 00s, preempted\n"
            "  attempt 2      world 4 cuda, resumed at 200 (60 recomputed) after 1m 00s, steps 200 -> 400 in 4m 00s, "
            "done\n");
  EXPECT_NE(FormatRunSummary(s, 0).find("  cost           (no price: set run.price_per_gpu_hour or pass --price)\n"),
            std::string::npos);
}

// A CPU run killed without an end record, restarted fresh (no checkpoint); the killed write was
// continued on the same line by the next start, and the second attempt's last line is cut short.
constexpr const char* kKilledRun =
    R"({"kind":"start","time":100,"restart":0,"resume_step":0,"world":2,"device":"cpu","total_steps":500}
{"kind":"train","epoch":0,"step":50,"time":150,"loss":1.0,"step_ms":10}
{"kind":"train","epoch":0,"step":100,"time":200,"loss":0.8,"step_ms":20}
{"kind":"train","ep{"kind":"start","time":260,"restart":1,"resume_step":0,"world":2,"device":"cpu","total_steps":500}
{"kind":"train","epoch":0,"step":150,"time":300,"loss":0.5,"step_ms":30}
{"kind":"train","epoch":0,"st)";

TEST(RunReportTest, KilledRunWithTruncatedAndGluedLines) {
  RunSummary s;
  ASSERT_TRUE(SummarizeMetrics(kKilledRun, "k.jsonl", &s).ok());
  ASSERT_EQ(s.attempts.size(), 2u);
  EXPECT_EQ(s.skipped_lines, 1);  // the cut "train" record; its line's "start" is kept
  EXPECT_TRUE(s.truncated_last_line);
  EXPECT_DOUBLE_EQ(s.wall_s, 200);                               // 100 -> 300
  EXPECT_DOUBLE_EQ(s.gpu_hours, (100.0 * 2 + 40.0 * 2) / 3600);  // rank-hours
  EXPECT_EQ(s.preemptions, 0);
  EXPECT_EQ(s.restarts, 1);
  EXPECT_EQ(s.steps_recomputed, 100);  // fresh restart: all 100 logged steps again
  EXPECT_DOUBLE_EQ(s.mean_step_ms, 20);
  EXPECT_DOUBLE_EQ(s.recompute_s, 2);
  EXPECT_DOUBLE_EQ(s.restart_s, 60);  // 200 -> 260
  EXPECT_EQ(s.checkpoints, 0);
  EXPECT_EQ(s.final_step, 150);
  EXPECT_DOUBLE_EQ(s.last_loss, 0.5);
  EXPECT_FALSE(s.has_eval);
  EXPECT_EQ(s.attempts[0].end_status, "");
  EXPECT_EQ(s.attempts[0].last_step, 100);

  const std::string text = FormatRunSummary(s, 0.1);
  EXPECT_NE(text.find("  status         no end record (killed, or still running) at step 150 of 500\n"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("  rank-hours     0.078 (2 attempts)\n"), std::string::npos) << text;
  EXPECT_NE(text.find("  cost           $0.01 at $0.10 per rank-hour\n"), std::string::npos) << text;
  EXPECT_NE(text.find("steps 0 -> 100 in 1m 40s, no end record\n"), std::string::npos) << text;
  EXPECT_NE(text.find("  note: ignored a truncated last line"), std::string::npos) << text;
  EXPECT_NE(text.find("  note: skipped 1 unreadable line(s)\n"), std::string::npos) << text;
}

TEST(RunReportTest, FirstStartOfAContinuedRunCountsAsRestart) {
  RunSummary s;
  ASSERT_TRUE(SummarizeMetrics(R"({"kind":"start","time":0,"restart":2,"resume_step":40,"world":1,"device":"cuda"}
{"kind":"end","time":3600,"step":90,"status":"failed"})",
                               "c.jsonl", &s)
                  .ok());
  EXPECT_EQ(s.restarts, 1);
  EXPECT_EQ(s.steps_recomputed, 0);  // the previous attempt is not in this file
  EXPECT_DOUBLE_EQ(s.gpu_hours, 1.0);
  EXPECT_EQ(s.final_step, 90);
  EXPECT_EQ(s.total_steps, 0);
  EXPECT_NE(FormatRunSummary(s, 0).find("  status         failed at step 90\n"), std::string::npos);
}

// Only real restarts count: a manual re-run of a finished run (a longer schedule) is a continuation, and a fresh
// start in the same directory (resume never --overwrite) begins a new run whose summary is its own.
TEST(RunReportTest, ReRunsOfAFinishedRunAndFreshStartsAreNotRestarts) {
  RunSummary s;
  ASSERT_TRUE(SummarizeMetrics(
                  R"({"kind":"start","time":0,"restart":0,"resume_step":0,"world":2,"device":"cpu","total_steps":50}
{"kind":"end","time":100,"step":50,"status":"done"}
{"kind":"start","time":500,"restart":0,"resume_step":50,"world":2,"device":"cpu","total_steps":80}
{"kind":"end","time":560,"step":80,"status":"done"}
)",
                  "a.jsonl", &s)
                  .ok());
  EXPECT_EQ(s.attempts.size(), 2u);
  EXPECT_EQ(s.restarts, 0);
  EXPECT_DOUBLE_EQ(s.restart_s, 0);  // the 400 s between the runs are not time spent restarting

  ASSERT_TRUE(SummarizeMetrics(
                  R"({"kind":"start","time":0,"restart":0,"resume_step":0,"world":2,"device":"cpu","total_steps":50}
{"kind":"end","time":100,"step":30,"status":"failed"}
{"kind":"start","time":130,"restart":0,"resume_step":20,"world":2,"device":"cpu","total_steps":50}
{"kind":"end","time":200,"step":50,"status":"done"}
{"kind":"start","time":900,"restart":0,"resume_step":0,"world":4,"device":"cpu","total_steps":50}
{"kind":"end","time":950,"step":50,"status":"done"}
)",
                  "b.jsonl", &s)
                  .ok());
  ASSERT_EQ(s.attempts.size(), 1u);  // the fresh start at 900: a new run
  EXPECT_EQ(s.attempts[0].world, 4);
  EXPECT_EQ(s.restarts, 0);
  EXPECT_DOUBLE_EQ(s.wall_s, 50);
}

TEST(RunReportTest, GpuUtilizationIsWeightedByTheIntervals) {
  RunSummary s;
  ASSERT_TRUE(SummarizeMetrics(
                  R"({"kind":"start","time":0,"restart":0,"resume_step":0,"world":1,"device":"cuda","total_steps":30}
{"kind":"train","step":10,"time":10,"gpu_util_pct":20}
{"kind":"train","step":20,"time":40,"gpu_util_pct":100}
{"kind":"train","step":30,"time":50,"loss":1.0}
{"kind":"end","time":50,"step":30,"status":"done"}
)",
                  "g.jsonl", &s)
                  .ok());
  // 10 s at 20% and 30 s at 100%: 32 of 40 s busy; the record without telemetry adds no time.
  EXPECT_DOUBLE_EQ(s.attempts[0].gpu_busy_s, 32.0);
  EXPECT_DOUBLE_EQ(s.attempts[0].gpu_timed_s, 40.0);
  const std::string text = FormatRunSummary(s, 0);
  EXPECT_NE(text.find("  gpu busy       80% (NVML utilization, time-weighted over 40.0 s of logged training)\n"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find(", done, gpu 80% busy\n"), std::string::npos) << text;
}

TEST(RunReportTest, Errors) {
  RunSummary s;
  Status st = LoadRunSummary("/nonexistent/run/metrics.jsonl", &s);
  EXPECT_EQ(st.code(), Status::Code::kNotFound);
  EXPECT_NE(st.message().find("/nonexistent/run/metrics.jsonl"), std::string::npos) << st.ToString();

  st = SummarizeMetrics("", "e.jsonl", &s);
  EXPECT_EQ(st.code(), Status::Code::kDataLoss);
  EXPECT_NE(st.message().find("e.jsonl"), std::string::npos) << st.ToString();

  st = SummarizeMetrics("\n{\"kind\":\"train\",\"step\":1,\"time\":5}\n", "b.jsonl", &s);
  EXPECT_EQ(st.code(), Status::Code::kDataLoss);
  EXPECT_NE(st.message().find("b.jsonl:2: a 'train' record before the first 'start' record"), std::string::npos)
      << st.ToString();

  RunSummary empty;
  empty.source = "x.jsonl";
  EXPECT_EQ(FormatRunSummary(empty, 1), "run summary: x.jsonl: no attempts\n");

  testing::TempDir tmp;
  testing::WriteFile(tmp.path() + "/metrics.jsonl", kPreemptedRun);
  ASSERT_TRUE(LoadRunSummary(tmp.path() + "/metrics.jsonl", &s).ok());
  EXPECT_EQ(s.source, tmp.path() + "/metrics.jsonl");
  EXPECT_EQ(s.final_step, 400);
}

// A token model's eval record carries eval_ppl: the summary's loss row shows the perplexity instead of the accuracy.
TEST(RunReportTest, TokenModelEvalShowsPerplexity) {
  const std::string jsonl =
      R"({"kind":"start","time":1000,"restart":0,"resume_step":0,"world":1,"device":"cpu","total_steps":10}
{"kind":"train","epoch":1,"step":10,"time":1010,"loss":2.5,"step_ms":10}
{"kind":"eval","epoch":1,"step":10,"time":1011,"eval_loss":2.25,"eval_accuracy":0.4,"eval_ppl":9.48773584,"eval_s":0.5}
{"kind":"end","time":1012,"step":10,"status":"done"}
)";
  RunSummary s;
  ASSERT_TRUE(SummarizeMetrics(jsonl, "t.jsonl", &s).ok());
  EXPECT_TRUE(s.has_eval_ppl);
  EXPECT_DOUBLE_EQ(s.eval_ppl, 9.48773584);
  const std::string text = FormatRunSummary(s, 0);
  EXPECT_NE(text.find("  loss           2.5000; eval loss 2.2500, ppl 9.49\n"), std::string::npos) << text;
}

TEST(RunReportTest, FormatDuration) {
  EXPECT_EQ(FormatDuration(0), "0.0 s");
  EXPECT_EQ(FormatDuration(45.24), "45.2 s");
  EXPECT_EQ(FormatDuration(185), "3m 05s");
  EXPECT_EQ(FormatDuration(7623), "2h 07m 03s");
}

}  // namespace
}  // namespace dtrain::runtime
