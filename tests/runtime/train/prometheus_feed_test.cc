// What the trainer's Prometheus feed exposes: the progress metrics in base units under fixed names, GPU series
// with gpu/host/rank labels, counters and the checkpoint age; the endpoint only on a node's local rank 0; a port
// already taken is a usage error naming the key; nothing of the config leaks.

#include "runtime/train/prometheus_feed.h"

#include <gtest/gtest.h>
#include <stdlib.h>

#include <cmath>
#include <map>

#include "tests/testing/free_port.h"
#include "tests/testing/http_client.h"

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

PrometheusRunInfo Info() {
  PrometheusRunInfo info;
  info.host = "node-a";
  info.rank = 4;
  info.world = 8;
  info.device = "cuda";
  info.model = "gpt2";
  info.total_steps = 100;
  info.restarts = 2;
  info.requeues = 1;
  info.preemptions = 3;
  return info;
}

// name{labels} -> value of every sample.
std::map<std::string, double> ByName(const std::vector<PromSample>& samples) {
  std::map<std::string, double> out;
  for (const PromSample& s : samples) {
    std::string key = s.name;
    for (const auto& l : s.labels) key += "," + l.first + "=" + l.second;
    EXPECT_TRUE(out.emplace(key, s.value).second) << "duplicate " << key;
  }
  return out;
}

TEST(PrometheusFeed, ProgressMetricsInBaseUnitsWithHostAndRankLabels) {
  auto metrics = IntervalMetrics(0.5, 1e-3, 2000, 1024, Phases(), 64);
  GpuWindow gpu;
  gpu.samples = 3;
  gpu.util_pct = 97;
  gpu.mem_util_pct = 40;
  gpu.mem_used_mib = 1024;
  gpu.mem_total_mib = 2048;
  gpu.power_w = 600;
  gpu.temp_c = 70;
  gpu.sm_clock_mhz = 1980;
  AddGpuMetrics(50, 512, 300, gpu, &metrics);  // rank means: left out, the node's GPUs are exposed instead
  const auto m = ByName(PrometheusSamples(Info(), 2, 40, metrics, {{4, 3, gpu}}, false, 0, 0));
  const std::string l = ",host=node-a,rank=4";
  EXPECT_EQ(m.at("dtrain_info" + l + ",world=8,device=cuda,model=gpt2"), 1);
  EXPECT_EQ(m.at("dtrain_step" + l), 40);
  EXPECT_EQ(m.at("dtrain_total_steps" + l), 100);
  EXPECT_EQ(m.at("dtrain_epoch" + l), 2);
  EXPECT_EQ(m.at("dtrain_world_size" + l), 8);
  EXPECT_EQ(m.at("dtrain_loss" + l), 0.5);
  EXPECT_EQ(m.at("dtrain_learning_rate" + l), 1e-3);
  EXPECT_EQ(m.at("dtrain_samples_per_second" + l), 2000);
  EXPECT_EQ(m.at("dtrain_tokens_per_second" + l), 2000.0 * 1024);
  EXPECT_DOUBLE_EQ(m.at("dtrain_step_seconds" + l), 0.010);
  EXPECT_DOUBLE_EQ(m.at("dtrain_step_data_wait_seconds" + l), 0.001);
  EXPECT_DOUBLE_EQ(m.at("dtrain_step_compute_seconds" + l), 0.006);
  EXPECT_DOUBLE_EQ(m.at("dtrain_step_comm_exposed_seconds" + l), 0.002);
  EXPECT_DOUBLE_EQ(m.at("dtrain_step_optimizer_seconds" + l), 0.0005);
  EXPECT_DOUBLE_EQ(m.at("dtrain_step_checkpoint_stall_seconds" + l), 0.00025);
  EXPECT_EQ(m.at("dtrain_device_memory_peak_bytes" + l), 64.0 * 1048576);
  const std::string g = ",gpu=3" + l;
  EXPECT_EQ(m.at("dtrain_gpu_utilization_percent" + g), 97);
  EXPECT_EQ(m.at("dtrain_gpu_memory_utilization_percent" + g), 40);
  EXPECT_EQ(m.at("dtrain_gpu_memory_used_bytes" + g), 1024.0 * 1048576);
  EXPECT_EQ(m.at("dtrain_gpu_memory_total_bytes" + g), 2048.0 * 1048576);
  EXPECT_EQ(m.at("dtrain_gpu_power_watts" + g), 600);
  EXPECT_EQ(m.at("dtrain_gpu_temperature_celsius" + g), 70);
  EXPECT_EQ(m.at("dtrain_gpu_sm_clock_hertz" + g), 1980e6);
  EXPECT_EQ(m.at("dtrain_gpu_throttled" + g), 0);
  EXPECT_EQ(m.at("dtrain_restarts_total" + l), 2);
  EXPECT_EQ(m.at("dtrain_slurm_requeues_total" + l), 1);
  EXPECT_EQ(m.at("dtrain_preemptions" + l), 3);
  EXPECT_EQ(m.at("dtrain_preemption_requested" + l), 0);
  EXPECT_EQ(m.count("dtrain_last_checkpoint_step" + l), 0u);  // none taken yet
  EXPECT_EQ(m.count("dtrain_gpu_util_pct" + l), 0u);
  EXPECT_EQ(m.size(), 28u);
}

