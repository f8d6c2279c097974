// End to end: `dtrain train configs/fashion_mnist_mlp_lion.yaml` on the CPU, a few dozen steps on the real
// Fashion-MNIST (Debian's dataset-fashion-mnist): the run chooses Lion from the config and the loss falls.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "tests/testing/fixtures.h"
#include "tests/testing/subprocess.h"

namespace dtrain::testing {
namespace {

TEST(LionE2E, MlpLossFallsOnCpu) {
  DT_SKIP_WITHOUT_FASHION_MNIST();
  TempDir dir;
  const std::string config = std::string(DT_SOURCE_DIR) + "/configs/fashion_mnist_mlp_lion.yaml";
  const ProcessResult r = RunCommand(
      DtrainBin() + " train " + config + " --set train.device=cpu --set train.max_steps=60 --set train.log_every=10" +
      " --set train.eval=false --set checkpoint.enabled=false --set run.dir=" + dir.File("run"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(ReadFile(dir.File("run/config.yaml")).find("name: lion"), std::string::npos);
  const std::vector<std::string> trains = Lines(ReadFile(dir.File("run/metrics.jsonl")), "\"kind\":\"train\"");
  ASSERT_GE(trains.size(), 5u) << r.output;
  // From ~ln(10) = 2.30: 60 Lion steps of 128 samples get well below it.
  const double first = Field(trains.front(), "loss"), last = Field(trains.back(), "loss");
  EXPECT_GT(first, 1.5) << trains.front();
  EXPECT_LT(last, 0.8 * first) << trains.back();
  EXPECT_LT(last, 1.2) << trains.back();
}

}  // namespace
}  // namespace dtrain::testing
