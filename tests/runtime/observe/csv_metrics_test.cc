// CsvMetricsWriter: the exact bytes of metrics.csv (header once, fixed columns, empty cells, quoting, numbers as
// metrics.jsonl writes them), appending across opens, and a file of other columns left untouched.

#include "runtime/observe/csv_metrics.h"

#include <gtest/gtest.h>

#include <cmath>
#include <string>

#include "tests/testing/subprocess.h"

namespace dtrain::runtime {
namespace {

using ::dtrain::testing::ReadFile;
using ::dtrain::testing::TempDir;
using ::dtrain::testing::WriteFile;

TEST(CsvMetricsTest, HeaderOnceFixedColumnsAndJsonlNumbers) {
  TempDir dir;
  const std::string path = dir.path() + "/metrics.csv";
  const std::vector<std::string> cols = {"kind", "step", "loss", "eval_loss", "verdict"};
  const JsonLine train = JsonLine()
                             .Add("kind", std::string("train"))
                             .Add("step", int64_t{10})
                             .Add("loss", 2.0 / 3.0)
                             .Add("not_a_column", 1.0)
                             .Add("verdict", std::string("input-bound: data wait 40%, raise \"workers\""));
  const JsonLine eval = JsonLine()
                            .Add("kind", std::string("eval"))
                            .Add("step", int64_t{10})
                            .Add("eval_loss", std::nan(""));  // null in jsonl: an empty cell
  {
    CsvMetricsWriter w;
    ASSERT_TRUE(w.Open(path, cols).ok());
    ASSERT_TRUE(w.Write(train).ok());
    ASSERT_TRUE(w.Write(eval).ok());
  }
  // The loss cell is the jsonl number's text (9 significant digits).
  EXPECT_NE(train.str().find("\"loss\":0.666666667"), std::string::npos) << train.str();
  const std::string want_rows =
      "train,10,0.666666667,,\"input-bound: data wait 40%, raise \"\"workers\"\"\"\n"
      "eval,10,,,\n";
  EXPECT_EQ(ReadFile(path), "kind,step,loss,eval_loss,verdict\n" + want_rows);
  // A second attempt appends rows under the same header (never truncates, never repeats it).
  {
    CsvMetricsWriter w;
    ASSERT_TRUE(w.Open(path, cols).ok());
    ASSERT_TRUE(w.Write(eval).ok());
  }
  EXPECT_EQ(ReadFile(path), "kind,step,loss,eval_loss,verdict\n" + want_rows + "eval,10,,,\n");
}

TEST(CsvMetricsTest, FileOfOtherColumnsIsLeftAlone) {
  TempDir dir;
  const std::string path = dir.path() + "/metrics.csv";
  WriteFile(path, "kind,step,old\ntrain,1,2\n");
  CsvMetricsWriter w;
  const Status st = w.Open(path, {"kind", "step", "loss"});
  EXPECT_EQ(st.code(), Status::Code::kFailedPrecondition);
  EXPECT_NE(st.message().find(path), std::string::npos) << st.ToString();
  EXPECT_NE(st.message().find("kind,step,loss"), std::string::npos) << st.ToString();
  EXPECT_EQ(ReadFile(path), "kind,step,old\ntrain,1,2\n");
  EXPECT_EQ(w.Write(JsonLine()).code(), Status::Code::kFailedPrecondition);
  // An empty file gets the header.
  WriteFile(path, "");
  ASSERT_TRUE(w.Open(path, {"kind"}).ok());
  ASSERT_TRUE(w.Write(JsonLine().Add("kind", std::string("train"))).ok());
  EXPECT_EQ(ReadFile(path), "kind\ntrain\n");
}

TEST(CsvMetricsTest, CellQuoting) {
  EXPECT_EQ(CsvCell("plain text"), "plain text");
  EXPECT_EQ(CsvCell("a,b"), "\"a,b\"");
  EXPECT_EQ(CsvCell("say \"hi\""), "\"say \"\"hi\"\"\"");
  EXPECT_EQ(CsvCell("two\nlines"), "\"two\nlines\"");
}

}  // namespace
}  // namespace dtrain::runtime