TEST(PrometheusFeed, WithoutGpuTelemetryNoGpuSeriesAndACheckpointAddsItsStepTimeAndAge) {
  const auto metrics = IntervalMetrics(0.25, 1e-3, 100, 0, Phases(), 0);
  const auto samples = PrometheusSamples(Info(), 1, 10, metrics, {}, true, 8, 1000.0);
  const auto m = ByName(samples);
  const std::string l = ",host=node-a,rank=4";
  EXPECT_EQ(m.count("dtrain_gpu_utilization_percent,gpu=0" + l), 0u);
  EXPECT_EQ(m.count("dtrain_tokens_per_second" + l), 0u);
  EXPECT_EQ(m.at("dtrain_preemption_requested" + l), 1);
  EXPECT_EQ(m.at("dtrain_last_checkpoint_step" + l), 8);
  EXPECT_EQ(m.at("dtrain_last_checkpoint_timestamp_seconds" + l), 1000.0);
  const std::string text = FormatPrometheusText(samples, 1030.0);
  EXPECT_NE(text.find("dtrain_last_checkpoint_age_seconds{host=\"node-a\",rank=\"4\"} 30\n"), std::string::npos)
      << text;
}

GpuWindow Window(double util, uint64_t throttle) {
  GpuWindow w;
  w.samples = 2;
  w.util_pct = util;
  w.mem_util_pct = util / 2;
  w.mem_used_mib = 100 + util;
  w.mem_total_mib = 143771;
  w.power_w = 3 * util;
  w.temp_c = 40 + util / 10;
  w.sm_clock_mhz = 1980;
  w.throttle = throttle;
  return w;
}

// Four ranks on two hosts, one without telemetry: the sum of their slots gives each node its own GPUs.
TEST(PrometheusFeed, TheGatheredSlotsGiveEachNodeItsOwnGpus) {
  const struct {
    std::string host;
    int gpu;
    GpuWindow w;
  } ranks[] = {{"node-a", 0, Window(90, 0)},
               {"node-a", 1, Window(20, 1ull << 2 /* NVML: SW power cap */)},
               {"node-b", 0, Window(70, 0)},
               {"node-b", 1, GpuWindow()}};
  std::vector<double> sum(4 * kGpuSlotSize, 0.0), slot;
  for (int r = 0; r < 4; ++r) {
    PackGpuSlot(ranks[r].host, r, 4, ranks[r].gpu, ranks[r].w, &slot);
    ASSERT_EQ(slot.size(), sum.size());
    for (size_t i = 0; i < sum.size(); ++i) sum[i] += slot[i];
  }
  const auto a = NodeGpus(sum, "node-a");
  ASSERT_EQ(a.size(), 2u);
  EXPECT_EQ(a[0].rank, 0);
  EXPECT_EQ(a[0].gpu, 0);
  EXPECT_EQ(a[0].window.util_pct, 90);
  EXPECT_EQ(a[0].window.mem_util_pct, 45);
  EXPECT_EQ(a[0].window.mem_used_mib, 190);
  EXPECT_EQ(a[0].window.mem_total_mib, 143771);
  EXPECT_EQ(a[0].window.power_w, 270);
  EXPECT_EQ(a[0].window.temp_c, 49);
  EXPECT_EQ(a[0].window.sm_clock_mhz, 1980);
  EXPECT_EQ(a[0].window.throttle, 0u);
  EXPECT_EQ(a[1].rank, 1);
  EXPECT_EQ(a[1].gpu, 1);
  EXPECT_EQ(a[1].window.util_pct, 20);
  EXPECT_NE(a[1].window.throttle, 0u);
  const auto b = NodeGpus(sum, "node-b");
  ASSERT_EQ(b.size(), 1u);  // rank 3 read nothing
  EXPECT_EQ(b[0].rank, 2);
  EXPECT_EQ(b[0].window.util_pct, 70);
  EXPECT_TRUE(NodeGpus(sum, "node-c").empty());

  PrometheusRunInfo info = Info();
  info.host = "node-a";
  info.rank = 0;
  const auto m = ByName(PrometheusSamples(info, 1, 1, {}, a, false, 0, 0));
  EXPECT_EQ(m.at("dtrain_gpu_utilization_percent,gpu=0,host=node-a,rank=0"), 90);
  EXPECT_EQ(m.at("dtrain_gpu_utilization_percent,gpu=1,host=node-a,rank=1"), 20);
  EXPECT_EQ(m.at("dtrain_gpu_throttled,gpu=0,host=node-a,rank=0"), 0);
  EXPECT_EQ(m.at("dtrain_gpu_throttled,gpu=1,host=node-a,rank=1"), 1);
}

