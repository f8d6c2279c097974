// Elastic goodput: a launcher record and a metrics file written by hand with known numbers, every figure asserted.

#include "runtime/observe/elastic_report.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace dtrain::runtime {
namespace {

// Three attempts: 3 ranks lose a host after logging step 12 (checkpoint 10); 2 ranks resume at 10 and are asked to grow
// at step 30 (its checkpoint); 3 ranks finish at step 50. Global batch 384 throughout. The restore record before the
// second start (the trainer writes it before its start record) must not extend the first attempt.
constexpr const char* kMetrics =
    R"({"kind":"start","time":1001,"restart":0,"resume_step":0,"world":3,"device":"cpu","total_steps":50,"global_batch":384}
{"kind":"first_step","step":1,"time":1002}
{"kind":"checkpoint","step":10,"time":1011,"stall_ms":0,"wait_ms":0,"async":0}
{"kind":"train","epoch":1,"step":12,"time":1013,"loss":1.0,"step_ms":1000}
{"kind":"restore","step":10,"time":1016,"restore_s":0.01,"bytes":100}
{"kind":"start","time":1016,"restart":1,"resume_step":10,"world":2,"device":"cpu","total_steps":50,"global_batch":384}
{"kind":"first_step","step":11,"time":1020}
{"kind":"checkpoint","step":30,"time":1039,"stall_ms":0,"wait_ms":0,"async":0}
{"kind":"end","time":1039,"step":30,"status":"preempted"}
{"kind":"start","time":1041,"restart":2,"resume_step":30,"world":3,"device":"cpu","total_steps":50,"global_batch":384}
{"kind":"first_step","step":31,"time":1043}
{"kind":"end","time":1057,"step":50,"status":"done"}
)";

constexpr const char* kElastic =
    R"({"kind":"attempt","attempt":0,"hosts":"a,b,c","world":3,"start":1000,"end":1015,"noticed":1014,"reason":"lost_host","lost":"c"}
{"kind":"attempt","attempt":1,"hosts":"a,b","world":2,"start":1015,"end":1040,"noticed":1038,"reason":"grow","lost":""}
{"kind":"attempt","attempt":2,"hosts":"a,b,c","world":3,"start":1040,"end":1060,"noticed":1060,"reason":"done","lost":""}
)";

TEST(ElasticReportTest, GoodputRecoveryAndCostsOfAShrinkAndAGrow) {
  RunSummary run;
  ASSERT_TRUE(SummarizeMetrics(kMetrics, "metrics.jsonl", &run).ok());
  std::vector<ElasticAttemptRecord> records;
  ASSERT_TRUE(ParseElasticAttempts(kElastic, "elastic.jsonl", &records).ok());
  ASSERT_EQ(records.size(), 3u);
  EXPECT_EQ(records[0].lost, "c");
  EXPECT_EQ(records[1].reason, "grow");
  const ElasticSummary s = SummarizeElastic(records, run);
  ASSERT_EQ(s.attempts.size(), 3u);
  // Attempt 1: steps 0 -> 12, of which 10 count (attempt 2 resumes at 10); 1 s per step ((1013 - 1002) / 11).
  EXPECT_EQ(s.attempts[0].counted_steps, 10);
  EXPECT_DOUBLE_EQ(s.attempts[0].counted_s, 10);
  EXPECT_DOUBLE_EQ(s.attempts[0].recover_s, -1);
  EXPECT_DOUBLE_EQ(run.attempts[1].restart_gap_s, 1016 - 1013);
  // Attempt 2: 10 -> 30, all count, 2 recomputed; recovered 1020 - 1014 = 6 s after the launcher noticed.
  EXPECT_EQ(s.attempts[1].counted_steps, 20);
  EXPECT_EQ(s.attempts[1].steps_recomputed, 2);
  EXPECT_DOUBLE_EQ(s.attempts[1].counted_s, 20);
  EXPECT_DOUBLE_EQ(s.attempts[1].recover_s, 6);
  // Attempt 3: 30 -> 50 at (1057 - 1043) / 19 s per step; recovered 1043 - 1038 = 5 s after the grow request.
  EXPECT_EQ(s.attempts[2].counted_steps, 20);
  EXPECT_DOUBLE_EQ(s.attempts[2].counted_s, 20 * 14.0 / 19.0);
  EXPECT_DOUBLE_EQ(s.attempts[2].recover_s, 5);
  EXPECT_DOUBLE_EQ(s.wall_s, 60);
  EXPECT_DOUBLE_EQ(s.counted_s, 30 + 20 * 14.0 / 19.0);
  EXPECT_DOUBLE_EQ(s.goodput, (30 + 20 * 14.0 / 19.0) / 60);
  EXPECT_EQ(s.samples, 50 * 384);
  // Held: 3 x 15 + 2 x 25 + 3 x 20 = 155 rank-seconds; counted: 3 x 10 + 2 x 20 + 3 x 20 x 14 / 19.
  EXPECT_DOUBLE_EQ(s.rank_hours, 155.0 / 3600);
  EXPECT_NEAR(s.counted_rank_hours, (30 + 40 + 60 * 14.0 / 19.0) / 3600, 1e-12);

  const std::string text = FormatElasticSummary(s, /*price_on_demand=*/3.0, /*price_spot=*/1.0);
  EXPECT_NE(text.find("attempt 2: world 2 on a,b; steps 10 -> 30 (20 count, 2 recomputed); recovered in 6.0 s; "
                      "ended: grow"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("ended: lost_host (c)"), std::string::npos) << text;
  EXPECT_NE(text.find("goodput        74.6%"), std::string::npos) << text;
  // Spot: 155 / 3600 rank-hours x $1 / 0.0192 M samples = $2.2425.
  EXPECT_NE(text.find("cost/1M spot   $2.2425"), std::string::npos) << text;
}

TEST(ElasticReportTest, ANewLaunchInTheSameDirectoryStartsOverAndABadLineIsDataLoss) {
  std::vector<ElasticAttemptRecord> records;
  const std::string two_runs = std::string(kElastic) + kElastic;
  ASSERT_TRUE(ParseElasticAttempts(two_runs, "e.jsonl", &records).ok());
  EXPECT_EQ(records.size(), 3u);
  ASSERT_TRUE(ParseElasticAttempts(std::string(kElastic) + "{\"kind\":\"atte", "e.jsonl", &records).ok());
  EXPECT_EQ(records.size(), 3u);  // a cut last line is ignored
  const Status st = ParseElasticAttempts("not json\n" + std::string(kElastic), "e.jsonl", &records);
  EXPECT_EQ(st.code(), Status::Code::kDataLoss);
  EXPECT_NE(st.message().find("e.jsonl:1"), std::string::npos) << st.message();
}

}  // namespace
}  // namespace dtrain::runtime
