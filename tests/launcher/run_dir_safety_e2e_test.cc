// Nothing lost, through the real binary (CPU, Fashion-MNIST CI config): one job per run.dir (two
// concurrent `dtrain launch` jobs; the holder killed -9, then taken over), `resume: never` over
// existing checkpoints refused and --overwrite (checkpoint.overwrite) moving them aside, every
// checkpoint corrupt refused with each reason and nothing deleted, a flipped bit in a manifest is
// DataLoss naming the file, `--resume N` over newer checkpoints and of a step never saved refused writing nothing, a
// finished run started again changing nothing on disk (exit 0 with its own config, 2 with another), and the read-only
// `dtrain ckpt` commands on a missing path.

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "tests/testing/subprocess.h"

namespace dtrain::testing {
namespace {

const std::string kData = ::dtrain::testing::kFashionMnistDir;
const std::string kCiConfig = std::string(DT_SOURCE_DIR) + "/configs/fashion_mnist_mlp_ci.yaml";
const std::string kCommon = " --set train.device=cpu --set train.eval=false --set train.log_every=10";

bool Exists(const std::string& path) {
  struct stat st;
  return stat(path.c_str(), &st) == 0;
}

// The value of key=VALUE in the lock file's holder line.
std::string HolderField(const std::string& line, const std::string& key) {
  const auto p = line.find(key + "=");
  if (p == std::string::npos) return "";
  const auto e = line.find_first_of(" \n", p);
  return line.substr(p + key.size() + 1, e == std::string::npos ? std::string::npos : e - p - key.size() - 1);
}

TEST(RunDirLockE2E, SecondConcurrentLaunchExits2NamingTheHolderAndADeadHolderIsTakenOver) {
  DT_SKIP_WITHOUT_FASHION_MNIST();
  TempDir dir;
  const std::string d = dir.path(), run = d + "/run";
  const std::string job = DtrainBin() + " launch --nproc-per-node 2 " + kCiConfig + kCommon +
                          " --set checkpoint.enabled=false --set run.dir=" + run;
  // Job A in the background: its rank 0 hangs at step 3 holding the lock (its watchdog ends the job after
  // 120 s should this test fail before killing it); its exit code lands in a.rc.
  ProcessResult bg =
      RunCommand("(DTRAIN_FAULT=rank=0,step=3,action=hang " + job + " --set dist.collective_timeout_s=120 > " + d +
                 "/a.log 2>&1; echo $? > " + d + "/a.rc) > /dev/null 2>&1 &");
  ASSERT_EQ(bg.exit_code, 0) << bg.output;
  std::string holder;
  ASSERT_TRUE(WaitUntil(
      [&] {
        holder = ReadFile(run + "/.dtrain.lock");
        return !holder.empty() || Exists(d + "/a.rc");
      },
      120))
      << ReadFile(d + "/a.log");
  ASSERT_FALSE(holder.empty()) << ReadFile(d + "/a.log");
  const std::string pid = HolderField(holder, "pid");
  ASSERT_FALSE(pid.empty()) << holder;
  struct KillOnExit {  // never leave job A behind, whatever fails below
    pid_t pid;
    ~KillOnExit() { kill(pid, SIGKILL); }
  } guard{static_cast<pid_t>(std::stoi(pid))};

  // Job B on the same run.dir: refused at start, exit 2, naming A's rank-0 pid.
  ProcessResult b = RunCommand(job + " --set train.max_steps=25");
  EXPECT_EQ(b.exit_code, 2) << b.output;
  EXPECT_NE(b.output.find("is in use by another dtrain job"), std::string::npos) << b.output;
  EXPECT_NE(b.output.find("pid=" + pid + " "), std::string::npos) << b.output;
  EXPECT_FALSE(Exists(d + "/a.rc")) << "job A ended: " << ReadFile(d + "/a.log");

  // kill -9 the holder: job A ends (its launcher reports the dead rank), the file still names it.
  ASSERT_EQ(kill(std::stoi(pid), SIGKILL), 0);
  ASSERT_TRUE(WaitUntil([&] { return !ReadFile(d + "/a.rc").empty(); }, 60)) << ReadFile(d + "/a.log");
  EXPECT_NE(ReadFile(d + "/a.rc"), "0\n");
  EXPECT_EQ(HolderField(ReadFile(run + "/.dtrain.lock"), "pid"), pid);

  // Job C takes the lock over and says whose it was.
  ProcessResult c = RunCommand(job + " --set train.max_steps=25");
  ASSERT_EQ(c.exit_code, 0) << c.output;
  const auto took = Lines(c.output, "took over the lock " + run + "/.dtrain.lock");
  ASSERT_EQ(took.size(), 1u) << c.output;
  EXPECT_NE(took[0].find(" runtime W "), std::string::npos) << took[0];  // another job's lock: a warning
  EXPECT_NE(c.output.find("pid=" + pid + " "), std::string::npos) << c.output;
  EXPECT_EQ(ReadFile(run + "/.dtrain.lock"), "");  // released cleanly at the end
}

// Was: a restart by --max-restarts after rank 0 was killed warned twice that it "took over the lock ... of a job that
// ended without releasing it" (run.dir's and the checkpoint store's), of its own job's attempt before. Now one info
// line each, naming the restart.
TEST(RunDirLockE2E, ARestartTakesOverItsOwnAttemptsLocksWithoutAWarning) {
  DT_SKIP_WITHOUT_FASHION_MNIST();
  TempDir dir;
  const std::string run = dir.path() + "/run";
  ProcessResult r = RunCommand("DTRAIN_FAULT=rank=0,step=3,action=kill,attempt=0 " + DtrainBin() +
                               " launch --nproc-per-node 2 --max-restarts 1 " + kCiConfig + kCommon +
                               " --set train.max_steps=6 --set checkpoint.every_steps=2 --set run.dir=" + run);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const auto took = Lines(r.output, "took over the lock");
  ASSERT_EQ(took.size(), 2u) << r.output;  // .dtrain.lock and checkpoints/.dtrain-owner
  for (const auto& line : took) {
    EXPECT_NE(line.find(" runtime I "), std::string::npos) << line;
    EXPECT_NE(line.find("(the attempt before this restart: DTRAIN_RESTART_COUNT=1)"), std::string::npos) << line;
  }
}

TEST(CheckpointSafetyE2E, ResumeNeverRefusesExistingCheckpointsAndOverwriteMovesThemAside) {
  DT_SKIP_WITHOUT_FASHION_MNIST();
  TempDir dir;
  const std::string run = dir.path() + "/run", ck = run + "/checkpoints";
  const std::string train = DtrainBin() + " train " + kCiConfig + kCommon + " --set checkpoint.every_steps=10" +
                            " --set checkpoint.keep_last=1 --set run.dir=" + run;
  ProcessResult first = RunCommand(train + " --set train.max_steps=30");
  ASSERT_EQ(first.exit_code, 0) << first.output;
  ASSERT_EQ(ReadFile(ck + "/latest"), "step-00000030\n");
  const std::string params30 = ReadFile(ck + "/step-00000030/params.bin");

  // A fresh run on top of them: refused, nothing touched.
  ProcessResult never = RunCommand(train + " --resume never --set train.max_steps=20");
  EXPECT_EQ(never.exit_code, 2) << never.output;
  EXPECT_NE(never.output.find("checkpoint.resume=never, but " + ck + " holds checkpoints (newest step-00000030)"),
            std::string::npos)
      << never.output;
  EXPECT_NE(never.output.find("checkpoint.resume: auto"), std::string::npos) << never.output;
  EXPECT_NE(never.output.find("--overwrite"), std::string::npos) << never.output;
  EXPECT_EQ(ReadFile(ck + "/latest"), "step-00000030\n");
  EXPECT_EQ(ReadFile(ck + "/step-00000030/params.bin"), params30);

  // With overwrite: moved aside first (said so), the new run's saves survive retention and `latest` names them.
  ProcessResult over = RunCommand(train + " --resume never --overwrite --set train.max_steps=20");
  ASSERT_EQ(over.exit_code, 0) << over.output;
  EXPECT_NE(over.output.find("moved the 1 old step directory of " + ck + " aside to " + ck + ".overwritten-"),
            std::string::npos)
      << over.output;
  EXPECT_EQ(ReadFile(ck + "/latest"), "step-00000020\n");
  ProcessResult list = RunCommand(DtrainBin() + " ckpt list " + ck);
  EXPECT_EQ(Lines(list.output, "step-000000").size(), 1u) << list.output;
  const auto pos = over.output.find(ck + ".overwritten-");
  const std::string aside = over.output.substr(pos, over.output.find_first_of(" \n", pos) - pos);
  EXPECT_EQ(ReadFile(aside + "/step-00000030/params.bin"), params30);
  ProcessResult verify = RunCommand(DtrainBin() + " ckpt verify " + aside);
  EXPECT_EQ(verify.exit_code, 0) << verify.output;
}

TEST(CheckpointSafetyE2E, EveryCheckpointCorruptIsRefusedListingEachAndNothingIsDeleted) {
  DT_SKIP_WITHOUT_FASHION_MNIST();
  TempDir dir;
  const std::string run = dir.path() + "/run", ck = run + "/checkpoints";
  const std::string train =
      DtrainBin() + " train " + kCiConfig + kCommon + " --set checkpoint.every_steps=10 --set run.dir=" + run;
  ProcessResult first = RunCommand(train + " --set train.max_steps=20");
  ASSERT_EQ(first.exit_code, 0) << first.output;
  // One flipped bit in each manifest.
  std::vector<std::string> before;
  for (const std::string step : {"step-00000010", "step-00000020"}) {
    std::string m = ReadFile(ck + "/" + step + "/manifest.pb");
    ASSERT_GT(m.size(), 40u);
    m[40] ^= 0x04;
    WriteFile(ck + "/" + step + "/manifest.pb", m);
    before.push_back(m);
  }
  ProcessResult verify = RunCommand(DtrainBin() + " ckpt verify " + ck);
  EXPECT_EQ(verify.exit_code, 2) << verify.output;
  EXPECT_NE(verify.output.find("step-00000010  BAD: " + ck + "/step-00000010/manifest.pb: checksum mismatch"),
            std::string::npos)
      << verify.output;
  ProcessResult inspect = RunCommand(DtrainBin() + " ckpt inspect " + ck + " --step 20");
  EXPECT_EQ(inspect.exit_code, 2) << inspect.output;
  EXPECT_NE(inspect.output.find(ck + "/step-00000020/manifest.pb: checksum mismatch"), std::string::npos)
      << inspect.output;

  ProcessResult resumed = RunCommand(train + " --set train.max_steps=40");
  EXPECT_EQ(resumed.exit_code, 2) << resumed.output;
  EXPECT_NE(resumed.output.find("none of the checkpoints in " + ck + " verifies"), std::string::npos) << resumed.output;
  EXPECT_NE(resumed.output.find("step-00000020: " + ck + "/step-00000020/manifest.pb: checksum mismatch"),
            std::string::npos)
      << resumed.output;
  EXPECT_NE(resumed.output.find("step-00000010: " + ck + "/step-00000010/manifest.pb: checksum mismatch"),
            std::string::npos)
      << resumed.output;
  EXPECT_EQ(ReadFile(ck + "/step-00000010/manifest.pb"), before[0]);
  EXPECT_EQ(ReadFile(ck + "/step-00000020/manifest.pb"), before[1]);
  EXPECT_EQ(ReadFile(ck + "/latest"), "step-00000020\n");
}

// The user's mistakes at the start (issue 38): `--resume 10` while step-20 and step-30 exist (training on would
// replace them) and `--resume 99999` (never saved) both exit 2 naming what exists, and write nothing to run.dir (the
// user's edited config.yaml stays); --overwrite moves the newer ones aside and trains on from step 10.
TEST(CheckpointSafetyE2E, ResumeAtAnOlderOrMissingStepExits2NamingTheCheckpointsAndWritesNothing) {
  DT_SKIP_WITHOUT_FASHION_MNIST();
  TempDir dir;
  const std::string run = dir.path() + "/run", ck = run + "/checkpoints";
  const std::string train = DtrainBin() + " train " + kCiConfig + kCommon +
                            " --set checkpoint.every_steps=10 --set train.max_steps=30" + " --set run.dir=" + run;
  ProcessResult first = RunCommand(train);
  ASSERT_EQ(first.exit_code, 0) << first.output;
  WriteFile(run + "/config.yaml", "# my notes\n");
  const std::string final_weights = ReadFile(run + "/final.safetensors");
  const std::string metrics = ReadFile(run + "/metrics.jsonl");

  ProcessResult older = RunCommand(train + " --resume 10");
  EXPECT_EQ(older.exit_code, 2) << older.output;
  EXPECT_NE(
      older.output.find("checkpoint.resume=10: " + ck + " holds 2 newer checkpoint(s) (step-00000020, step-00000030)"),
      std::string::npos)
      << older.output;
  EXPECT_NE(older.output.find("--overwrite"), std::string::npos) << older.output;

  ProcessResult missing = RunCommand(train + " --resume 99999");
  EXPECT_EQ(missing.exit_code, 2) << missing.output;
  EXPECT_NE(missing.output.find("step 99999 does not exist in " + ck +
                                " (its checkpoints: step-00000010, step-00000020, step-00000030)"),
            std::string::npos)
      << missing.output;
  EXPECT_EQ(missing.output.find("incomplete save"), std::string::npos) << missing.output;

  EXPECT_EQ(ReadFile(run + "/config.yaml"), "# my notes\n");
  EXPECT_EQ(ReadFile(run + "/final.safetensors"), final_weights);
  EXPECT_EQ(ReadFile(run + "/metrics.jsonl"), metrics);
  EXPECT_EQ(ReadFile(ck + "/latest"), "step-00000030\n");

  ProcessResult over = RunCommand(train + " --resume 10 --overwrite");
  ASSERT_EQ(over.exit_code, 0) << over.output;
  EXPECT_NE(over.output.find("moved the 2 checkpoint(s) newer than step 10 (step-00000020, step-00000030) aside to " +
                             ck + ".overwritten-"),
            std::string::npos)
      << over.output;
  EXPECT_NE(over.output.find("resumed from " + ck + "/step-00000010: step 10"), std::string::npos) << over.output;
  EXPECT_EQ(ReadFile(ck + "/latest"), "step-00000030\n");
}

// Every entry under `dir` with, for a file, its modification time (ns) and contents: what "changes nothing" compares.
std::map<std::string, std::string> DiskState(const std::string& dir) {
  std::map<std::string, std::string> state;
  for (const auto& e : std::filesystem::recursive_directory_iterator(dir)) {
    std::string what = "dir";
    if (e.is_regular_file()) {
      struct stat st;
      stat(e.path().c_str(), &st);
      what = std::to_string(st.st_mtim.tv_sec) + "." + std::to_string(st.st_mtim.tv_nsec) + " " +
             ReadFile(e.path().string());
    }
    state[e.path().string()] = what;
  }
  return state;
}

TEST(CheckpointSafetyE2E, AFinishedRunStartedAgainChangesNothingOnDisk) {
  DT_SKIP_WITHOUT_FASHION_MNIST();
  TempDir dir;
  const std::string run = dir.path() + "/run";
  const std::string sets = kCommon + " --set train.max_steps=4 --set run.dir=" + run;
  const ProcessResult first = RunCommand(DtrainBin() + " train " + kCiConfig + sets);
  ASSERT_EQ(first.exit_code, 0) << first.output;
  const std::map<std::string, std::string> before = DiskState(run);
  ASSERT_EQ(before.count(run + "/config.yaml"), 1u);
  ASSERT_EQ(before.count(run + "/.dtrain.lock"), 1u);

  // The same command again (a requeue of a job that had finished): nothing to do, exit 0.
  const ProcessResult same = RunCommand(DtrainBin() + " train " + kCiConfig + sets);
  EXPECT_EQ(same.exit_code, 0) << same.output;
  EXPECT_NE(same.output.find(run + ": already done at step 4 of 4"), std::string::npos) << same.output;
  EXPECT_EQ(DiskState(run), before);

  // Another value: never trained with, so not "done" either: exit 2 naming it, by `dtrain train` and `dtrain launch`.
  const std::string refused = run +
                              ": this run finished at step 4 with another config than this start's (then -> now: "
                              "optim.lr: 0.001 -> 0.5): nothing was trained or changed. To train with the new values "
                              "give another run.dir, or start over here with --resume never --overwrite";
  const ProcessResult other = RunCommand(DtrainBin() + " train " + kCiConfig + sets + " --set optim.lr=0.5");
  EXPECT_EQ(other.exit_code, 2) << other.output;
  EXPECT_NE(other.output.find("dtrain: error: InvalidArgument: " + refused), std::string::npos) << other.output;
  EXPECT_EQ(DiskState(run), before);
  const ProcessResult launched =
      RunCommand(DtrainBin() + " launch --nproc-per-node 2 " + kCiConfig + sets + " --set optim.lr=0.5");
  EXPECT_EQ(launched.exit_code, 2) << launched.output;
  EXPECT_NE(launched.output.find(refused), std::string::npos) << launched.output;
  EXPECT_EQ(DiskState(run), before);
}

TEST(CkptCmdE2E, ReadOnlyCommandsOnAMissingPathCreateNothingAndExit2) {
  TempDir dir;
  const std::string missing = dir.path() + "/no/such/checkpoints";
  for (const std::string& verb :
       std::vector<std::string>{"list", "verify", "inspect", "export --out " + dir.path() + "/x.safetensors"}) {
    ProcessResult r = RunCommand(DtrainBin() + " ckpt " + verb + " " + missing);
    EXPECT_EQ(r.exit_code, 2) << verb << ": " << r.output;
    EXPECT_NE(r.output.find("no such checkpoint directory '" + missing + "'"), std::string::npos) << r.output;
    ProcessResult url = RunCommand(DtrainBin() + " ckpt " + verb + " file://" + missing);
    EXPECT_EQ(url.exit_code, 2) << verb << ": " << url.output;
  }
  EXPECT_FALSE(Exists(dir.path() + "/no"));
  EXPECT_FALSE(Exists(dir.path() + "/x.safetensors"));
}

}  // namespace
}  // namespace dtrain::testing
