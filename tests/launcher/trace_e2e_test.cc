// The Chrome trace of a real 2-rank CPU run under `dtrain launch` (run.trace_steps): every rank writes a
// valid file whose comm track holds one span per gradient bucket per traced step, in launch order, and
// whose compute track holds the forward+backward and optimizer spans of each traced step; under ZeRO-1 the
// comm track holds the reduce-scatters and the all-gather.

#include <gtest/gtest.h>

#include <fstream>
#include <string>
#include <vector>

#include "tests/testing/subprocess.h"

namespace dtrain::testing {
namespace {

const std::string kData = ::dtrain::testing::kFashionMnistDir;
const std::string kCiConfig = std::string(DT_SOURCE_DIR) + "/configs/fashion_mnist_mlp_ci.yaml";

// The events of one trace file whose "tid" is `tid` (the file is one event per line, as TraceWriter writes it).
std::vector<std::string> EventsOn(const std::string& trace, int tid) {
  std::vector<std::string> out;
  size_t pos = 0;
  const std::string key = "\"tid\":" + std::to_string(tid);
  while ((pos = trace.find("{\"name\":", pos)) != std::string::npos) {
    const size_t end = trace.find('}', trace.find("\"tid\":", pos));
    const std::string ev = trace.substr(pos, end - pos + 1);
    if (ev.find("\"ph\":\"X\"") != std::string::npos && ev.find(key) != std::string::npos) out.push_back(ev);
    pos = end;
  }
  return out;
}

// 6 steps of the CI MLP on 2 CPU ranks under `dtrain launch`, 4 KiB buckets, steps 3 and 4 traced, plus `extra`.
ProcessResult RunTracedMlp(const TempDir& dir, const std::string& extra) {
  return RunCommand(DtrainBin() + " launch --nproc-per-node 2 " + kCiConfig +
                    " --set train.device=cpu --set train.max_steps=6 --set schedule.warmup_steps=0" +
                    " --set train.eval=false --set checkpoint.enabled=false --set dist.bucket_mb=0.004" +
                    " --set run.trace_start=2 --set run.trace_steps=2 --set run.dir=" + dir.path() + "/run" + extra);
}

TEST(TraceE2E, TwoRanksTraceEveryBucketAllReduceAndTheStreamSpans) {
  DT_SKIP_WITHOUT_FASHION_MNIST();
  TempDir dir;
  // Buckets of >= 4 KiB from the end of the MLP's gradients: {fc3}, {fc2}, {fc1} (each layer's weight passes
  // the size); steps 3 and 4 traced.
  ProcessResult r = RunTracedMlp(dir, "");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  for (int rank = 0; rank < 2; ++rank) {
    const std::string trace = ReadFile(dir.path() + "/run/trace/rank" + std::to_string(rank) + ".trace.json");
    ASSERT_NE(trace.find("],\"displayTimeUnit\":\"ms\"}"), std::string::npos) << "unterminated trace of rank " << rank;
    const auto comm = EventsOn(trace, 3);
    ASSERT_EQ(comm.size(), 6u) << "rank " << rank << ": 3 buckets x 2 steps\n" << trace;
    for (size_t i = 0; i < comm.size(); ++i) {
      EXPECT_NE(comm[i].find("\"name\":\"all-reduce bucket " + std::to_string(i % 3) + "\""), std::string::npos)
          << comm[i];
      EXPECT_NE(comm[i].find("\"MiB\":"), std::string::npos) << comm[i];
    }
    const auto compute = EventsOn(trace, 2);
    ASSERT_EQ(compute.size(), 4u) << trace;
    EXPECT_NE(compute[0].find("\"name\":\"forward+backward\""), std::string::npos) << compute[0];
    EXPECT_NE(compute[1].find("\"name\":\"wait for gradients + optimizer\""), std::string::npos) << compute[1];
    EXPECT_EQ(EventsOn(trace, 1).size() >= 2u, true) << "host spans of steps 3 and 4";
  }
}

// The integer after "key": in one trace event.
int64_t IntArg(const std::string& ev, const std::string& key) {
  const size_t at = ev.find("\"" + key + "\":");
  return at == std::string::npos ? -1 : std::stoll(ev.substr(at + key.size() + 3));
}

// ZeRO-1 on the same run: per traced step, reduce-scatter spans covering every gradient element once, then one
// all-gather of all of them, on every rank.
TEST(TraceE2E, Zero1TracesEveryReduceScatterAndTheAllGather) {
  DT_SKIP_WITHOUT_FASHION_MNIST();
  TempDir dir;
  ProcessResult r = RunTracedMlp(dir, " --set dist.zero1=true");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  for (int rank = 0; rank < 2; ++rank) {
    const std::string trace = ReadFile(dir.path() + "/run/trace/rank" + std::to_string(rank) + ".trace.json");
    const auto comm = EventsOn(trace, 3);
    int gathers = 0;
    int64_t scattered = 0, gathered = 0;
    for (const std::string& ev : comm) {
      if (ev.find("\"name\":\"all-gather\"") != std::string::npos) {
        ++gathers;
        gathered = IntArg(ev, "elements");
        EXPECT_EQ(scattered, gathered) << "rank " << rank << ": a step's reduce-scatters before its gather\n" << trace;
        scattered = 0;
      } else {
        EXPECT_NE(ev.find("\"name\":\"reduce-scatter bucket"), std::string::npos) << ev;
        scattered += IntArg(ev, "elements");
      }
    }
    EXPECT_EQ(gathers, 2) << "rank " << rank << ": one all-gather per traced step\n" << trace;
    EXPECT_GT(gathered, 0);
    EXPECT_EQ(scattered, 0) << "reduce-scatters after the last gather";
  }
}

}  // namespace
}  // namespace dtrain::testing
