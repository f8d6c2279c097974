// Slurm end to end, against real daemons (scripts/slurm_test_cluster.sh: munged, slurmctld, slurmd on this machine):
// examples/slurm/train.sbatch as a 2-task CPU job, signalled with `scancel --signal=USR1 --batch` mid-run, saves a
// checkpoint, requeues itself, resumes and ends with the parameters of an uninterrupted `srun --mpi=pmix` run bit for
// bit; once with workers started by srun directly, once by `dtrain launch` inside the allocation. And DistEnv on the
// environment real Slurm gives to tasks and to the batch script. Skips when the Slurm binaries are missing (install:
// scripts/install_deps.sh).

#include <gtest/gtest.h>

#include <chrono>
#include <fstream>
#include <map>
#include <regex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "comm/dist_env.h"
#include "tests/testing/safetensors_diff.h"
#include "tests/testing/slurm_cluster.h"
#include "tests/testing/subprocess.h"

namespace dtrain::testing {
namespace {

const std::string kData = ::dtrain::testing::kFashionMnistDir;
const std::string kSource = DT_SOURCE_DIR;
const std::string kCiConfig = kSource + "/configs/fashion_mnist_mlp_ci.yaml";
// 24 steps of a 2 x 64 global batch, a progress line every 4 steps, no periodic checkpoint: only the
// preemption saves (and the end).
const std::string kArgs = kCiConfig +
                          " --set train.device=cpu --set train.eval=false --set train.max_steps=24"
                          " --set data.batch_size=64 --set train.log_every=4 --set checkpoint.every_steps=0";

// A one-machine cluster under `dir`, stopped (jobs cancelled, daemons ended by pid) by the destructor.
class SlurmCluster {
 public:
  explicit SlurmCluster(const std::string& dir) : dir_(dir) { start_ = RunCommand(SlurmClusterStart(dir_, 1, 8)); }
  ~SlurmCluster() { RunCommand(SlurmClusterStop(dir_)); }
  SlurmCluster(const SlurmCluster&) = delete;
  SlurmCluster& operator=(const SlurmCluster&) = delete;

  bool missing() const { return start_.exit_code == 77; }
  bool up() const { return start_.exit_code == 0; }
  const std::string& start_output() const { return start_.output; }
  // Prefix for client commands (sbatch, srun, squeue, scancel); jobs inherit it.
  std::string env() const { return "SLURM_CONF=" + dir_ + "/slurm.conf "; }
  std::string DaemonLogs() const {
    return "slurmctld.log:\n" + ReadFile(dir_ + "/log/slurmctld.log") + "\nslurmd.log:\n" +
           ReadFile(dir_ + "/log/slurmd.log");
  }

