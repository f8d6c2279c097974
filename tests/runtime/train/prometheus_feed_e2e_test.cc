// The Prometheus endpoint end to end: a real Prometheus server (Debian's `prometheus`, tests/testing/
// prometheus_server.h) scrapes a real 2-rank CPU training run under `dtrain launch` on Fashion-MNIST every second,
// and the step-time and loss series read back through its HTTP API hold the values of the run's metrics.jsonl.

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "tests/testing/free_port.h"
#include "tests/testing/http_client.h"
#include "tests/testing/prometheus_server.h"
#include "tests/testing/subprocess.h"

namespace dtrain::testing {
namespace {

const std::string kData = ::dtrain::testing::kFashionMnistDir;
const std::string kCiConfig = std::string(DT_SOURCE_DIR) + "/configs/fashion_mnist_mlp_ci.yaml";

// `dtrain launch` in the background; SIGTERM (the preemption path: checkpoint, exit 75) and reaped by Stop() or the
// destructor, so no process outlives the test.
class BackgroundRun {
 public:
  explicit BackgroundRun(const std::string& command) {
    pid_ = fork();
    if (pid_ == 0) {
      execl("/bin/sh", "sh", "-c", ("exec " + command).c_str(), static_cast<char*>(nullptr));
      _exit(127);
    }
  }
  ~BackgroundRun() { Stop(); }
  bool Running() {
    if (pid_ <= 0) return false;
    int status = 0;
    if (waitpid(pid_, &status, WNOHANG) != pid_) return true;
    exit_code_ = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    pid_ = 0;
    return false;
  }
  // SIGTERM, then waits for the exit; returns its exit code (-1: killed by a signal).
  int Stop() {
    if (Running()) {
      kill(pid_, SIGTERM);
      int status = 0;
      waitpid(pid_, &status, 0);
      exit_code_ = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
      pid_ = 0;
    }
    return exit_code_;
  }

 private:
  pid_t pid_ = -1;
  int exit_code_ = -1;
};

// The sample values of the first series of a range-vector query's matrix result.
std::vector<double> Values(const nlohmann::json& matrix) {
  std::vector<double> out;
  if (!matrix.is_array() || matrix.empty()) return out;
  for (const auto& v : matrix[0]["values"]) out.push_back(std::stod(v[1].get<std::string>()));
  return out;
}

bool InJsonl(double value, const std::vector<std::string>& records, const std::string& key, double scale) {
  for (const std::string& r : records) {
    const double want = Field(r, key) * scale;
    if (std::fabs(value - want) <= 1e-6 * std::fabs(want) + 1e-12) return true;
  }
  return false;
}

TEST(PrometheusFeedE2E, RealPrometheusScrapesStepTimeAndLossOfATwoRankCpuRun) {
  DT_SKIP_WITHOUT_FASHION_MNIST();
  const int port = FreeLoopbackPort();
  ASSERT_GT(port, 0);
  PrometheusServer prom("127.0.0.1:" + std::to_string(port), "1s");
  if (!prom.skip_reason().empty()) GTEST_SKIP() << prom.skip_reason();
  ASSERT_TRUE(prom.ok()) << prom.error();

  TempDir dir;
  const std::string run_dir = dir.path() + "/run";
  // Many short epochs so the run outlives the scrapes; stopped by SIGTERM once Prometheus holds the series.
  BackgroundRun run(DtrainBin() + " launch --nproc-per-node 2 " + kCiConfig +
                    " --set train.device=cpu --set train.epochs=200 --set train.log_every=5 --set train.eval=false" +
                    " --set checkpoint.every_steps=0 --set run.tensorboard=false --set run.prometheus_port=" +
                    std::to_string(port) + " --set run.dir=" + run_dir + " > " + dir.path() + "/out.log 2>&1");

  // Poll the Prometheus API until it has scraped at least three samples of each series (60 s at most).
  nlohmann::json loss, step;
  std::string error, endpoint;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (std::chrono::steady_clock::now() < deadline && run.Running()) {
    if (endpoint.find("dtrain_step_seconds") == std::string::npos) HttpGet("127.0.0.1", port, "/metrics", &endpoint, 2);
    ASSERT_TRUE(prom.Query("dtrain_loss[5m]", &loss, &error)) << error;
    ASSERT_TRUE(prom.Query("dtrain_step_seconds[5m]", &step, &error)) << error;
    if (Values(loss).size() >= 3 && Values(step).size() >= 3) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(500));
  }
  const int code = run.Stop();
  const std::string out = ReadFile(dir.path() + "/out.log");
  EXPECT_EQ(code, 75) << "SIGTERM: checkpoint, then exit 75\n" << out;
  ASSERT_GE(Values(loss).size(), 3u) << "dtrain_loss: " << loss.dump() << "\n" << out;
  ASSERT_GE(Values(step).size(), 3u) << "dtrain_step_seconds: " << step.dump() << "\n" << out;

  // The series carry the node's labels; Prometheus adds job and instance.
  const auto& labels = loss[0]["metric"];
  EXPECT_EQ(labels.value("rank", ""), "0") << labels.dump();
  EXPECT_FALSE(labels.value("host", "").empty()) << labels.dump();
  EXPECT_EQ(labels.value("job", ""), "dtrain") << labels.dump();
  EXPECT_EQ(labels.value("instance", ""), "127.0.0.1:" + std::to_string(port)) << labels.dump();

  // Every scraped value is one of the run's progress intervals (metrics.jsonl: loss; step_ms in milliseconds).
  const std::vector<std::string> trains = Lines(ReadFile(run_dir + "/metrics.jsonl"), "\"kind\":\"train\"");
  ASSERT_FALSE(trains.empty());
  for (double v : Values(loss)) EXPECT_TRUE(InJsonl(v, trains, "loss", 1.0)) << v << " not a logged loss";
  for (double v : Values(step)) {
    EXPECT_GT(v, 0);
    EXPECT_TRUE(InJsonl(v, trains, "step_ms", 1e-3)) << v << " s not a logged step time";
  }
  // The endpoint itself, as scraped: the text format with the run's description and nothing of its paths.
  EXPECT_NE(endpoint.find("# TYPE dtrain_step_seconds gauge\n"), std::string::npos) << endpoint;
  EXPECT_NE(endpoint.find("world=\"2\",device=\"cpu\",model=\"mlp\"} 1\n"), std::string::npos) << endpoint;
  EXPECT_EQ(endpoint.find(run_dir), std::string::npos) << endpoint;
}

// A port another process holds: the worker stops at start with exit 2 and one line naming the key and addr:port.
TEST(PrometheusFeedE2E, APortAlreadyTakenIsAUsageErrorNamingTheKeyAndPort) {
  DT_SKIP_WITHOUT_FASHION_MNIST();
  const HeldLoopbackPort holder;
  ASSERT_NE(holder.port(), 0);
  const std::string port = std::to_string(holder.port());
  TempDir dir;
  const ProcessResult r = RunCommand(DtrainBin() + " train " + kCiConfig + " --set train.device=cpu" +
                                     " --set run.prometheus_port=" + port + " --set run.dir=" + dir.path() + "/run");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("dtrain: error: InvalidArgument: run.prometheus_port: cannot serve metrics on 127.0.0.1:" +
                          port + ": Address already in use"),
            std::string::npos)
      << r.output;
  EXPECT_EQ(r.output.find("epoch 1/1 step"), std::string::npos) << "trained although the endpoint failed";
}

}  // namespace
}  // namespace dtrain::testing