TEST(PrometheusFeed, AnUnmappedMetricKeepsItsJsonlKey) {
  std::vector<ProgressMetric> metrics = {{"grad_norm", "train", 1.5, nullptr}};
  const auto m = ByName(PrometheusSamples(Info(), 1, 1, metrics, {}, false, 0, 0));
  EXPECT_EQ(m.at("dtrain_grad_norm,host=node-a,rank=4"), 1.5);
}

// An evaluation's metrics (PrometheusFeed::OnEval adds them to the interval's) under their Prometheus names.
TEST(PrometheusFeed, EvalMetricsHaveTheirOwnSeries) {
  const auto m = ByName(PrometheusSamples(Info(), 1, 1, EvalMetrics(2.0, 0.25, /*tokens=*/true, 0.5), {}, false, 0, 0));
  EXPECT_EQ(m.at("dtrain_eval_loss,host=node-a,rank=4"), 2.0);
  EXPECT_EQ(m.at("dtrain_eval_accuracy,host=node-a,rank=4"), 0.25);
  EXPECT_DOUBLE_EQ(m.at("dtrain_eval_perplexity,host=node-a,rank=4"), std::exp(2.0));
  EXPECT_EQ(m.at("dtrain_eval_seconds,host=node-a,rank=4"), 0.5);
}

proto::Config PromConfig(int port) {
  proto::Config cfg;
  cfg.mutable_run()->set_dir("/nonexistent/run");
  cfg.mutable_run()->set_prometheus_port(port);
  cfg.mutable_run()->set_prometheus_addr("127.0.0.1");
  cfg.mutable_storage()->set_endpoint("http://secret-endpoint.example");
  return cfg;
}

TEST(PrometheusFeed, ServesOnlyOnANodesLocalRankZeroAndExposesNoConfigValues) {
  const int port = testing::FreeLoopbackPort();
  ASSERT_GT(port, 0);
  setenv("RANK", "1", 1);
  setenv("WORLD_SIZE", "2", 1);
  setenv("LOCAL_RANK", "1", 1);
  std::unique_ptr<PrometheusFeed> feed;
  ASSERT_TRUE(PrometheusFeed::Start(PromConfig(port), Info(), &feed).ok());
  EXPECT_EQ(feed, nullptr);  // local rank 1: another process of this node serves
  setenv("LOCAL_RANK", "0", 1);
  setenv("DTRAIN_RESTART_COUNT", "5", 1);
  const Status st = PrometheusFeed::Start(PromConfig(port), Info(), &feed);
  ASSERT_TRUE(st.ok()) << st.message();
  ASSERT_NE(feed, nullptr);
  EXPECT_EQ(feed->port(), port);
  feed->OnProgress(1, 20, IntervalMetrics(0.75, 1e-3, 100, 0, Phases(), 0), {});
  feed->OnCheckpoint(20, 1e9);
  std::string body;
  ASSERT_EQ(testing::HttpGet("127.0.0.1", port, "/metrics", &body), 200);
  EXPECT_NE(body.find("# TYPE dtrain_loss gauge\ndtrain_loss{host=\"node-a\",rank=\"4\"} 0.75\n"), std::string::npos)
      << body;
  EXPECT_NE(body.find("# TYPE dtrain_restarts_total counter\ndtrain_restarts_total{host=\"node-a\",rank=\"4\"} 5\n"),
            std::string::npos)
      << body;
  EXPECT_NE(body.find("dtrain_last_checkpoint_step{host=\"node-a\",rank=\"4\"} 20\n"), std::string::npos) << body;
  EXPECT_EQ(body.find("secret-endpoint"), std::string::npos);
  EXPECT_EQ(body.find("/nonexistent/run"), std::string::npos);

  // The port is now taken: a second job on this node fails with a usage error naming the key and addr:port.
  std::unique_ptr<PrometheusFeed> second;
  const Status taken = PrometheusFeed::Start(PromConfig(port), Info(), &second);
  EXPECT_EQ(taken.code(), Status::Code::kInvalidArgument);
  EXPECT_NE(taken.message().find("run.prometheus_port"), std::string::npos) << taken.message();
  EXPECT_NE(taken.message().find("127.0.0.1:" + std::to_string(port)), std::string::npos) << taken.message();
  proto::Config bad = PromConfig(port + 1);
  bad.mutable_run()->set_prometheus_addr("not an address");
  const Status addr = PrometheusFeed::Start(bad, Info(), &second);
  EXPECT_EQ(addr.code(), Status::Code::kInvalidArgument);
  EXPECT_NE(addr.message().find("run.prometheus_addr"), std::string::npos) << addr.message();
  for (const char* v : {"RANK", "WORLD_SIZE", "LOCAL_RANK", "DTRAIN_RESTART_COUNT"}) unsetenv(v);
}

TEST(PrometheusFeed, PortZeroIsOff) {
  std::unique_ptr<PrometheusFeed> feed;
  ASSERT_TRUE(PrometheusFeed::Start(PromConfig(0), Info(), &feed).ok());
  EXPECT_EQ(feed, nullptr);
}

}  // namespace
}  // namespace dtrain::runtime
