// The watchdog in a real job: `dtrain launch` starts 2 CPU workers, rank 1 hangs at step 3 (fault
// injection, runtime/checkpoint/fault_injection.h), so rank 0 blocks in step 4's gradient all-reduce. Without
// the watchdog that is a silent hang for ever; with dist.collective_timeout_s = 2, rank 0 must log
// the section, itself and the elapsed time, exit 1, and the launcher must end the job with that code.

#include <gtest/gtest.h>

#include <chrono>
#include <fstream>
#include <string>

#include "tests/testing/subprocess.h"

namespace dtrain::testing {
namespace {

const std::string kData = ::dtrain::testing::kFashionMnistDir;
const std::string kCiConfig = std::string(DT_SOURCE_DIR) + "/configs/fashion_mnist_mlp_ci.yaml";

TEST(WatchdogE2E, HungPeerEndsTheJobWithAnErrorNamingTheCollective) {
  DT_SKIP_WITHOUT_FASHION_MNIST();
  TempDir dir;
  const auto t0 = std::chrono::steady_clock::now();
  ProcessResult r =
      RunCommand("DTRAIN_FAULT=rank=1,step=3,action=hang " + DtrainBin() + " launch --nproc-per-node 2 " + kCiConfig +
                 " --set train.device=cpu --set dist.collective_timeout_s=2 --set run.dir=" + dir.path() + "/run");
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_EQ(r.exit_code, 1) << r.output;
  // Start-up (data loading, 3 steps) takes a few seconds; the hang itself costs the 2 s timeout.
  EXPECT_LT(seconds, 60) << r.output;
  const std::string& out = r.output;
  EXPECT_NE(out.find("collective watchdog: 'step 4 (gradient all-reduce)' did not complete within 2 s on rank 0 of 2"),
            std::string::npos)
      << out;
  // Workers run MPI at MPI_THREAD_MULTIPLE, so rank 0's watchdog names the rank that never arrived.
  EXPECT_NE(out.find("ranks that did not arrive: 1 ("), std::string::npos) << out;
  EXPECT_NE(out.find("dtrain: error: Aborted: collective watchdog"), std::string::npos) << out;
}

}  // namespace
}  // namespace dtrain::testing
