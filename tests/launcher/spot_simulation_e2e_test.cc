// examples/spot/simulate_preemptions.sh, small: a 2-rank CPU job reclaimed 3 times (SIGTERM: checkpoint and exit 75;
// SIGKILL of every process: back to the last periodic checkpoint), restarted with the same command each time, ends
// with the parameters of an uninterrupted run bit for bit.

#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>
#include <string>
#include <vector>

#include "runtime/checkpoint/safetensors.h"
#include "tests/testing/subprocess.h"

namespace dtrain::testing {
namespace {

const std::string kData = ::dtrain::testing::kFashionMnistDir;
const std::string kSource = DT_SOURCE_DIR;

size_t Count(const std::string& text, const std::string& what) {
  size_t n = 0;
  for (size_t p = text.find(what); p != std::string::npos; p = text.find(what, p + 1)) ++n;
  return n;
}

TEST(SpotSimulationE2E, ThreeReclaimsThenTheSameParametersAsAnUninterruptedRun) {
  DT_SKIP_WITHOUT_FASHION_MNIST();
  TempDir dir;
  const std::string d = dir.path();
  // 720 steps of 2 x 64, a progress line every 2 steps, a checkpoint every 10. Each reclaim lands 0.5 .. 1 s
  // after an attempt's first progress line. CI has run up to 135 steps/s, so three attempts use at most about 450
  // steps, and the run cannot end before its third reclaim (with 240 steps, it once did). TERM, KILL, TERM: both
  // kinds of reclaim, and a SIGTERM'd run resuming from the checkpoint a SIGKILL'd one left.
  const std::string training =
      " --set train.device=cpu --set train.epochs=10 --set train.eval=false --set train.max_steps=720"
      " --set data.batch_size=64 --set data.limit_train=10000 --set train.log_every=2"
      " --set checkpoint.every_steps=10 --set schedule.warmup_steps=5";
  ProcessResult r = RunCommand(kSource + "/examples/spot/simulate_preemptions.sh --dtrain " + DtrainBin() +
                               " --preemptions 3 --signal TERM,KILL,TERM --max-delay 1 --seed 1 --dir " + d + " " +
                               kSource + "/examples/spot/fashion_mnist_spot.yaml" + training);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("reclaims: 3 of 3; attempts: 4"), std::string::npos) << r.output;
  EXPECT_EQ(Count(r.output, ": SIGTERM "), 2u) << r.output;
  EXPECT_EQ(Count(r.output, ": SIGKILL "), 1u) << r.output;
  EXPECT_EQ(Count(r.output, "exit 75; restarting with the same command"), 2u) << r.output;
  EXPECT_EQ(Count(r.output, "exit 137; restarting with the same command"), 1u) << r.output;
  EXPECT_NE(r.output.find("attempt 4: finished\n"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("final.safetensors: IDENTICAL to the uninterrupted run"), std::string::npos) << r.output;

  // Every restart resumed: attempts 2..4 each started from a checkpoint of the spot run.
  for (int a = 2; a <= 4; ++a) {
    const std::string log = ReadFile(d + "/spot." + std::to_string(a) + ".log");
    EXPECT_NE(log.find("resumed from " + d + "/spot/checkpoints/step-"), std::string::npos) << log;
  }
  // The script's verdict, checked independently: the same tensors, value for value.
  std::vector<runtime::NamedTensor> ref, spot;
  ASSERT_TRUE(runtime::ReadSafetensors(d + "/reference/final.safetensors", &ref).ok());
  ASSERT_TRUE(runtime::ReadSafetensors(d + "/spot/final.safetensors", &spot).ok());
  ASSERT_EQ(ref.size(), 6u);  // the MLP's 3 weights and 3 biases
  ASSERT_EQ(spot.size(), ref.size());
  for (size_t t = 0; t < ref.size(); ++t) {
    ASSERT_EQ(spot[t].name, ref[t].name);
    ASSERT_EQ(spot[t].data.size(), ref[t].data.size());
    EXPECT_TRUE(std::equal(ref[t].data.begin(), ref[t].data.end(), spot[t].data.begin())) << ref[t].name;
  }
}

}  // namespace
}  // namespace dtrain::testing
