// The text exposition format (version 0.0.4) as Prometheus parses it: HELP/TYPE once per name, label escaping,
// value spelling, invalid names left out.

#include "runtime/observe/prometheus_text.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>

namespace dtrain::runtime {
namespace {

TEST(PrometheusText, HelpAndTypeOncePerNameThenItsSamplesInOrderOfFirstAppearance) {
  const std::vector<PromSample> samples = {
      {"dtrain_loss", "Training loss", false, {{"rank", "0"}}, 0.5},
      {"dtrain_steps_total", "Steps", true, {}, 42},
      {"dtrain_loss", "ignored: the first sample's help counts", false, {{"rank", "1"}}, 0.25},
  };
  EXPECT_EQ(FormatPrometheusText(samples, 0),
            "# HELP dtrain_loss Training loss\n"
            "# TYPE dtrain_loss gauge\n"
            "dtrain_loss{rank=\"0\"} 0.5\n"
            "dtrain_loss{rank=\"1\"} 0.25\n"
            "# HELP dtrain_steps_total Steps\n"
            "# TYPE dtrain_steps_total counter\n"
            "dtrain_steps_total 42\n");
}

TEST(PrometheusText, LabelValuesEscapeBackslashQuoteAndNewlineHelpEscapesBackslashAndNewline) {
  EXPECT_EQ(EscapePromLabelValue("a\\b\"c\nd"), "a\\\\b\\\"c\\nd");
  const std::vector<PromSample> samples = {
      {"m", "line one\nback\\slash \"quoted\"", false, {{"host", "n\"1\\\n"}}, 1},
  };
  EXPECT_EQ(FormatPrometheusText(samples, 0),
            "# HELP m line one\\nback\\\\slash \"quoted\"\n"
            "# TYPE m gauge\n"
            "m{host=\"n\\\"1\\\\\\n\"} 1\n");
}

TEST(PrometheusText, ValuesKeepFullPrecisionAndSpellNanAndInfinities) {
  const double inf = std::numeric_limits<double>::infinity();
  const std::vector<PromSample> samples = {
      {"a", "", false, {{"k", "1"}}, 0.1},  {"a", "", false, {{"k", "2"}}, std::nan("")},
      {"a", "", false, {{"k", "3"}}, inf},  {"a", "", false, {{"k", "4"}}, -inf},
      {"a", "", false, {{"k", "5"}}, 1e21},
  };
  const std::string text = FormatPrometheusText(samples, 0);
  EXPECT_NE(text.find("a{k=\"1\"} 0.10000000000000001\n"), std::string::npos) << text;
  EXPECT_NE(text.find("a{k=\"2\"} NaN\n"), std::string::npos) << text;
  EXPECT_NE(text.find("a{k=\"3\"} +Inf\n"), std::string::npos) << text;
  EXPECT_NE(text.find("a{k=\"4\"} -Inf\n"), std::string::npos) << text;
  EXPECT_NE(text.find("a{k=\"5\"} 1e+21\n"), std::string::npos) << text;
}

TEST(PrometheusText, AgeSamplesAreSecondsSinceTheirUnixTime) {
  PromSample age{"dtrain_last_checkpoint_age_seconds", "age", false, {}, 1000.0, /*age_of_unix_time=*/true};
  EXPECT_EQ(FormatPrometheusText({age}, 1012.5),
            "# HELP dtrain_last_checkpoint_age_seconds age\n"
            "# TYPE dtrain_last_checkpoint_age_seconds gauge\n"
            "dtrain_last_checkpoint_age_seconds 12.5\n");
}

TEST(PrometheusText, NamesFollowTheGrammar) {
  EXPECT_TRUE(ValidPromName("dtrain_step_seconds", false));
  EXPECT_TRUE(ValidPromName("job:rate5m", false));
  EXPECT_TRUE(ValidPromName("_x1", true));
  EXPECT_FALSE(ValidPromName("", false));
  EXPECT_FALSE(ValidPromName("1abc", false));
  EXPECT_FALSE(ValidPromName("a-b", false));
  EXPECT_FALSE(ValidPromName("a:b", true));
  EXPECT_FALSE(ValidPromName("__name__", true));
}

TEST(PrometheusText, InvalidNamesAndDuplicateSeriesAreLeftOut) {
  const std::vector<PromSample> samples = {
      {"bad-name", "", false, {}, 1},
      {"ok", "", false, {{"bad label", "x"}}, 2},
      {"ok", "", false, {{"l", "x"}}, 3},
      {"ok", "", false, {{"l", "x"}}, 4},  // the same series again: the first one stays
  };
  EXPECT_EQ(FormatPrometheusText(samples, 0), "# HELP ok \n# TYPE ok gauge\nok{l=\"x\"} 3\n");
}

}  // namespace
}  // namespace dtrain::runtime
