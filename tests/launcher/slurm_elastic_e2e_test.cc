// Elasticity under Slurm, against real daemons: a three-node cluster on this machine (SLURM_TEST_NODES=3
// scripts/slurm_test_cluster.sh: one `slurmd -N nK` per node), a `sbatch --no-kill -N3` job whose `dtrain launch
// --nnodes 2:3` (srun inside the allocation) trains the CI config on the CPU, one rank per node. After the first
// checkpoint (step 10) node n3 is set DOWN (as a lost or reclaimed node is): Slurm ends the step and takes n3 out of
// the job, and the launcher re-runs the step on n1,n2 from the newest checkpoint with the same global batch (2
// micro-steps of 96 per rank instead of 128). Checked against an uninterrupted three-node run: the same samples in the
// same steps, every sample of every epoch used exactly once (DTRAIN_SAMPLE_LOG), final weights within the bound of
// tests/launcher/elastic_netns_test.cc (same GELU/SGD config; the bound and why it is not bits are explained there),
// and `dtrain report` shows both attempts. With --nnodes 3:3 the same loss leaves fewer than MIN: exit 1, the lost
// node named. Skips when the Slurm binaries or the data are missing.

#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <string>
#include <thread>

#include "tests/testing/safetensors_diff.h"
#include "tests/testing/sample_log_check.h"
#include "tests/testing/slurm_cluster.h"
#include "tests/testing/subprocess.h"

namespace dtrain::testing {
namespace {

const std::string kSource = DT_SOURCE_DIR;
const std::string kCiConfig = kSource + "/configs/fashion_mnist_mlp_ci.yaml";
constexpr int64_t kGlobalBatch = 3 * 128;
constexpr int kEpochs = 3;
constexpr int64_t kPerEpoch = 10000 / kGlobalBatch * kGlobalBatch;  // 26 steps: 9984 of the 10000 samples
constexpr double kWeightBound = 2e-6;                               // elastic_netns_test.cc's, and its reasons

// The config of both runs: the elastic netns test's (GELU, SGD, a checkpoint every 10 steps).
const std::string kArgs = kCiConfig + " --set train.device=cpu --set train.epochs=" + std::to_string(kEpochs) +
                          " --set train.eval=false --set optim.name=sgd --set optim.lr=0.05"
                          " --set model.mlp.activation=gelu --set checkpoint.every_steps=10"
                          " --set checkpoint.async=false";

std::string Trim(std::string s) {
  while (!s.empty() && (s.back() == '\n' || s.back() == ' ')) s.pop_back();
  return s;
}

class SlurmElastic : public ::testing::Test {
 protected:
  void SetUp() override {
    DT_SKIP_WITHOUT_FASHION_MNIST();
    d_ = dir_.path();
    const ProcessResult up = RunCommand(SlurmClusterStart(d_ + "/slurm", 3, 2));
    if (up.exit_code == 77) GTEST_SKIP() << "Slurm not installed: " << up.output;
    ASSERT_EQ(up.exit_code, 0) << up.output;
    started_ = true;
  }
  void TearDown() override {
    if (started_) RunCommand(SlurmClusterStop(d_ + "/slurm"));
  }

  // Client commands and jobs see this cluster. The three "nodes" share one machine, where Open MPI would pick its
  // shared-memory transport between ranks it sees on one host but whose per-node session directories differ (it
  // crashes): TCP only, as between real nodes.
  std::string Env() const { return "SLURM_CONF=" + d_ + "/slurm/slurm.conf OMPI_MCA_btl=self,tcp "; }

  std::string Logs() const {
    std::string s;
    for (const char* f : {"slurmctld.log", "slurmd-n1.log", "slurmd-n3.log"}) {
      s += std::string("\n") + f + ":\n" + ReadFile(d_ + "/slurm/log/" + f);
    }
    return s;
  }

