// Elastic host set on three network-namespace hosts (scripts/netns_cluster.sh): `dtrain launch --nnodes 2:3
// --hostfile` trains the CI config on the CPU over mpirun; the rank on the third host is killed (with its host's
// processes) after the first checkpoint, the launcher drops that host and continues on two with the same global
// batch (2 micro-steps of 96 per rank), the host answers the probe again after --rejoin-after, the launcher asks for a
// coordinated checkpoint (SIGUSR1, exit 75) and finishes on three. The final weights are compared with an
// uninterrupted three-host run. Needs root; skips otherwise.

#include <gtest/gtest.h>
#include <unistd.h>

#include <fstream>
#include <iostream>
#include <string>

#include "tests/testing/netns_cluster.h"
#include "tests/testing/safetensors_diff.h"
#include "tests/testing/subprocess.h"

namespace dtrain::testing {
namespace {

const std::string kCiConfig = std::string(DT_SOURCE_DIR) + "/configs/fashion_mnist_mlp_ci.yaml";

class ElasticNetns : public ::testing::Test {
 protected:
  void SetUp() override {
    if (RunCommand("command -v ip && command -v mpirun").exit_code != 0) GTEST_SKIP() << "needs `ip` and `mpirun`";
    if (!std::ifstream("/usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz").good()) {
      GTEST_SKIP() << "Fashion-MNIST not installed";
    }
    if (geteuid() != 0) GTEST_SKIP() << "needs root: network namespaces";
    ASSERT_TRUE(lock_.held());
    const ProcessResult up = cluster_.Up(3);
    if (up.exit_code == NetnsCluster::kSkipExit) GTEST_SKIP() << "no network namespaces here: " << up.output;
    ASSERT_EQ(up.exit_code, 0) << up.output;
  }

  ProcessResult Launch(const std::string& flags, const std::string& worker, const std::string& run_dir) {
    std::string mpirun_args;
    for (const std::string& a :
         {std::string("--mca"), std::string("plm_rsh_agent"), NetnsCluster::Agent(), std::string("--mca"),
          std::string("oob_tcp_if_include"), std::string("10.77.0.0/24"), std::string("--mca"),
          std::string("btl_tcp_if_include"), std::string("10.77.0.0/24"), std::string("--mca"), std::string("pml"),
          std::string("ob1"), std::string("--mca"), std::string("btl"), std::string("tcp,self")}) {
      mpirun_args += " --mpirun-arg=" + a;
    }
    return RunCommand((worker.empty() ? "" : "DTRAIN_WORKER_BIN=" + worker + " ") + DtrainBin() + " launch " + flags +
                      mpirun_args + " " + kCiConfig +
                      " --set train.device=cpu --set train.epochs=6 --set train.eval=false --set optim.name=sgd"
                      " --set optim.lr=0.05"
                      " --set checkpoint.every_steps=10 --set checkpoint.async=false --set run.dir=" +
                      run_dir);
  }

  MachineLock lock_{"/tmp/dtrain-netns-test.lock"};
  NetnsCluster cluster_;
};

TEST_F(ElasticNetns, LosesAHostFinishesOnTwoGrowsBackToThreeSameWeights) {
  TempDir dir;
  const std::string d = dir.path();
  // Reference: three hosts, no interruption (global batch 3 x 128).
  const ProcessResult ref = Launch("--hosts 10.77.0.1:1,10.77.0.2:1,10.77.0.3:1", "", d + "/ref");
  ASSERT_EQ(ref.exit_code, 0) << ref.output;

  // Rank 2 (host 3), first attempt only: once step 10's checkpoint exists, it and the processes it started die.
  const std::string worker = d + "/worker.sh";
  WriteFile(worker, "#!/bin/sh\nif [ \"$OMPI_COMM_WORLD_RANK\" = 2 ] && [ \"$DTRAIN_RESTART_COUNT\" = 0 ]; then\n  " +
                        DtrainBin() + " \"$@\" & p=$!\n  for i in $(seq 600); do [ -e " + d +
                        "/run/checkpoints/step-00000010/manifest.pb ] && break; sleep 0.1; done\n"
                        "  kill -9 $p $$\nfi\nexec " +
                        DtrainBin() + " \"$@\"\n");
  ASSERT_EQ(RunCommand("chmod +x " + worker).exit_code, 0);
  WriteFile(d + "/hosts", "10.77.0.1 slots=1\n10.77.0.2 slots=1\n10.77.0.3 slots=1\n");
  const ProcessResult run =
      Launch("--nnodes 2:3 --hostfile " + d + "/hosts --rejoin-after 2 --max-restarts 0", worker, d + "/run");
  ASSERT_EQ(run.exit_code, 0) << run.output;
  EXPECT_NE(run.output.find("lost host(s) 10.77.0.3"), std::string::npos) << run.output;
  EXPECT_NE(run.output.find("elastic attempt 2 on 2 host(s), world size 2"), std::string::npos) << run.output;
  EXPECT_NE(run.output.find("--set data.batch_size=96 --set train.grad_accum_steps=2"), std::string::npos)
      << run.output;
  EXPECT_NE(run.output.find("growing: restarting"), std::string::npos) << run.output;
  EXPECT_NE(run.output.find("elastic attempt 3 on 3 host(s), world size 3"), std::string::npos) << run.output;

  // Same global batch, so the same steps, LR schedule and sample order; the gradient sums differ in reduction
  // order (3 ranks x 128 samples vs 2 ranks x 2 micro-steps x 96: other fp32 partial sums), so not bits. SGD, not
  // AdamW: Adam divides by sqrt(v), so an fp32 rounding difference in a near-zero gradient flips that weight's
  // update (2.7e-3 measured with AdamW over a 78-step 3 -> 2 -> 3 run). Measured with SGD: 1.4e-7 after a 78-step
  // shrink-only run, 7.7e-4 after this 156-step run (shrink-only or with the grow alike), while an uninterrupted
  // 2-rank run of the same global batch is 1.3e-5 from the reference: the bound is set from these measurements;
  // the per-step losses agree to 4-5 digits throughout.
  const double diff = MaxSafetensorsDiff(d + "/ref/final.safetensors", d + "/run/final.safetensors");
  std::cout << "[          ] max |elastic - uninterrupted| = " << diff << "\n";
  ASSERT_GE(diff, 0);
  EXPECT_LT(diff, 2e-3);
}

}  // namespace
}  // namespace dtrain::testing
