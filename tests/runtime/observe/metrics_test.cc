// JsonLine / JsonQuote / MetricsWriter: the exact bytes of metrics.jsonl lines (keys in order, number
// formats, NaN/Inf as null, escaping), and a file written by MetricsWriter read back by run_report.

#include "runtime/observe/metrics.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <string>

#include "runtime/observe/run_report.h"
#include "tests/testing/subprocess.h"

namespace dtrain::runtime {
namespace {

TEST(JsonLineTest, KeysInInsertionOrderWithTheirTypes) {
  const std::string line = JsonLine()
                               .Add("kind", std::string("train"))
                               .Add("step", int64_t{42})
                               .Add("loss", 2.5)
                               .Add("lr", 0.001)
                               .Add("big", int64_t{4611686018427387904})  // 2^62: exact, not a double
                               .Add("neg", int64_t{-7})
                               .str();
  EXPECT_EQ(line, R"({"kind":"train","step":42,"loss":2.5,"lr":0.001,"big":4611686018427387904,"neg":-7})");
  EXPECT_EQ(JsonLine().str(), "{}");
}

TEST(JsonLineTest, DoublesKeepNineSignificantDigitsAndThirteenForUnixTimes) {
  EXPECT_EQ(JsonLine().Add("x", static_cast<double>(0.1f)).str(), R"({"x":0.100000001})");  // a float, exactly
  EXPECT_EQ(JsonLine().Add("x", 1.0 / 3.0).str(), R"({"x":0.333333333})");
  EXPECT_EQ(JsonLine().Add("x", 1e-5).str(), R"({"x":1e-05})");
  EXPECT_EQ(JsonLine().Add("time", 1764554313.1234567).str(), R"({"time":1764554313.123})");
  EXPECT_EQ(JsonLine().Add("x", 3.0).str(), R"({"x":3.0})");  // stays a float for readers
}

TEST(JsonLineTest, NanAndInfinityAreNull) {
  const std::string line = JsonLine()
                               .Add("nan", std::numeric_limits<double>::quiet_NaN())
                               .Add("inf", std::numeric_limits<double>::infinity())
                               .Add("ninf", -std::numeric_limits<double>::infinity())
                               .str();
  EXPECT_EQ(line, R"({"nan":null,"inf":null,"ninf":null})");
}

TEST(JsonLineTest, AKeyAddedAgainReplacesItsValueInPlace) {
  EXPECT_EQ(JsonLine().Add("a", int64_t{1}).Add("b", int64_t{2}).Add("a", int64_t{3}).str(), R"({"a":3,"b":2})");
}

TEST(JsonQuoteTest, EscapesQuotesBackslashesAndControlBytesAndRepairsBadUtf8) {
  EXPECT_EQ(JsonQuote("a\"b\\c"), R"("a\"b\\c")");
  EXPECT_EQ(JsonQuote("l1\nl2\tx\r\x01"), R"("l1\nl2\tx\r\u0001")");
  EXPECT_EQ(JsonQuote("h\xc3\xa9llo"), "\"h\xc3\xa9llo\"");  // valid UTF-8 passes as is
  EXPECT_EQ(JsonQuote("bad\xff"), "\"bad\xef\xbf\xbd\"");    // U+FFFD instead of a byte JSON cannot hold
  EXPECT_EQ(JsonLine().Add("k\"", std::string("v\xff")).str(), "{\"k\\\"\":\"v\xef\xbf\xbd\"}");
}

TEST(MetricsWriterTest, AppendsLinesThatRunReportReadsBack) {
  testing::TempDir dir;
  const std::string path = dir.path() + "/metrics.jsonl";
  {
    MetricsWriter w;
    EXPECT_EQ(w.Write(JsonLine()).code(), Status::Code::kFailedPrecondition);
    ASSERT_TRUE(w.Open(path).ok());
    ASSERT_TRUE(w.Write(JsonLine()
                            .Add("kind", std::string("start"))
                            .Add("time", 1000.0)
                            .Add("restart", int64_t{0})
                            .Add("resume_step", int64_t{0})
                            .Add("world", int64_t{2})
                            .Add("device", std::string("cpu"))
                            .Add("total_steps", int64_t{20}))
                    .ok());
    ASSERT_TRUE(w.Write(JsonLine()
                            .Add("kind", std::string("train"))
                            .Add("step", int64_t{10})
                            .Add("time", 1010.0)
                            .Add("loss", 1.25)
                            .Add("step_ms", 40.0))
                    .ok());
  }
  {
    MetricsWriter w;  // a restart appends
    ASSERT_TRUE(w.Open(path).ok());
    ASSERT_TRUE(w.Write(JsonLine()
                            .Add("kind", std::string("train"))
                            .Add("step", int64_t{20})
                            .Add("time", 1020.0)
                            .Add("loss", std::nan(""))  // a diverged loss: null, not a number
                            .Add("step_ms", 60.0))
                    .ok());
    ASSERT_TRUE(w.Write(JsonLine()
                            .Add("kind", std::string("end"))
                            .Add("step", int64_t{20})
                            .Add("time", 1030.0)
                            .Add("status", std::string("done")))
                    .ok());
  }
  EXPECT_EQ(testing::ReadFile(path),
            "{\"kind\":\"start\",\"time\":1000.0,\"restart\":0,\"resume_step\":0,\"world\":2,\"device\":\"cpu\","
            "\"total_steps\":20}\n"
            "{\"kind\":\"train\",\"step\":10,\"time\":1010.0,\"loss\":1.25,\"step_ms\":40.0}\n"
            "{\"kind\":\"train\",\"step\":20,\"time\":1020.0,\"loss\":null,\"step_ms\":60.0}\n"
            "{\"kind\":\"end\",\"step\":20,\"time\":1030.0,\"status\":\"done\"}\n");
  RunSummary s;
  ASSERT_TRUE(LoadRunSummary(path, &s).ok());
  ASSERT_EQ(s.attempts.size(), 1u);
  EXPECT_DOUBLE_EQ(s.wall_s, 30);
  EXPECT_DOUBLE_EQ(s.gpu_hours, 30.0 * 2 / 3600.0);
  EXPECT_EQ(s.final_step, 20);
  EXPECT_EQ(s.total_steps, 20);
  EXPECT_EQ(s.attempts[0].end_status, "done");
  EXPECT_TRUE(s.has_loss);
  EXPECT_DOUBLE_EQ(s.last_loss, 1.25);  // the null loss is no number
  EXPECT_DOUBLE_EQ(s.mean_step_ms, 50);
  EXPECT_EQ(s.skipped_lines, 0);
}

TEST(MetricsWriterTest, OpenNamesAPathThatCannotBeCreated) {
  MetricsWriter w;
  const Status st = w.Open("/nonexistent-dir-dtrain/metrics.jsonl");
  EXPECT_EQ(st.code(), Status::Code::kIoError);
  EXPECT_NE(st.message().find("cannot open metrics file '/nonexistent-dir-dtrain/metrics.jsonl'"), std::string::npos)
      << st.message();
}

}  // namespace
}  // namespace dtrain::runtime