  // Polls job `id` until it is final (or `timeout_s` passes); returns its state and sets *exit_code from Slurm's
  // ExitCode=C:S.
  std::string WaitForJob(const std::string& id, int timeout_s, int* exit_code) {
    const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(timeout_s);
    while (std::chrono::steady_clock::now() < end) {
      const std::string st = Trim(RunCommand(Env() + "squeue -h -t all -o %T -j " + id).output);
      if (st == "COMPLETED" || st == "FAILED" || st == "CANCELLED" || st == "TIMEOUT" || st == "NODE_FAIL") {
        const std::string show = RunCommand(Env() + "scontrol show job " + id).output;
        const size_t at = show.find(" ExitCode=");
        *exit_code = at == std::string::npos ? -1 : std::atoi(show.c_str() + at + 10);
        return st;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
    }
    return "TIMEOUT";
  }

  // Submits `dtrain launch FLAGS` of the config as a `sbatch --no-kill -N3` job whose n3 rank of the first attempt
  // sets its own node DOWN once step 10's checkpoint exists and waits at the start of step 12 (fault_injection.h's
  // pause; its peers block in that step's all-reduce) so the run cannot finish before the node is gone; waits for
  // the job. Returns its state, *exit_code and the
  // job's output.
  std::string RunLosingN3(const std::string& flags, int* exit_code, std::string* out) {
    std::string state = RunLosingN3Once(flags, exit_code, out);
    if (StartupCrash(*out, d_ + "/run")) {
      std::cout << "[          ] a rank crashed (SIGSEGV) at its start: retrying the job once\n" << *out;
      EXPECT_EQ(RunCommand("rm -rf " + d_ + "/run " + d_ + "/job.out").exit_code, 0);
      state = RunLosingN3Once(flags, exit_code, out);
    }
    return state;
  }

  // A known failure of this machine rather than of the code under test (noticed, not root-caused): on a loaded 2-core
  // machine one of the three TCP-only ranks sometimes dies of SIGSEGV about a second after start (a trace with only
  // the signal frame: a call through a null pointer; once after Open MPI's "failed to TCP connect to a peer MPI
  // process ... Operation now in progress"). True when `out` shows a segfault and the run in `run_dir` never reached
  // step 10's checkpoint, or a later attempt's rank died of it before its first line (the launcher's report says "it
  // printed nothing": seen once in CI, in attempt 2 on n1, 2026-12-05).
  static bool StartupCrash(const std::string& out, const std::string& run_dir) {
    const size_t segv = out.find("signal 11 (Segmentation fault)");
    const size_t line_end = segv == std::string::npos ? segv : out.find('\n', segv);
    const bool silent =
        segv != std::string::npos && out.substr(segv, line_end - segv).find("it printed nothing") != std::string::npos;
    return out.find("Segmentation fault") != std::string::npos &&
           (silent || !std::filesystem::exists(run_dir + "/checkpoints/step-00000010/manifest.pb"));
  }

  std::string RunLosingN3Once(const std::string& flags, int* exit_code, std::string* out) {
    const std::string worker = d_ + "/worker.sh";
    WriteFile(worker,
              "#!/bin/sh\nif [ \"$SLURMD_NODENAME\" = n3 ] && [ \"$DTRAIN_RESTART_COUNT\" = 0 ]; then\n  "
              "DTRAIN_FAULT=step=12,action=pause,seconds=120 " +
                  DtrainBin() + " \"$@\" & p=$!\n  for i in $(seq 600); do [ -e " + d_ +
                  "/run/checkpoints/step-00000010/manifest.pb ] && break; sleep 0.1; done\n"
                  "  scontrol update nodename=n3 state=down reason=dtrain-test-lost-node\n  wait $p\nfi\nexec " +
                  DtrainBin() + " \"$@\"\n");
    WriteFile(d_ + "/job.sh",
              "#!/bin/sh\nexec " + DtrainBin() + " launch " + flags + " " + kArgs + " --set run.dir=" + d_ + "/run\n");
    EXPECT_EQ(RunCommand("mkdir -p " + d_ + "/run/samples && chmod +x " + worker + " " + d_ + "/job.sh").exit_code, 0);
    const ProcessResult sub = RunCommand(
        Env() + "DTRAIN_SAMPLE_LOG=" + d_ + "/run/samples DTRAIN_WORKER_BIN=" + worker +
        " sbatch --parsable --no-kill -N3 --ntasks-per-node=1 --output=" + d_ + "/job.out " + d_ + "/job.sh");
    EXPECT_EQ(sub.exit_code, 0) << sub.output;
    const std::string state = WaitForJob(Trim(sub.output), 120, exit_code);
    *out = ReadFile(d_ + "/job.out");
    return state;
  }

  TempDir dir_;
  std::string d_;
  bool started_ = false;
};

TEST_F(SlurmElastic, LosesANodeFinishesOnTwoSameSamplesAndWeights) {
  // 1. The uninterrupted reference: three nodes, one rank each, started by srun directly.
  const std::string ref_cmd = "mkdir -p " + d_ + "/ref/samples && " + Env() + "DTRAIN_SAMPLE_LOG=" + d_ +
                              "/ref/samples " + kBoundedSrun + "-N3 --ntasks-per-node=1 " + DtrainBin() + " train " +
                              kArgs + " --set run.dir=" + d_ + "/ref";
  ProcessResult ref = RunCommand(ref_cmd);
  if (ref.exit_code != 0 && StartupCrash(ref.output, d_ + "/ref")) {
    std::cout << "[          ] a rank of the reference crashed (SIGSEGV) before step 10: retrying it once\n"
              << ref.output;
    ref = RunCommand("rm -rf " + d_ + "/ref && " + ref_cmd);
  }
  ASSERT_EQ(ref.exit_code, 0) << ref.output << Logs();

  // 2. The elastic job, n3 lost after step 10.
  int exit_code = -1;
  std::string out;
  const std::string state = RunLosingN3("--nnodes 2:3 --max-restarts 0", &exit_code, &out);
  ASSERT_EQ(state, "COMPLETED") << out << Logs();
  EXPECT_EQ(exit_code, 0);
  EXPECT_NE(out.find("elastic attempt 1 on 3 node(s)"), std::string::npos) << out;
  EXPECT_NE(out.find("srun: error: Node failure on n3"), std::string::npos) << out;
  EXPECT_NE(out.find("lost node(s) n3 of Slurm job"), std::string::npos) << out;
  EXPECT_NE(out.find("(elastic attempt 1; 0 of 0 restarts used)"), std::string::npos) << out;
  EXPECT_LT(out.find("lost node(s) n3 of Slurm job"), out.find("(elastic attempt 1; 0 of 0 restarts used)"))
      << "the lost node is named before the failure report of a rank that lost its peers there\n"
      << out;
  EXPECT_NE(out.find("elastic attempt 2 on 2 node(s)"), std::string::npos) << out;
  EXPECT_NE(out.find("--nodes=2 --nodelist=n1,n2 --ntasks-per-node=1 --ntasks=2"), std::string::npos) << out;
  EXPECT_NE(out.find("--set data.batch_size=96 --set train.grad_accum_steps=2"), std::string::npos) << out;
  EXPECT_NE(out.find("the job finished on 2 node(s)"), std::string::npos) << out;

  // 3. Every sample of every epoch used exactly once, restarts included, in the same steps as the reference.
  const auto ref_steps = SamplesByStep(CountedRecords(ReadSampleLogs(d_ + "/ref/samples")), kGlobalBatch);
  const std::vector<SampleRecord> counted = CountedRecords(ReadSampleLogs(d_ + "/run/samples"));
  ASSERT_EQ(ReadSampleLogs(d_ + "/run/samples").size(), 2u) << "two attempts took batches";
  const auto uses = UsesPerEpoch(counted);
  ASSERT_EQ(uses.size(), static_cast<size_t>(kEpochs));
  for (const auto& [epoch, once_more] : uses) {
    EXPECT_EQ(once_more.first, kPerEpoch) << "epoch " << epoch << ": samples used exactly once";
    EXPECT_EQ(once_more.second, 0) << "epoch " << epoch << ": samples used more than once";
  }
  ASSERT_EQ(ref_steps.size(), static_cast<size_t>(kEpochs * kPerEpoch / kGlobalBatch));
  EXPECT_TRUE(SamplesByStep(counted, kGlobalBatch) == ref_steps)
      << "the elastic run grouped other samples into some step than the reference";
  const double diff = MaxSafetensorsDiff(d_ + "/ref/final.safetensors", d_ + "/run/final.safetensors");
  std::cout << "[          ] max |elastic - uninterrupted| = " << diff << "\n";
  ASSERT_GE(diff, 0);
  EXPECT_LT(diff, kWeightBound);

  // 4. The goodput report of the run directory: both attempts and why the first ended.
  const ProcessResult report = RunCommand(DtrainBin() + " report " + d_ + "/run");
  ASSERT_EQ(report.exit_code, 0) << report.output;
  EXPECT_NE(report.output.find("attempt 1: world 3 on n1,n2,n3; steps 0 -> "), std::string::npos) << report.output;
  EXPECT_NE(report.output.find("ended: lost_host (n3)"), std::string::npos) << report.output;
  EXPECT_NE(report.output.find("attempt 2: world 2 on n1,n2; steps "), std::string::npos) << report.output;
}

// --nnodes 3:3: losing a node leaves fewer than MIN: the launcher stops with exit 1 and names the lost node.
TEST_F(SlurmElastic, BelowMinStopsNamingTheLostNode) {
  int exit_code = -1;
  std::string out;
  const std::string state = RunLosingN3("--nnodes 3:3", &exit_code, &out);
  EXPECT_EQ(state, "FAILED") << out << Logs();
  EXPECT_EQ(exit_code, 1) << out;
  EXPECT_NE(out.find("lost node(s) n3 of Slurm job"), std::string::npos) << out;
  EXPECT_NE(out.find("--nnodes 3:3: only 2 usable host(s) left (lost: n3), fewer than MIN: stopping"),
            std::string::npos)
      << out;
  EXPECT_EQ(out.find("elastic attempt 2"), std::string::npos) << out;
}

}  // namespace
}  // namespace dtrain::testing
