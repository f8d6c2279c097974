// Elastic host set on three network-namespace hosts (scripts/netns_cluster.sh): `dtrain launch --nnodes 2:3
// --hostfile` trains the CI config on the CPU over mpirun, and the third host goes away after the first checkpoint
// (step 10) — its processes killed, its network cut, or after a spot notice — while the launcher continues on two
// with the same global batch (2 micro-steps of 96 per rank). Every run records the samples its loader delivered
// (DTRAIN_SAMPLE_LOG), and each is checked against one uninterrupted three-host reference: the same samples in the
// same steps, every sample of every epoch used exactly once, and final weights within the bound the reduction order
// explains. Needs root; skips otherwise.

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <iostream>
#include <sstream>
#include <string>

#include "tests/testing/netns_cluster.h"
#include "tests/testing/safetensors_diff.h"
#include "tests/testing/sample_log_check.h"
#include "tests/testing/subprocess.h"

namespace dtrain::testing {
namespace {

const std::string kCiConfig = std::string(DT_SOURCE_DIR) + "/configs/fashion_mnist_mlp_ci.yaml";
constexpr int64_t kGlobalBatch = 3 * 128;
// Long enough that the two-host attempt outlives the grow watch's first probe (5 s after its start) on a fast machine.
constexpr int kEpochs = 8;
constexpr int64_t kPerEpoch = 10000 / kGlobalBatch * kGlobalBatch;  // 26 steps: 9984 of the 10000 samples

// The elastic runs' weights against the uninterrupted reference. Same global batch, so the same steps, LR schedule
// and samples per step (checked from the sample record); what differs is how each step's gradient is summed: 3 ranks
// x 128 samples against 2 ranks x 2 micro-steps x 96 (other fp32 partial sums, another all-reduce order), so not
// bits. How far that alone moves the 156-step (6-epoch) SGD run (lr 0.05), measured against the reference:
//   uninterrupted 2 x 2 x 96: 1.6e-7; resumed at step 10 on 2 x 2 x 96: 2.1e-7; one rank x 3 x 128: 4.3e-7.
// GELU, not the CI config's ReLU: with ReLU the same runs end 1.3e-5, 7.7e-4 and 7.5e-4 away, all of it in the fan-in
// and fan-out of one hidden unit (fc0 unit 46) whose weights jump between two checkpoints (steps 50 -> 60, also in the
// one-rank run that never resizes): a pre-activation within rounding of ReLU's kink takes the other branch and the
// unit's gradient changes by a whole sample's share. That was the 7.7e-4 this test used to allow 2e-3 for: the
// reduction order, not a skipped or repeated sample or a step-counted schedule (the sample record and the
// per-step LR agree exactly). SGD, not AdamW: Adam divides by sqrt(v), so a rounding difference in a near-zero
// gradient moves that weight by a whole step (2.7e-3 measured). The bound is 5x the largest of those measurements.
constexpr double kWeightBound = 2e-6;

std::string Ip() {
  std::string path = RunCommand("command -v ip").output;
  while (!path.empty() && (path.back() == '\n' || path.back() == ' ')) path.pop_back();
  return path;
}

class ElasticNetns : public ::testing::Test {
 protected:
  void SetUp() override {
    if (RunCommand("command -v ip && command -v mpirun").exit_code != 0) GTEST_SKIP() << "needs `ip` and `mpirun`";
    DT_SKIP_WITHOUT_FASHION_MNIST();
    if (geteuid() != 0) GTEST_SKIP() << "needs root: network namespaces";
    ASSERT_TRUE(lock_.held());
    const ProcessResult up = cluster_.Up(3);
    if (up.exit_code == NetnsCluster::kSkipExit) GTEST_SKIP() << "no network namespaces here: " << up.output;
    ASSERT_EQ(up.exit_code, 0) << up.output;
    d_ = dir_.path();
    WriteFile(d_ + "/hosts", "10.77.0.1 slots=1\n10.77.0.2 slots=1\n10.77.0.3 slots=1\n");
  }

