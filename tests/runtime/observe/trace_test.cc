// TraceWriter: the file is valid Chrome-trace JSON (parsed back with protobuf's JSON parser) with
// the metadata rows and every recorded event, from several threads, and after an early return.

#include "runtime/observe/trace.h"

#include <google/protobuf/struct.pb.h>
#include <google/protobuf/util/json_util.h>
#include <gtest/gtest.h>

#include <map>
#include <string>
#include <thread>
#include <vector>

#include "tests/testing/subprocess.h"

namespace dtrain::runtime {
namespace {

using google::protobuf::Struct;
using google::protobuf::Value;

// The "traceEvents" array of a trace file; fails the test when the file is not valid JSON.
std::vector<Struct> LoadEvents(const std::string& path) {
  Struct root;
  const std::string text = testing::ReadFile(path);
  EXPECT_TRUE(google::protobuf::util::JsonStringToMessage(text, &root).ok()) << "not JSON: " << text;
  EXPECT_EQ(root.fields().at("displayTimeUnit").string_value(), "ms");
  std::vector<Struct> out;
  for (const Value& v : root.fields().at("traceEvents").list_value().values()) out.push_back(v.struct_value());
  return out;
}

std::string S(const Struct& s, const char* key) { return s.fields().at(key).string_value(); }
double N(const Struct& s, const char* key) { return s.fields().at(key).number_value(); }

TEST(TraceTest, WritesMetadataAndCompleteEvents) {
  testing::TempDir tmp;
  const std::string path = TraceFilePath(tmp.path() + "/run", 3);
  EXPECT_EQ(path, tmp.path() + "/run/trace/rank3.trace.json");
  {
    std::unique_ptr<TraceWriter> w;
    ASSERT_TRUE(TraceWriter::Create(path, 3, &w).ok());
    w->Record(TraceTrack::kCompute, "forward", "step", 1000.5, 250.25);
    JsonLine args;
    args.Add("bytes", int64_t{4096}).Add("bucket", int64_t{2});
    w->Record(TraceTrack::kComm, "all_reduce \"b2\"", "comm", 1100, 80, &args);
    ASSERT_TRUE(w->Close().ok());
    w->Record(TraceTrack::kHost, "after close", "step", 0, 1);  // ignored
    ASSERT_TRUE(w->Close().ok());
  }
  const std::vector<Struct> ev = LoadEvents(path);
  std::map<int, std::string> threads;
  std::vector<Struct> complete;
  for (const Struct& e : ev) {
    EXPECT_EQ(N(e, "pid"), 3);
    if (S(e, "ph") == "M" && S(e, "name") == "process_name") {
      EXPECT_EQ(S(e.fields().at("args").struct_value(), "name"), "rank 3");
    }
    if (S(e, "ph") == "M" && S(e, "name") == "thread_name") {
      threads[static_cast<int>(N(e, "tid"))] = S(e.fields().at("args").struct_value(), "name");
    }
    if (S(e, "ph") == "X") complete.push_back(e);
  }
  EXPECT_EQ(threads, (std::map<int, std::string>{{1, "host thread"}, {2, "compute stream"}, {3, "comm stream"}}));
  ASSERT_EQ(complete.size(), 2u);
  EXPECT_EQ(S(complete[0], "name"), "forward");
  EXPECT_EQ(S(complete[0], "cat"), "step");
  EXPECT_EQ(N(complete[0], "tid"), 2);
  EXPECT_EQ(N(complete[0], "ts"), 1000.5);
  EXPECT_EQ(N(complete[0], "dur"), 250.25);
  EXPECT_EQ(S(complete[1], "name"), "all_reduce \"b2\"");
  EXPECT_EQ(N(complete[1], "tid"), 3);
  EXPECT_EQ(N(complete[1].fields().at("args").struct_value(), "bytes"), 4096);
  EXPECT_EQ(N(complete[1].fields().at("args").struct_value(), "bucket"), 2);
}

TEST(TraceTest, RecordIsThreadSafe) {
  testing::TempDir tmp;
  const std::string path = tmp.path() + "/t.json";
  constexpr int kThreads = 4, kPerThread = 500;
  {
    std::unique_ptr<TraceWriter> w;
    ASSERT_TRUE(TraceWriter::Create(path, 0, &w).ok());
    std::vector<std::thread> threads;
    for (int t = 0; t < kThreads; ++t) {
      threads.emplace_back([&w, t] {
        for (int i = 0; i < kPerThread; ++i) {
          w->Record(static_cast<TraceTrack>(1 + t % 3), "t" + std::to_string(t), "x", i, 1);
        }
      });
    }
    for (auto& th : threads) th.join();
  }
  std::map<std::string, int> per_name;
  for (const Struct& e : LoadEvents(path)) {
    if (S(e, "ph") == "X") ++per_name[S(e, "name")];
  }
  ASSERT_EQ(per_name.size(), static_cast<size_t>(kThreads));
  for (const auto& [name, n] : per_name) EXPECT_EQ(n, kPerThread) << name;
}

// A trainer that returns an error unwinds its TraceWriter: the destructor must leave valid JSON.
Status FailingRun(const std::string& path) {
  std::unique_ptr<TraceWriter> w;
  Status st = TraceWriter::Create(path, 1, &w);
  if (!st.ok()) return st;
  TraceSpan step(w.get(), TraceTrack::kHost, "step 7", "step");
  return Status::Internal("collective failed");
}

TEST(TraceTest, ValidAfterEarlyReturnAndSpanTimesItsScope) {
  testing::TempDir tmp;
  const std::string path = tmp.path() + "/fail.json";
  EXPECT_EQ(FailingRun(path).code(), Status::Code::kInternal);
  int spans = 0;
  for (const Struct& e : LoadEvents(path)) {
    if (S(e, "ph") != "X") continue;
    ++spans;
    EXPECT_EQ(S(e, "name"), "step 7");
    EXPECT_EQ(N(e, "tid"), 1);
    EXPECT_GE(N(e, "dur"), 0);
    EXPECT_GT(N(e, "ts"), 1.5e15);  // Unix microseconds (after 2017)
  }
  EXPECT_EQ(spans, 1);

  TraceSpan off(nullptr, TraceTrack::kHost, "no writer", "step");  // a no-op
}

TEST(TraceTest, NowAdvancesAndWindow) {
  testing::TempDir tmp;
  std::unique_ptr<TraceWriter> w;
  ASSERT_TRUE(TraceWriter::Create(tmp.path() + "/n.json", 0, &w).ok());
  const double a = w->NowUs();
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  const double b = w->NowUs();
  EXPECT_GE(b - a, 19e3);
  EXPECT_LT(b - a, 5e6);

  EXPECT_FALSE(InTraceWindow(9, 10, 3));
  EXPECT_TRUE(InTraceWindow(10, 10, 3));
  EXPECT_TRUE(InTraceWindow(12, 10, 3));
  EXPECT_FALSE(InTraceWindow(13, 10, 3));
  EXPECT_FALSE(InTraceWindow(10, 10, 0));  // trace_steps 0 = off
}

TEST(TraceTest, CreateErrorNamesThePath) {
  testing::TempDir tmp;
  testing::WriteFile(tmp.path() + "/file", "x");
  std::unique_ptr<TraceWriter> w;
  const Status st = TraceWriter::Create(tmp.path() + "/file/trace/rank0.trace.json", 0, &w);
  EXPECT_EQ(st.code(), Status::Code::kIoError);
  EXPECT_NE(st.message().find(tmp.path() + "/file/trace"), std::string::npos) << st.ToString();
  EXPECT_EQ(w, nullptr);
}

}  // namespace
}  // namespace dtrain::runtime
