// Every metric family the trainer's Prometheus endpoint can serve passes `promtool check metrics` (Debian's
// prometheus package): the samples are built the way RunReporter builds them (all progress metrics, the gradient
// norm, GPU telemetry of two GPUs fed as gathered slots, a checkpoint, a preemption request), served by a real
// PrometheusExporter over loopback, and the scraped body is what promtool reads. promtool used to exit 3 on
// dtrain_restart_count and dtrain_slurm_requeue_count (issue 37: a count must be a counter ending in _total).

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <set>
#include <string>
#include <vector>

#include "runtime/observe/prometheus_exporter.h"
#include "runtime/train/prometheus_feed.h"
#include "tests/testing/http_client.h"
#include "tests/testing/subprocess.h"

namespace dtrain::runtime {
namespace {

using testing::RunCommand;
using testing::TempDir;

// Why the test cannot run here, or "" when promtool is on PATH (looked up here: no shell started for it).
std::string PromtoolMissing() {
  const char* path = std::getenv("PATH");
  std::string dirs = path != nullptr ? path : "/usr/bin:/bin";
  for (size_t start = 0; start <= dirs.size();) {
    size_t end = dirs.find(':', start);
    if (end == std::string::npos) end = dirs.size();
    const std::string dir = end > start ? dirs.substr(start, end - start) : ".";
    if (access((dir + "/promtool").c_str(), X_OK) == 0) return "";
    start = end + 1;
  }
  return "promtool is not on PATH (Debian package prometheus; scripts/install_deps.sh --test installs it)";
}

// Serves `samples` from a real exporter on a loopback port and returns what GET /metrics answered.
std::string Scrape(std::vector<PromSample> samples) {
  std::unique_ptr<PrometheusExporter> e;
  const Status st = PrometheusExporter::Start(PrometheusOptions(), &e);
  EXPECT_TRUE(st.ok()) << st.message();
  if (!st.ok()) return "";
  e->Publish(std::move(samples));
  std::string body;
  EXPECT_EQ(testing::HttpGet("127.0.0.1", e->port(), "/metrics", &body), 200);
  return body;
}

// `promtool check metrics` of `body` (it reads the exposition on stdin).
testing::ProcessResult Promtool(const TempDir& dir, const std::string& body) {
  const std::string path = dir.path() + "/metrics.txt";
  testing::WriteFile(path, body);
  return RunCommand("promtool check metrics < " + path);
}

// The metric families (# TYPE lines) of an exposition.
std::set<std::string> Families(const std::string& body) {
  std::set<std::string> out;
  for (const std::string& line : testing::Lines(body, "# TYPE ")) {
    const size_t start = line.find("# TYPE ") + 7;
    out.insert(line.substr(start, line.find(' ', start) - start));
  }
  return out;
}

GpuWindow Gpu(double util, uint64_t throttle) {
  GpuWindow w;
  w.samples = 4;
  w.util_pct = util;
  w.mem_util_pct = util / 2;
  w.mem_used_mib = 70000;
  w.mem_total_mib = 143771;
  w.power_w = 650;
  w.temp_c = 61;
  w.sm_clock_mhz = 1980;
  w.throttle = throttle;
  return w;
}

// Everything PrometheusSamples can emit at once, from the builders the trainer's RunReporter uses.
std::vector<PromSample> AllSamples() {
  StepPhases p;
  p.step_ms = 120;
  p.data_ms = 2;
  p.fwd_bwd_ms = 100;
  p.comm_exposed_ms = 8;
  p.optim_ms = 6;
  p.ckpt_stall_ms = 4;
  std::vector<ProgressMetric> metrics = IntervalMetrics(3.25, 6e-4, 512, 1024, p, 60000);
  AddGradNorm(0.8, &metrics);
  AddGpuMetrics(95, 70000, 650, Gpu(95, 0), &metrics);
  const std::vector<ProgressMetric> eval = EvalMetrics(2.5, 0.4, /*tokens=*/true, 1.5);  // as PrometheusFeed::OnEval
  metrics.insert(metrics.end(), eval.begin(), eval.end());
  // Two ranks of this node with telemetry, summed as the all-reduce does.
  std::vector<double> sum(2 * kGpuSlotSize, 0.0), slot;
  for (int rank = 0; rank < 2; ++rank) {
    PackGpuSlot("node-a", rank, 2, rank, Gpu(90 + rank, rank), &slot);
    for (size_t i = 0; i < sum.size(); ++i) sum[i] += slot[i];
  }
  const std::vector<NodeGpu> gpus = NodeGpus(sum, "node-a");
  EXPECT_EQ(gpus.size(), 2u);
  PrometheusRunInfo info;
  info.host = "node-a";
  info.world = 2;
  info.device = "cuda";
  info.model = "gpt2";
  info.total_steps = 1000;
  info.restarts = 2;
  info.requeues = 1;
  info.preemptions = 1;
  return PrometheusSamples(info, 1, 300, metrics, gpus, /*preemption_requested=*/true, 250, 1.7e9);
}

TEST(PrometheusPromtool, EveryFamilyTheTrainerServesPassesPromtoolCheckMetrics) {
  const std::string missing = PromtoolMissing();
  if (!missing.empty()) GTEST_SKIP() << missing;
  const std::vector<PromSample> samples = AllSamples();
  const std::string body = Scrape(samples);
  // Nothing was dropped on the way (FormatPrometheusText leaves out invalid names): one family per sample name.
  std::set<std::string> names;
  for (const PromSample& s : samples) names.insert(s.name);
  EXPECT_EQ(Families(body), names) << body;
  // The families that need optional inputs are among them.
  for (const char* name : {"dtrain_tokens_per_second", "dtrain_grad_norm", "dtrain_gpu_utilization_percent",
                           "dtrain_gpu_sm_clock_hertz", "dtrain_gpu_throttled", "dtrain_last_checkpoint_age_seconds",
                           "dtrain_restarts_total", "dtrain_slurm_requeues_total", "dtrain_eval_loss",
                           "dtrain_eval_perplexity", "dtrain_eval_accuracy", "dtrain_eval_seconds"}) {
    EXPECT_EQ(names.count(name), 1u) << name;
  }
  EXPECT_NE(body.find("# TYPE dtrain_restarts_total counter\n"), std::string::npos) << body;
  EXPECT_NE(body.find("dtrain_restarts_total{host=\"node-a\",rank=\"0\"} 2\n"), std::string::npos) << body;
  EXPECT_NE(body.find("# TYPE dtrain_slurm_requeues_total counter\n"), std::string::npos) << body;
  EXPECT_NE(body.find("dtrain_gpu_utilization_percent{gpu=\"1\",host=\"node-a\",rank=\"1\"} 91\n"), std::string::npos)
      << body;

  TempDir dir;
  const testing::ProcessResult r = Promtool(dir, body);
  EXPECT_EQ(r.exit_code, 0) << r.output << "\n--- the exposition:\n" << body;
  EXPECT_EQ(r.output, "") << body;
}

// The check is live: the names the trainer used to serve are what promtool refuses (exit 3, lint problems).
TEST(PrometheusPromtool, TheOldCountNamesAreRefused) {
  const std::string missing = PromtoolMissing();
  if (!missing.empty()) GTEST_SKIP() << missing;
  const std::string body = Scrape({{"dtrain_restart_count", "Restarts", false, {{"rank", "0"}}, 2},
                                   {"dtrain_slurm_requeue_count", "Requeues", true, {{"rank", "0"}}, 1}});
  TempDir dir;
  const testing::ProcessResult r = Promtool(dir, body);
  EXPECT_EQ(r.exit_code, 3) << r.output;
  EXPECT_NE(r.output.find("dtrain_restart_count non-histogram and non-summary metrics should not have \"_count\""),
            std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("dtrain_slurm_requeue_count counter metrics should have \"_total\" suffix"),
            std::string::npos)
      << r.output;
}

}  // namespace
}  // namespace dtrain::runtime