  // `dtrain launch FLAGS` of the CI config over the namespace hosts, recording samples in RUN_DIR/samples.
  ProcessResult Launch(const std::string& flags, const std::string& worker, const std::string& run_dir,
                       const std::string& sets = "", const std::string& env = "") {
    std::string mpirun_args;
    for (const std::string& a :
         {std::string("--mca"), std::string("plm_rsh_agent"), NetnsCluster::Agent(), std::string("--mca"),
          std::string("oob_tcp_if_include"), std::string("10.77.0.0/24"), std::string("--mca"),
          std::string("btl_tcp_if_include"), std::string("10.77.0.0/24"), std::string("--mca"), std::string("pml"),
          std::string("ob1"), std::string("--mca"), std::string("btl"), std::string("tcp,self")}) {
      mpirun_args += " --mpirun-arg=" + a;
    }
    RunCommand("mkdir -p " + run_dir + "/samples");
    return RunCommand(env + " DTRAIN_SAMPLE_LOG=" + run_dir + "/samples " +
                      (worker.empty() ? "" : "DTRAIN_WORKER_BIN=" + worker + " ") + DtrainBin() + " launch " + flags +
                      mpirun_args + " " + kCiConfig +
                      " --set train.device=cpu --set train.epochs=" + std::to_string(kEpochs) +
                      " --set train.eval=false --set optim.name=sgd --set optim.lr=0.05 --set model.mlp.activation=gelu"
                      " --set checkpoint.every_steps=10 --set checkpoint.async=false --set run.dir=" +
                      run_dir + sets);
  }

  // The uninterrupted three-host reference, run once per test program (it is the same for every test).
  void RunReference() {
    static TempDir dir;  // removed at exit
    ref_ = dir.path() + "/ref";
    if (std::ifstream(ref_ + "/final.safetensors").good()) return;
    const ProcessResult ref = Launch("--hosts 10.77.0.1:1,10.77.0.2:1,10.77.0.3:1", "", ref_);
    ASSERT_EQ(ref.exit_code, 0) << ref.output;
  }

  // A worker wrapper: rank 2 of the first attempt runs `on_checkpoint` (bash; $p is the worker's pid) once step 10's
  // checkpoint exists, then waits for the worker and ends as it did, after running `after`. `worker_env` is set for
  // that rank's worker only. (bash, not sh: dash clears the signal mask that rank-exec starts the worker with, and a
  // grow request sent while the worker started would then kill it: launcher/rank_exec.h.)
  std::string Worker(const std::string& on_checkpoint, const std::string& after = "",
                     const std::string& worker_env = "") {
    const std::string worker = d_ + "/worker.sh";
    WriteFile(worker, "#!/bin/bash\nif [ \"$OMPI_COMM_WORLD_RANK\" = 2 ] && [ \"$DTRAIN_RESTART_COUNT\" = 0 ]; then\n  " +
                          worker_env + " " + DtrainBin() + " \"$@\" & p=$!\n  for i in $(seq 600); do [ -e " + d_ +
                          "/run/checkpoints/step-00000010/manifest.pb ] && break; sleep 0.1; done\n  " + on_checkpoint +
                          "\n  wait $p; rc=$?\n  " + after + "\n  exit $rc\nfi\nexec " + DtrainBin() + " \"$@\"\n");
    EXPECT_EQ(RunCommand("chmod +x " + worker).exit_code, 0);
    return worker;
  }

  // Every sample of every epoch used exactly once over the whole run, restarts included, and in the same steps as the
  // reference; then the weights.
  void ExpectSameSamplesAndWeights() {
    const auto ref = SamplesByStep(CountedRecords(ReadSampleLogs(ref_ + "/samples")), kGlobalBatch);
    const std::vector<SampleRecord> counted = CountedRecords(ReadSampleLogs(d_ + "/run/samples"));
    const auto uses = UsesPerEpoch(counted);
    ASSERT_EQ(uses.size(), static_cast<size_t>(kEpochs));
    for (const auto& [epoch, once_more] : uses) {
      EXPECT_EQ(once_more.first, kPerEpoch) << "epoch " << epoch << ": samples used exactly once";
      EXPECT_EQ(once_more.second, 0) << "epoch " << epoch << ": samples used more than once";
    }
    const auto run = SamplesByStep(counted, kGlobalBatch);
    ASSERT_EQ(ref.size(), static_cast<size_t>(kEpochs * kPerEpoch / kGlobalBatch));
    EXPECT_TRUE(run == ref) << "the elastic run grouped other samples into some step than the reference";

    const double diff = MaxSafetensorsDiff(ref_ + "/final.safetensors", d_ + "/run/final.safetensors");
    std::cout << "[          ] max |elastic - uninterrupted| = " << diff << "\n";
    ASSERT_GE(diff, 0);
    EXPECT_LT(diff, kWeightBound);
  }

