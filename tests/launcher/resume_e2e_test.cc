// End-to-end tests of checkpoint/resume through the real binary (CPU, Fashion-MNIST CI config):
// exact resume after a failure through `dtrain launch --max-restarts`, resume at another world size (the same global
// batch, and a per-GPU batch with the schedule in samples), a worker killed in the middle of a save, and `dtrain ckpt`.

#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "core/device_context.h"
#include "tests/testing/safetensors_diff.h"
#include "tests/testing/sample_log_check.h"
#include "tests/testing/subprocess.h"

namespace dtrain::testing {
namespace {

const std::string kData = ::dtrain::testing::kFashionMnistDir;
const std::string kCiConfig = std::string(DT_SOURCE_DIR) + "/configs/fashion_mnist_mlp_ci.yaml";
// 40 steps of a 2 x 64 global batch, a progress line every 10 steps, a checkpoint every 20.
const std::string kCommon =
    " --set train.device=cpu --set train.eval=false --set train.log_every=10 --set train.max_steps=40"
    " --set checkpoint.every_steps=20";

// The `key` field of a metrics line, as written (compared as text: bit-exact runs print the same).
std::string FieldText(const std::string& line, const std::string& key) {
  const auto p = line.find("\"" + key + "\":");
  return p == std::string::npos ? "" : line.substr(p, line.find(',', p) - p);
}
std::string LossText(const std::string& line) { return FieldText(line, "loss"); }

// 2N steps uninterrupted vs. N steps, a failure, a restart by the launcher that resumes, N more: the
// same parameters bit for bit and the same loss lines (the same samples in the same steps, the same
// optimizer state and LR). Then the checkpoint of step 20 resumed by ONE rank with twice the batch:
// the same global batches, so the parameters agree up to float summation order.
TEST(ResumeE2E, TwoRanksResumeExactlyAfterAFailureAndAtAnotherWorldSize) {
  DT_SKIP_WITHOUT_FASHION_MNIST();
  TempDir dir;
  const std::string d = dir.path();
  const std::string launch = DtrainBin() + " launch --nproc-per-node 2 ";
  ProcessResult full =
      RunCommand(launch + kCiConfig + kCommon + " --set data.batch_size=64 --set run.dir=" + d + "/full");
  ASSERT_EQ(full.exit_code, 0) << full.output;
  // Attempt 0 fails at the start of step 30 (after the asynchronous save of step 20); attempt 1 resumes.
  ProcessResult part = RunCommand("DTRAIN_FAULT=step=30,action=error,attempt=0 " + launch + "--max-restarts 1 " +
                                  kCiConfig + kCommon + " --set data.batch_size=64 --set run.dir=" + d + "/part");
  ASSERT_EQ(part.exit_code, 0) << part.output;
  EXPECT_NE(part.output.find("resumed from " + d + "/part/checkpoints/step-00000020: step 20"), std::string::npos)
      << part.output;
  EXPECT_EQ(MaxSafetensorsDiff(d + "/full/final.safetensors", d + "/part/final.safetensors"), 0.0);

  const auto lf = Lines(ReadFile(d + "/full/metrics.jsonl"), "\"kind\":\"train\"");
  const auto lp = Lines(ReadFile(d + "/part/metrics.jsonl"), "\"kind\":\"train\"");
  ASSERT_EQ(lf.size(), 4u);
  ASSERT_EQ(lp.size(), 5u);  // steps 10, 20, 30 (attempt 0), then 30, 40 (attempt 1, from step 20)
  for (size_t i = 0; i < 3; ++i) EXPECT_EQ(LossText(lp[i]), LossText(lf[i])) << lp[i];
  EXPECT_EQ(LossText(lp[3]), LossText(lf[2])) << lp[3];
  EXPECT_EQ(LossText(lp[4]), LossText(lf[3])) << lp[4];
  // Each save's training stall went to metrics.
  EXPECT_EQ(Lines(ReadFile(d + "/full/metrics.jsonl"), "\"kind\":\"checkpoint\"").size(), 2u);

  // Training on from step 20 of part's store replaces its later checkpoints: refused without consent (issue 38),
  // --overwrite moves them aside first.
  ProcessResult one = RunCommand(
      DtrainBin() + " train " + kCiConfig + kCommon +
      " --set data.batch_size=128 --set checkpoint.resume=20 --set checkpoint.overwrite=true --set checkpoint.url=" +
      d + "/part/checkpoints --set run.dir=" + d + "/one");
  ASSERT_EQ(one.exit_code, 0) << one.output;
  EXPECT_NE(one.output.find("saved by 2 rank(s), now 1"), std::string::npos) << one.output;
  const double diff = MaxSafetensorsDiff(d + "/full/final.safetensors", d + "/one/final.safetensors");
  std::printf("2 ranks x 64 resumed as 1 rank x 128: max |w - w_uninterrupted| = %g\n", diff);
  EXPECT_GE(diff, 0.0);
  EXPECT_LT(diff, 1e-6);  // measured 1.5e-8: float summation order only

  // A global batch that does not divide the position resumes too: the sampler continues at sample 2560
  // of the epoch's permutation whatever the batch (which samples follow is checked in
  // tests/data/sampler_test.cc MidEpochResumeSameAndDifferentWorldSize).
  ProcessResult other = RunCommand(
      DtrainBin() + " train " + kCiConfig + kCommon +
      " --set data.batch_size=96 --set checkpoint.resume=20 --set checkpoint.overwrite=true --set checkpoint.url=" + d +
      "/part/checkpoints --set run.dir=" + d + "/other");
  EXPECT_EQ(other.exit_code, 0) << other.output;
  EXPECT_NE(other.output.find("2560 samples into the epoch"), std::string::npos) << other.output;
  EXPECT_NE(other.output.find("global batch was 128, now 96"), std::string::npos) << other.output;
}

// A global batch that changes at a resume (what `dtrain launch --elastic-batch per-gpu` does when a host goes) with
// schedule.samples_per_step: the LR, the run's length and train.max_steps follow samples seen. 2 ranks x 64 for 40
// steps, then 1 rank x 64: each later step is half a schedule step, so every second step's LR is the uninterrupted
// run's LR of a whole step, exactly; the run ends after the same 2 epochs of samples, each sample used once, in the
// same 128-sample groups as the uninterrupted run's steps.
TEST(ResumeE2E, PerGpuBatchAtAnotherWorldSizeKeepsTheScheduleAndLengthInSamples) {
  DT_SKIP_WITHOUT_FASHION_MNIST();
  TempDir dir;
  const std::string d = dir.path();
  const std::string args =
      kCiConfig +
      " --set train.device=cpu --set train.eval=false --set train.log_every=1 --set train.epochs=2"
      " --set data.batch_size=64 --set schedule.samples_per_step=128"
      " --set checkpoint.every_steps=40 --set checkpoint.keep_every=40 --set checkpoint.async=false";
  const std::string launch = DtrainBin() + " launch --nproc-per-node 2 ";
  RunCommand("mkdir -p " + d + "/full/samples " + d + "/part/samples");
  ProcessResult full =
      RunCommand("DTRAIN_SAMPLE_LOG=" + d + "/full/samples " + launch + args + " --set run.dir=" + d + "/full");
  ASSERT_EQ(full.exit_code, 0) << full.output;
  EXPECT_NE(full.output.find("done: 156 steps, 19968 samples"), std::string::npos) << full.output;  // 2 x 78 x 128
  ProcessResult part = RunCommand("DTRAIN_SAMPLE_LOG=" + d + "/part/samples DTRAIN_FAULT=step=45,action=error " +
                                  launch + args + " --set run.dir=" + d + "/part");
  ASSERT_NE(part.exit_code, 0) << part.output;
  // One rank resumes step 40 (5120 samples): 76 steps of 64 to the end of epoch 1, 156 in epoch 2.
  ProcessResult one = RunCommand("DTRAIN_SAMPLE_LOG=" + d + "/part/samples DTRAIN_RESTART_COUNT=1 " + DtrainBin() +
                                 " train " + args + " --set run.dir=" + d + "/part");
  ASSERT_EQ(one.exit_code, 0) << one.output;
  EXPECT_NE(one.output.find("global batch was 128, now 64"), std::string::npos) << one.output;
  EXPECT_NE(one.output.find("done: 272 steps, 19968 samples"), std::string::npos) << one.output;

  const auto lf = Lines(ReadFile(d + "/full/metrics.jsonl"), "\"kind\":\"train\"");
  ASSERT_EQ(lf.size(), 156u);
  auto lp = Lines(ReadFile(d + "/part/metrics.jsonl"), "\"kind\":\"train\"");
  ASSERT_EQ(lp.size(), 45u + 232u);  // attempt 1: steps 1..45; attempt 2: steps 41..272
  lp.erase(lp.begin(), lp.begin() + 45);
  for (int64_t s = 41; s <= 272; s += 2) {  // step s ran at schedule step 40 + (s - 41) / 2: full's step (s + 41) / 2
    const std::string& mine = lp[s - 41];
    EXPECT_NE(mine.find("\"step\":" + std::to_string(s) + ","), std::string::npos) << mine;
    EXPECT_EQ(FieldText(mine, "lr"), FieldText(lf[(s + 41) / 2 - 1], "lr")) << "step " << s;
  }
  EXPECT_NE(FieldText(lp[1], "lr"), FieldText(lp[0], "lr"));  // the half steps lie between

  const std::vector<SampleRecord> counted = CountedRecords(ReadSampleLogs(d + "/part/samples"));
  for (const auto& [epoch, once_more] : UsesPerEpoch(counted)) {
    EXPECT_EQ(once_more.first, 9984) << "epoch " << epoch << ": samples used exactly once";
    EXPECT_EQ(once_more.second, 0) << "epoch " << epoch << ": samples used more than once";
  }
  EXPECT_TRUE(SamplesByStep(counted, 128) == SamplesByStep(CountedRecords(ReadSampleLogs(d + "/full/samples")), 128));
  ProcessResult inspect = RunCommand(DtrainBin() + " ckpt inspect " + d + "/part/checkpoints");
  EXPECT_NE(inspect.output.find("19968 consumed, global batch 64"), std::string::npos) << inspect.output;

  // train.max_steps counts schedule steps too: 100 x 128 samples = step 40 + 120 steps of 64.
  ProcessResult capped =
      RunCommand(DtrainBin() + " train " + args + " --set train.max_steps=100" +
                 " --set checkpoint.resume=40 --set checkpoint.overwrite=true --set checkpoint.url=" + d +
                 "/part/checkpoints --set run.dir=" + d + "/capped");
  ASSERT_EQ(capped.exit_code, 0) << capped.output;
  EXPECT_NE(capped.output.find("done: 160 steps, 12800 samples"), std::string::npos) << capped.output;
}

// kill -9 while the checkpoint of step 20 is being written (its data files are there, its manifest
// is not): the next run skips it with a warning, resumes from step 10 and ends with the parameters of
// an uninterrupted run. `dtrain ckpt` reports the partial checkpoint, verifies and exports the rest.
TEST(ResumeE2E, KillDuringASaveLeavesThePreviousCheckpointUsable) {
  DT_SKIP_WITHOUT_FASHION_MNIST();
  TempDir dir;
  const std::string d = dir.path();
  const std::string args = kCiConfig + kCommon + " --set train.max_steps=30 --set checkpoint.every_steps=10";
  ProcessResult full = RunCommand(DtrainBin() + " train " + args + " --set run.dir=" + d + "/full");
  ASSERT_EQ(full.exit_code, 0) << full.output;
  ProcessResult killed = RunCommand("DTRAIN_FAULT=step=20,action=kill_in_ckpt " + DtrainBin() + " train " + args +
                                    " --set run.dir=" + d + "/run");
  EXPECT_TRUE(killed.signal == 9 || killed.exit_code == 137) << killed.output;
  const std::string ck = d + "/run/checkpoints";
  ProcessResult list = RunCommand(DtrainBin() + " ckpt list " + ck);
  ASSERT_EQ(list.exit_code, 0) << list.output;
  const auto l10 = Lines(list.output, "step-00000010 "), l20 = Lines(list.output, "step-00000020 ");
  ASSERT_EQ(l10.size(), 1u) << list.output;
  ASSERT_EQ(l20.size(), 1u) << list.output;
  EXPECT_NE(l10[0].find(" complete "), std::string::npos) << list.output;
  EXPECT_NE(l10[0].find("<- latest"), std::string::npos) << list.output;
  EXPECT_NE(l20[0].find(" partial "), std::string::npos) << list.output;
  ProcessResult verify = RunCommand(DtrainBin() + " ckpt verify " + ck);
  EXPECT_EQ(verify.exit_code, 2) << verify.output;
  EXPECT_NE(verify.output.find("step-00000020  BAD: step-00000020: no manifest.pb"), std::string::npos)
      << verify.output;

  ProcessResult resumed = RunCommand(DtrainBin() + " train " + args + " --set run.dir=" + d + "/run");
  ASSERT_EQ(resumed.exit_code, 0) << resumed.output;
  EXPECT_NE(resumed.output.find("step-00000020 skipped: step-00000020: no manifest.pb"), std::string::npos)
      << resumed.output;
  EXPECT_NE(resumed.output.find("step-00000010: step 10"), std::string::npos) << resumed.output;
  EXPECT_EQ(MaxSafetensorsDiff(d + "/full/final.safetensors", d + "/run/final.safetensors"), 0.0);
  // The restore is timed in the log and in metrics (its bytes: the data files of step 10).
  EXPECT_NE(resumed.output.find("restored " + ck + "/step-00000010: "), std::string::npos) << resumed.output;
  uint64_t bytes = 0;
  for (const auto& f : std::filesystem::directory_iterator(ck + "/step-00000010")) {
    if (f.path().extension() == ".bin") bytes += f.file_size();
  }
  const auto restore = Lines(ReadFile(d + "/run/metrics.jsonl"), "\"kind\":\"restore\"");
  ASSERT_EQ(restore.size(), 1u);
  EXPECT_NE(restore[0].find("\"step\":10,"), std::string::npos) << restore[0];
  EXPECT_NE(restore[0].find("\"bytes\":" + std::to_string(bytes)), std::string::npos) << restore[0] << " " << bytes;
  EXPECT_NE(restore[0].find("\"restore_s\":"), std::string::npos) << restore[0];
  EXPECT_NE(restore[0].find("\"read_s\":"), std::string::npos) << restore[0];
  EXPECT_NE(restore[0].find("\"copy_s\":"), std::string::npos) << restore[0];
  // The snapshot buffers were allocated in the background at the start: the first save (step 10) did not
  // wait for them.
  const auto saves = Lines(ReadFile(d + "/full/metrics.jsonl"), "\"kind\":\"checkpoint\"");
  ASSERT_EQ(saves.size(), 3u);
  const size_t at = saves[0].find("\"alloc_wait_ms\":");
  ASSERT_NE(at, std::string::npos) << saves[0];
  EXPECT_LT(std::strtod(saves[0].c_str() + at + 16, nullptr), 0.5) << saves[0];
  EXPECT_EQ(full.output.find("the save came before the snapshot buffers were allocated"), std::string::npos);

  ProcessResult ok = RunCommand(DtrainBin() + " ckpt verify " + ck);
  EXPECT_EQ(ok.exit_code, 0) << ok.output;
  EXPECT_EQ(Lines(ok.output, "  OK").size(), 3u) << ok.output;  // steps 10, 20 (saved again), 30
  ProcessResult inspect = RunCommand(DtrainBin() + " ckpt inspect " + ck);
  ASSERT_EQ(inspect.exit_code, 0) << inspect.output;
  EXPECT_NE(inspect.output.find("step           30 (optimizer adamw, step 30)"), std::string::npos) << inspect.output;
  EXPECT_NE(inspect.output.find("samples into it, 3840 consumed, global batch 128"), std::string::npos)
      << inspect.output;
  ProcessResult exp = RunCommand(DtrainBin() + " ckpt export " + ck + " --out " + d + "/w.safetensors");
  ASSERT_EQ(exp.exit_code, 0) << exp.output;
  EXPECT_EQ(MaxSafetensorsDiff(d + "/full/final.safetensors", d + "/w.safetensors"), 0.0);
}

// The GPU path: the snapshot is a D2H copy into pinned memory on the compute stream, written by the
// writer thread after an event. A failure after the save of step 20 and a resume end where an
// uninterrupted CUDA run ends. Tolerance 0: the same kernels on the same inputs in the same order.
TEST(ResumeE2E, CudaResumeAfterAFailureMatchesAnUninterruptedRun) {
  DT_SKIP_WITHOUT_FASHION_MNIST();
  if (CudaDeviceCount() == 0) GTEST_SKIP() << "no CUDA device: the snapshot path under test is the GPU one";
  TempDir dir;
  const std::string d = dir.path();
  const std::string args = kCiConfig + kCommon + " --set train.device=cuda";
  ProcessResult full = RunCommand(DtrainBin() + " train " + args + " --set run.dir=" + d + "/full");
  ASSERT_EQ(full.exit_code, 0) << full.output;
  ProcessResult failed = RunCommand("DTRAIN_FAULT=step=30,action=error " + DtrainBin() + " train " + args +
                                    " --set run.dir=" + d + "/run");
  ASSERT_EQ(failed.exit_code, 1) << failed.output;
  ProcessResult resumed = RunCommand(DtrainBin() + " train " + args + " --set run.dir=" + d + "/run");
  ASSERT_EQ(resumed.exit_code, 0) << resumed.output;
  EXPECT_NE(resumed.output.find("step-00000020: step 20"), std::string::npos) << resumed.output;
  EXPECT_EQ(MaxSafetensorsDiff(d + "/full/final.safetensors", d + "/run/final.safetensors"), 0.0);
}

}  // namespace
}  // namespace dtrain::testing