 private:
  std::string dir_;
  ProcessResult start_;
};

#define START_CLUSTER_OR_SKIP(cluster)                                                          \
  if ((cluster).missing()) GTEST_SKIP() << "Slurm not installed: " << (cluster).start_output(); \
  ASSERT_TRUE((cluster).up()) << (cluster).start_output()

std::string Trim(std::string s) {
  while (!s.empty() && (s.back() == '\n' || s.back() == ' ')) s.pop_back();
  return s;
}

// Polls the job's state until it is final (or `timeout_s` passes); returns it ("TIMEOUT" then).
std::string WaitForJob(const SlurmCluster& c, const std::string& id, int timeout_s) {
  const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(timeout_s);
  while (std::chrono::steady_clock::now() < end) {
    const std::string st = Trim(RunCommand(c.env() + "squeue -h -t all -o %T -j " + id).output);
    if (st == "COMPLETED" || st == "FAILED" || st == "CANCELLED" || st == "TIMEOUT" || st == "NODE_FAIL" ||
        st == "OUT_OF_MEMORY") {
      return st;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
  }
  return "TIMEOUT";
}

// Waits until `file` holds `text` (true) or `timeout_s` passes (false).
bool WaitForText(const std::string& file, const std::string& text, int timeout_s) {
  const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(timeout_s);
  while (std::chrono::steady_clock::now() < end) {
    if (ReadFile(file).find(text) != std::string::npos) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return false;
}

// One preemptible batch job of examples/slurm/train.sbatch.
struct Job {
  std::string start;  // DTRAIN_START: srun | launch
  std::string run_dir, out, id;
};

// Both ways of starting workers in one allocation each, concurrently (8 CPUs configured on any machine):
// USR1 to the batch shell -> checkpoint of a step in (0, 24), exit 75, `scontrol requeue`, a second run
// with SLURM_RESTART_COUNT=1 that resumes from it and finishes; parameters equal to the uninterrupted
// `srun --mpi=pmix -n2 dtrain train` run (the same ranks and batches: bit for bit).
TEST(SlurmE2E, Usr1CheckpointsRequeuesAndResumesBitExact) {
  DT_SKIP_WITHOUT_FASHION_MNIST();
  TempDir dir;
  const std::string d = dir.path();
  SlurmCluster cluster(d + "/slurm");
  START_CLUSTER_OR_SKIP(cluster);

  // dtrain, whose ranks in the job's first run wait at the start of step 8 until the preemption signal reaches them
  // (fault_injection.h's pause): 24 steps would otherwise end before USR1 travels scancel -> slurmd -> batch shell
  // -> ranks on a loaded machine. The requeued run (SLURM_RESTART_COUNT=1) does not wait.
  const std::string wrapper = d + "/dtrain.sh";
  WriteFile(wrapper,
            "#!/bin/sh\n[ \"${SLURM_RESTART_COUNT:-0}\" = 0 ] && export DTRAIN_FAULT=step=8,action=pause\nexec " +
                DtrainBin() + " \"$@\"\n");
  ASSERT_EQ(RunCommand("chmod +x " + wrapper).exit_code, 0);
  std::vector<Job> jobs = {{"srun", d + "/job_srun", d + "/job_srun.out", ""},
                           {"launch", d + "/job_launch", d + "/job_launch.out", ""}};
  for (Job& j : jobs) {
    ProcessResult sub = RunCommand(cluster.env() + "DTRAIN=" + wrapper + " DTRAIN_START=" + j.start +
                                   " sbatch --parsable -n2 --output=" + j.out + " " + kSource +
                                   "/examples/slurm/train.sbatch " + kArgs + " --set run.dir=" + j.run_dir);
    ASSERT_EQ(sub.exit_code, 0) << sub.output;
    j.id = Trim(sub.output);
  }
  // 1. Each job, once it has logged a training step, gets USR1 on its batch shell only (as --signal=B:USR1@90).
  for (const Job& j : jobs) {
    ASSERT_TRUE(WaitForText(j.run_dir + "/metrics.jsonl", "\"kind\":\"train\"", 40))
        << ReadFile(j.out) << cluster.DaemonLogs();
    ProcessResult sig = RunCommand(cluster.env() + "scancel --signal=USR1 --batch " + j.id);
    ASSERT_EQ(sig.exit_code, 0) << sig.output;
  }
  // 2. The uninterrupted reference, started by srun directly (its own allocation), while the jobs requeue.
  ProcessResult ref = RunCommand(cluster.env() + kBoundedSrun + "-n2 " + DtrainBin() + " train " + kArgs +
                                 " --set run.dir=" + d + "/ref");
  ASSERT_EQ(ref.exit_code, 0) << ref.output;
  EXPECT_NE(ref.output.find("rank 1/2 (local 1) on cpu; started by slurm"), std::string::npos) << ref.output;

  // 3. Each job: saved, requeued, resumed from that step, finished, equal to the reference.
  for (const Job& j : jobs) {
    SCOPED_TRACE("DTRAIN_START=" + j.start);
    const std::string state = WaitForJob(cluster, j.id, 60);
    const std::string out = ReadFile(j.out);
    ASSERT_EQ(state, "COMPLETED") << out << cluster.DaemonLogs();
    std::smatch m;
    ASSERT_TRUE(std::regex_search(out, m, std::regex("checkpoint of step ([0-9]+) saved"))) << out;
    const int step = std::stoi(m[1]);
    EXPECT_GT(step, 0) << out;
    EXPECT_LT(step, 24) << out;
    const auto pos = [&](const std::string& s) { return out.find(s); };
    const std::string resumed = "resumed from " + j.run_dir + "/checkpoints/step-" +
                                std::string(8 - m[1].length(), '0') + m[1].str() + ": step " + m[1].str() + ",";
    ASSERT_NE(pos("SLURM_RESTART_COUNT=0, workers started by " + j.start), std::string::npos) << out;
    ASSERT_NE(pos("requeueing job " + j.id), std::string::npos) << out;
    ASSERT_NE(pos("SLURM_RESTART_COUNT=1, workers started by " + j.start), std::string::npos) << out;
    ASSERT_NE(pos(resumed), std::string::npos) << out;
    EXPECT_LT(pos("SLURM_RESTART_COUNT=0"), pos("requeueing job"));
    EXPECT_LT(pos("requeueing job"), pos("SLURM_RESTART_COUNT=1"));
    EXPECT_LT(pos("SLURM_RESTART_COUNT=1"), pos(resumed));
    EXPECT_NE(pos("train.sbatch: workers exited 0"), std::string::npos) << out;
    EXPECT_EQ(pos("SLURM_RESTART_COUNT=2"), std::string::npos) << out;
    EXPECT_EQ(MaxSafetensorsDiff(d + "/ref/final.safetensors", j.run_dir + "/final.safetensors"), 0.0) << out;
  }
}

// The environment as real Slurm sets it: every task of `srun -n2` is a rank of a 2-rank world; the batch
// script of `sbatch -n2` (SLURM_PROCID=0, SLURM_NTASKS=2, no SLURM_STEP_ID) is no rank and says how to start them.
std::map<std::string, std::string> ParseEnv(const std::string& text) {
  std::map<std::string, std::string> env;
  std::stringstream ss(text);
  std::string kv;
  while (std::getline(ss, kv, '\0')) {
    const auto eq = kv.find('=');
    if (eq != std::string::npos) env[kv.substr(0, eq)] = kv.substr(eq + 1);
  }
  return env;
}

TEST(SlurmE2E, DistEnvFromRealTasksAndTheBatchScript) {
  TempDir dir;
  const std::string d = dir.path();
  SlurmCluster cluster(d + "/slurm");
  START_CLUSTER_OR_SKIP(cluster);
  ProcessResult tasks = RunCommand(cluster.env() + "srun -n2 sh -c 'env -0 > " + d + "/env.$SLURM_PROCID'");
  ASSERT_EQ(tasks.exit_code, 0) << tasks.output;
  for (int r = 0; r < 2; ++r) {
    comm::DistEnv e;
    const Status st = comm::DetectDistEnvFrom(ParseEnv(ReadFile(d + "/env." + std::to_string(r))), &e);
    ASSERT_TRUE(st.ok()) << st.ToString();
    EXPECT_EQ(e.source, "slurm");
    EXPECT_EQ(e.rank, r);
    EXPECT_EQ(e.world_size, 2);
    EXPECT_EQ(e.local_rank, r);
    EXPECT_EQ(e.local_world_size, 2);
    EXPECT_EQ(e.node_rank, 0);
    EXPECT_EQ(e.requeue_count, 0);
  }
  ProcessResult batch =
      RunCommand(cluster.env() + "sbatch --wait -n2 -o /dev/null --wrap 'env -0 > " + d + "/env.batch'");
  ASSERT_EQ(batch.exit_code, 0) << batch.output;
  auto env = ParseEnv(ReadFile(d + "/env.batch"));
  ASSERT_EQ(env.count("SLURM_JOB_ID"), 1u);
  ASSERT_EQ(env["SLURM_PROCID"], "0");
  ASSERT_EQ(env["SLURM_NTASKS"], "2");
  comm::DistEnv e;
  const Status st = comm::DetectDistEnvFrom(env, &e);
  EXPECT_EQ(st.code(), Status::Code::kInvalidArgument) << st.ToString();
  EXPECT_NE(st.message().find("is the batch script of Slurm job " + env["SLURM_JOB_ID"] +
                              " (SLURM_NTASKS=2, no SLURM_STEP_ID), not one of its tasks: start the workers with "
                              "`srun --mpi=pmix dtrain train`"),
            std::string::npos)
      << st.ToString();
  // A one-task job's script is a single worker, and a requeued job's count is read.
  env["SLURM_NTASKS"] = "1";
  env["SLURM_RESTART_COUNT"] = "3";
  ASSERT_TRUE(comm::DetectDistEnvFrom(env, &e).ok());
  EXPECT_EQ(e.source, "single");
  EXPECT_EQ(e.world_size, 1);
  EXPECT_EQ(e.requeue_count, 3);
}

// `dtrain launch --nproc-per-node 2` inside a 4-task allocation starts 2 tasks (srun alone would ignore its
// --ntasks-per-node there and start 4), and without the flag the allocation's 4. The worker is a script that
// writes its task identity and arguments to a file per task.
TEST(SlurmE2E, LaunchInsideAnAllocationStartsTheRequestedTasks) {
  TempDir dir;
  const std::string d = dir.path();
  SlurmCluster cluster(d + "/slurm");
  START_CLUSTER_OR_SKIP(cluster);
  WriteFile(d + "/worker.sh",
            "#!/bin/sh\necho \"$SLURM_PROCID of $SLURM_NTASKS: $*\" > \"$OUT_DIR/task.$SLURM_PROCID\"\n");
  ASSERT_EQ(RunCommand("chmod +x " + d + "/worker.sh").exit_code, 0);
  const auto launch = [&](const std::string& out_dir, const std::string& flags) {
    RunCommand("mkdir -p " + out_dir);
    return RunCommand(cluster.env() + "OUT_DIR=" + out_dir + " DTRAIN_WORKER_BIN=" + d + "/worker.sh salloc -n4 " +
                      DtrainBin() + " launch" + flags + " cfg.yaml --set a=b");
  };
  ProcessResult two = launch(d + "/two", " --nproc-per-node 2");
  ASSERT_EQ(two.exit_code, 0) << two.output;
  EXPECT_NE(two.output.find("--ntasks-per-node=2 --ntasks=2 " + d + "/worker.sh train cfg.yaml"), std::string::npos)
      << two.output;
  EXPECT_EQ(ReadFile(d + "/two/task.0"), "0 of 2: train cfg.yaml --set a=b\n");
  EXPECT_EQ(ReadFile(d + "/two/task.1"), "1 of 2: train cfg.yaml --set a=b\n");
  EXPECT_FALSE(std::ifstream(d + "/two/task.2").good()) << two.output;
  ProcessResult all = launch(d + "/all", "");
  ASSERT_EQ(all.exit_code, 0) << all.output;
  EXPECT_EQ(ReadFile(d + "/all/task.3"), "3 of 4: train cfg.yaml --set a=b\n") << all.output;
}

}  // namespace
}  // namespace dtrain::testing