  MachineLock lock_{"/tmp/dtrain-netns-test.lock"};
  NetnsCluster cluster_;
  TempDir dir_;
  std::string d_, ref_;
};

TEST_F(ElasticNetns, LosesAHostFinishesOnTwoGrowsBackToThreeSameWeights) {
  RunReference();
  // Host 3's rank and the processes it started die (a reclaimed host takes its processes with it). Its worker holds
  // at step 10 until then, so the job resumes from step 10 however fast it runs; and the two-host attempt holds at
  // step 30 until the launcher, having found host 3 back, asks for the checkpoint that precedes the grow (a fast
  // machine would otherwise finish the attempt before the grow watch's first probe, 5 s after its start).
  const std::string worker = Worker("kill -9 $p $$", "", "DTRAIN_FAULT=rank=2,step=10,action=hang");
  const ProcessResult run = Launch("--nnodes 2:3 --hostfile " + d_ + "/hosts --rejoin-after 2 --max-restarts 0", worker,
                                   d_ + "/run", "", "DTRAIN_FAULT=rank=0,step=30,attempt=1,action=pause,seconds=60");
  ASSERT_EQ(run.exit_code, 0) << run.output;
  EXPECT_NE(run.output.find("lost host(s) 10.77.0.3"), std::string::npos) << run.output;
  EXPECT_NE(run.output.find("(elastic attempt 1; 0 of 0 restarts used)"), std::string::npos) << run.output;
  EXPECT_NE(run.output.find("elastic attempt 2 on 2 host(s), world size 2"), std::string::npos) << run.output;
  EXPECT_NE(run.output.find("--set data.batch_size=96 --set train.grad_accum_steps=2"), std::string::npos)
      << run.output;
  EXPECT_NE(run.output.find("growing: restarting"), std::string::npos) << run.output;
  EXPECT_NE(run.output.find("elastic attempt 3 on 3 host(s), world size 3"), std::string::npos) << run.output;
  ExpectSameSamplesAndWeights();

  // The goodput report of this real run directory: its three attempts and why each ended.
  const ProcessResult report = RunCommand(DtrainBin() + " report " + d_ + "/run --price-spot 1 --price-on-demand 3");
  ASSERT_EQ(report.exit_code, 0) << report.output;
  EXPECT_NE(report.output.find("attempt 1: world 3 on 10.77.0.1,10.77.0.2,10.77.0.3; steps 0 -> "), std::string::npos)
      << report.output;
  EXPECT_NE(report.output.find("ended: lost_host (10.77.0.3)"), std::string::npos) << report.output;
  EXPECT_NE(report.output.find("attempt 2: world 2 on 10.77.0.1,10.77.0.2; steps 10 -> "), std::string::npos)
      << report.output;
  EXPECT_NE(report.output.find("ended: grow"), std::string::npos) << report.output;
  EXPECT_NE(report.output.find("ended: done"), std::string::npos) << report.output;
  EXPECT_NE(report.output.find(std::to_string(kEpochs * kPerEpoch) + " samples"), std::string::npos) << report.output;
  EXPECT_NE(report.output.find("cost/1M spot   $"), std::string::npos) << report.output;
  EXPECT_NE(report.output.find("cost/1M o-d    $"), std::string::npos) << report.output;
  // "  goodput        70.0% (...)": the figure is past the label's padding, which atof skips. (The test read it at a
  // fixed column one character too far, so 70.0% read as 0.0%, and failed CI.)
  const std::string label = "  goodput ";
  const size_t g = report.output.find(label);
  ASSERT_NE(g, std::string::npos) << report.output;
  // Tiny CPU steps (milliseconds) against seconds of process start per attempt: a low goodput, but not none.
  std::cout << report.output;
  const double goodput = std::atof(report.output.c_str() + g + label.size());
  EXPECT_GT(goodput, 1) << report.output;
  EXPECT_LT(goodput, 100) << report.output;
}

TEST_F(ElasticNetns, CutNetworkHostIsDroppedWithinTheHeartbeatBound) {
  RunReference();
  // Host 3's network goes down right after step 10's checkpoint; its processes live on, unreachable (the survivors
  // wait in their all-reduce). 10 s later the leftover worker is gone and the link is up again.
  const std::string ip = Ip();
  const std::string worker =
      Worker("date +%s.%N > " + d_ + "/cut_at; " + ip + " link set eth0 down\n  setsid sh -c \"sleep 10; kill -9 $p; " +
             ip + " link set eth0 up\" </dev/null >/dev/null 2>&1 &");
  // No rejoin during this run: it finishes on the survivors (growing back is the first test's).
  const ProcessResult run =
      Launch("--nnodes 2:3 --hostfile " + d_ + "/hosts --rejoin-after 600 --max-restarts 0 --grace-seconds 3", worker,
             d_ + "/run");
  ASSERT_EQ(run.exit_code, 0) << run.output;
  EXPECT_NE(run.output.find("host(s) 10.77.0.3 did not answer for 6 s: lost"), std::string::npos) << run.output;
  EXPECT_NE(run.output.find("elastic attempt 2 on 2 host(s), world size 2"), std::string::npos) << run.output;
  EXPECT_NE(run.output.find("the job finished on 2 host(s)"), std::string::npos) << run.output;
  ExpectSameSamplesAndWeights();

  // The launcher noticed within its heartbeat bound: 6 s of silence, probed every second with a 1 s timeout.
  const double cut_at = std::atof(ReadFile(d_ + "/cut_at").c_str());
  const std::string log = ReadFile(d_ + "/run/elastic.jsonl");
  const size_t n = log.find("\"noticed\":");
  ASSERT_NE(n, std::string::npos) << log;
  const double noticed = std::atof(log.c_str() + n + 10);
  std::cout << "[          ] network cut -> launcher noticed: " << noticed - cut_at << " s\n";
  EXPECT_GT(noticed - cut_at, 4.0) << log;
  EXPECT_LT(noticed - cut_at, 9.0) << log;
  EXPECT_NE(log.find("\"reason\":\"lost_host\",\"lost\":\"10.77.0.3\""), std::string::npos) << log;
}

TEST_F(ElasticNetns, SpotNoticeOnOneHostDrainsTheWholeJobThenShrinks) {
  RunReference();
  // Host 3's own metadata endpoint (169.254.169.254 inside its namespace only, as on a cloud VM) answers 404 until
  // step 10's checkpoint exists, then gives a termination notice. Its local rank 0 polls it; the whole job saves a
  // checkpoint and exits 75; the launcher continues on hosts 1 and 2 without counting a failure. The replacement
  // host (no notice) would rejoin only after 600 s: the run ends on two hosts.
  const std::string ip = Ip();
  ASSERT_EQ(RunCommand(ip + " -n dtns3 addr add 169.254.169.254/32 dev lo").exit_code, 0);
  RunCommand("mkdir -p " + d_ + "/imds");
  const ProcessResult server =
      RunCommand(ip + " netns exec dtns3 python3 -m http.server 8169 --bind 169.254.169.254 --directory " + d_ +
                 "/imds </dev/null >/dev/null 2>&1 & echo $!");
  const std::string worker =
      Worker("echo '{\"action\":\"terminate\"}' > " + d_ + "/imds/instance-action", "rm -f " + d_ + "/imds/*");
  const ProcessResult run =
      Launch("--nnodes 2:3 --hostfile " + d_ + "/hosts --rejoin-after 600 --max-restarts 0", worker, d_ + "/run",
             " --set checkpoint.spot_notice_url=http://169.254.169.254:8169/instance-action"
             " --set checkpoint.spot_poll_s=0.2");
  RunCommand("kill " + server.output);
  ASSERT_EQ(run.exit_code, 0) << run.output;
  EXPECT_NE(run.output.find("spot notice on host(s) 10.77.0.3: the job saved a checkpoint"), std::string::npos)
      << run.output;
  EXPECT_NE(run.output.find("elastic attempt 2 on 2 host(s), world size 2"), std::string::npos) << run.output;
  EXPECT_EQ(run.output.find("elastic attempt 3"), std::string::npos) << run.output;
  // The drain saved after the notice: the second attempt resumes past step 10, recomputing nothing.
  const std::string metrics = ReadFile(d_ + "/run/metrics.jsonl");
  EXPECT_EQ(metrics.find("\"restart\":1,\"resume_step\":10,"), std::string::npos) << metrics;
  EXPECT_NE(ReadFile(d_ + "/run/elastic.jsonl").find("\"reason\":\"notice\",\"lost\":\"10.77.0.3\""),
            std::string::npos);
  ExpectSameSamplesAndWeights();
}

}  // namespace
}  // namespace dtrain::testing
