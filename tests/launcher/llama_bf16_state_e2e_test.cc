// optim.state_dtype bf16 through the real binary on the CPU (configs/llama_tiny.yaml on byte tokens of a fixed text):
// AdamW with bf16 exp_avg / exp_avg_sq (stochastically rounded, kernels/optim_update.h) trains about as well as fp32
// state, a run interrupted after its checkpoint resumes to exactly the uninterrupted run's parameters and losses
// (the rounding bits follow from train.seed and the update number), a checkpoint of fp32 state resumes into a bf16
// run and back (converted, with one info line), ZeRO-1 shards bf16 state like the replicated optimizer keeps it, and
// the keys that cannot run here are refused by name.

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "tests/testing/llama_text.h"
#include "tests/testing/safetensors_diff.h"
#include "tests/testing/subprocess.h"

namespace dtrain::testing {
namespace {

const std::string kConfig = std::string(DT_SOURCE_DIR) + "/configs/llama_tiny.yaml";

// 60 steps, a loss line every 10, a synchronous checkpoint every 30; `state` is optim.state_dtype.
std::string Args(const std::string& dir, const std::string& run, const std::string& state) {
  return kConfig + " --set data.dataset=shards --set data.train_shards=" + dir +
         "/tok --set train.max_steps=60 --set train.log_every=10 --set checkpoint.every_steps=30" +
         " --set checkpoint.async=false --set run.tensorboard=false --set run.dir=" + dir + "/" + run +
         " --set optim.state_dtype=" + state;
}

std::string LossText(const std::string& line) {
  const auto p = line.find("\"loss\":");
  return p == std::string::npos ? "" : line.substr(p, line.find(',', p) - p);
}

TEST(LlamaBf16StateE2E, TrainsLikeFp32StateAndResumesExactly) {
  TempDir tmp;
  const std::string d = tmp.path();
  ASSERT_NO_FATAL_FAILURE(MakeLlamaTextData(d));

  const ProcessResult f32 = RunCommand(DtrainBin() + " train " + Args(d, "f32", "fp32"));
  ASSERT_EQ(f32.exit_code, 0) << f32.output;
  const ProcessResult full = RunCommand(DtrainBin() + " train " + Args(d, "full", "bf16"));
  ASSERT_EQ(full.exit_code, 0) << full.output;
  EXPECT_NE(full.output.find("optimizer state: 0.4 MiB"), std::string::npos) << full.output;  // 2 x 2 B x 107K
  const auto l32 = Lines(ReadFile(d + "/f32/metrics.jsonl"), "\"kind\":\"train\"");
  const auto lf = Lines(ReadFile(d + "/full/metrics.jsonl"), "\"kind\":\"train\"");
  ASSERT_EQ(l32.size(), 6u);
  ASSERT_EQ(lf.size(), 6u);
  // The loss falls from ~ln 256 = 5.55 well below it, and ends within 0.1 of the fp32-state run's.
  EXPECT_GT(Field(lf[0], "loss"), 4.0) << lf[0];
  EXPECT_LT(Field(lf[5], "loss"), Field(lf[0], "loss") - 1.0) << lf[5];
  std::printf("llama_tiny, 60 steps: final loss fp32 state %.4f, bf16 state %.4f\n", Field(l32[5], "loss"),
              Field(lf[5], "loss"));
  EXPECT_NEAR(Field(lf[5], "loss"), Field(l32[5], "loss"), 0.1);

  // Interrupted at step 45 (after the checkpoint of step 30), then restarted: the same parameters bit for bit and the
  // same loss lines (the bf16 state is saved as f32 and narrowed back exactly).
  const ProcessResult part =
      RunCommand("DTRAIN_FAULT=step=45,action=error " + DtrainBin() + " train " + Args(d, "part", "bf16"));
  ASSERT_NE(part.exit_code, 0) << part.output;
  const ProcessResult resumed =
      RunCommand("DTRAIN_RESTART_COUNT=1 " + DtrainBin() + " train " + Args(d, "part", "bf16"));
  ASSERT_EQ(resumed.exit_code, 0) << resumed.output;
  EXPECT_NE(resumed.output.find("resumed from " + d + "/part/checkpoints/step-00000030: step 30"), std::string::npos)
      << resumed.output;
  EXPECT_EQ(resumed.output.find("converted"), std::string::npos) << resumed.output;  // same dtypes: nothing to say
  EXPECT_EQ(MaxSafetensorsDiff(d + "/full/final.safetensors", d + "/part/final.safetensors"), 0.0);
  const auto lp = Lines(ReadFile(d + "/part/metrics.jsonl"), "\"kind\":\"train\"");
  ASSERT_EQ(lp.size(), 7u);  // steps 10..40 (attempt 0), then 40, 50, 60 (from step 30)
  for (size_t i = 0; i < 4; ++i) EXPECT_EQ(LossText(lp[i]), LossText(lf[i])) << lp[i];
  for (size_t i = 4; i < 7; ++i) EXPECT_EQ(LossText(lp[i]), LossText(lf[i - 1])) << lp[i];
}

TEST(LlamaBf16StateE2E, CheckpointsResumeAcrossStateDtypes) {
  TempDir tmp;
  const std::string d = tmp.path();
  ASSERT_NO_FATAL_FAILURE(MakeLlamaTextData(d));
  // An fp32-state run stopped after its step-30 checkpoint resumes with bf16 state (rounded once), and a bf16-state
  // run's checkpoint resumes with fp32 state (widened exactly); both finish and keep learning.
  for (const auto& [from, to] : {std::pair<std::string, std::string>{"fp32", "bf16"}, {"bf16", "fp32"}}) {
    const std::string run = "from_" + from;
    const ProcessResult part =
        RunCommand("DTRAIN_FAULT=step=45,action=error " + DtrainBin() + " train " + Args(d, run, from));
    ASSERT_NE(part.exit_code, 0) << part.output;
    const ProcessResult resumed = RunCommand("DTRAIN_RESTART_COUNT=1 " + DtrainBin() + " train " + Args(d, run, to));
    ASSERT_EQ(resumed.exit_code, 0) << resumed.output;
    const std::string saved = from == "fp32" ? "f32" : "bf16", now = to == "fp32" ? "f32" : "bf16";
    const std::string line =
        "optimizer state saved as " + saved + ", this run keeps it in " + now + " (optim.state_dtype): converted";
    EXPECT_NE(resumed.output.find(line), std::string::npos) << resumed.output;
    const auto l = Lines(ReadFile(d + "/" + run + "/metrics.jsonl"), "\"kind\":\"train\"");
    ASSERT_EQ(l.size(), 7u);
    EXPECT_LT(Field(l[6], "loss"), Field(l[0], "loss") - 1.0) << l[6];
  }
}

// ZeRO-1 with bf16 state on 2 CPU ranks (shards of bf16 exp_avg/exp_avg_sq, each range rounded with the bits of its
// global indices) against the replicated bf16-state optimizer on 2 ranks, 30 steps of the same global batch. They
// differ in float summation order only, as the fp32 pair in llama_e2e_test.cc (measured there: 2.2e-6); here a sum that
// lands on the other side of a stochastic-rounding threshold also moves a state value by one bf16 ulp. Measured:
// see the printed line; asserted 1e-3 on the weights (a wrong gradient or a lost update moves them by ~lr = 3e-3 per
// step) and 1e-3 on the loss lines. Then the ZeRO-1 run's checkpoint (gathered bf16 shards, saved as f32) resumes on
// one rank, replicated.
TEST(LlamaBf16StateE2E, Zero1ShardsBf16StateLikeReplicated) {
  TempDir tmp;
  const std::string d = tmp.path();
  ASSERT_NO_FATAL_FAILURE(MakeLlamaTextData(d));
  const std::string common = kConfig + " --set data.dataset=shards --set data.train_shards=" + d +
                             "/tok --set train.max_steps=30 --set train.log_every=10 --set run.tensorboard=false" +
                             " --set dist.bucket_mb=0.05 --set optim.state_dtype=bf16 --set data.batch_size=4" +
                             " --set checkpoint.every_steps=30 --set checkpoint.async=false";
  const std::string launch = DtrainBin() + " launch --nproc-per-node 2 --oversubscribe " + common;
  const ProcessResult zero1 = RunCommand(launch + " --set dist.zero1=true --set run.dir=" + d + "/zero1");
  ASSERT_EQ(zero1.exit_code, 0) << zero1.output;
  const ProcessResult plain = RunCommand(launch + " --set run.dir=" + d + "/plain");
  ASSERT_EQ(plain.exit_code, 0) << plain.output;
  const double diff = MaxSafetensorsDiff(d + "/zero1/final.safetensors", d + "/plain/final.safetensors");
  std::printf("llama_tiny, bf16 state, 30 steps: max |w_zero1 - w_replicated| = %g\n", diff);
  EXPECT_GE(diff, 0.0);
  EXPECT_LT(diff, 1e-3);
  const auto lz = Lines(ReadFile(d + "/zero1/metrics.jsonl"), "\"kind\":\"train\"");
  const auto lp = Lines(ReadFile(d + "/plain/metrics.jsonl"), "\"kind\":\"train\"");
  ASSERT_EQ(lz.size(), 3u);
  ASSERT_EQ(lp.size(), 3u);
  for (size_t i = 0; i < 3; ++i) EXPECT_NEAR(Field(lz[i], "loss"), Field(lp[i], "loss"), 1e-3) << lz[i];
  EXPECT_LT(Field(lz[2], "loss"), Field(lz[0], "loss") - 1.0);
  // The ZeRO-1 checkpoint of step 30 continues on one rank to step 40 (replicated, batch 8: the same global batch).
  const ProcessResult one =
      RunCommand(DtrainBin() + " train " + common +
                 " --set train.max_steps=40 --set data.batch_size=8 --set run.dir=" + d + "/zero1");
  ASSERT_EQ(one.exit_code, 0) << one.output;
  EXPECT_NE(one.output.find("resumed from " + d + "/zero1/checkpoints/step-00000030: step 30"), std::string::npos)
      << one.output;
  const auto lo = Lines(ReadFile(d + "/zero1/metrics.jsonl"), "\"kind\":\"train\"");
  ASSERT_EQ(lo.size(), 4u);
  EXPECT_LT(Field(lo[3], "loss"), Field(lo[0], "loss") - 1.0) << lo[3];
}

TEST(LlamaBf16StateE2E, RefusesWhatCannotRunHere) {
  TempDir tmp;
  const std::string base = DtrainBin() + " train " + kConfig + " --set train.max_steps=1 --set run.tensorboard=false" +
                           " --set run.dir=" + tmp.path() + "/r";
  // bf16 and split masters need bf16 compute on CUDA.
  for (const std::string masters : {"bf16", "split"}) {
    const ProcessResult r = RunCommand(base + " --set train.master_weights=" + masters);
    EXPECT_NE(r.exit_code, 0) << r.output;
    EXPECT_NE(r.output.find("train.master_weights: " + masters + " needs train.precision bf16 or fp8 on CUDA"),
              std::string::npos)
        << r.output;
  }
  // So do bf16 gradients.
  const ProcessResult grads = RunCommand(base + " --set train.gradients=bf16");
  EXPECT_NE(grads.exit_code, 0) << grads.output;
  EXPECT_NE(grads.output.find("train.gradients: bf16 needs train.precision bf16 or fp8 on CUDA"), std::string::npos)
      << grads.output;
  // Only adamw keeps bf16 state.
  const ProcessResult sgd = RunCommand(base + " --set optim.name=sgd --set optim.state_dtype=bf16");
  EXPECT_NE(sgd.exit_code, 0) << sgd.output;
  EXPECT_NE(sgd.output.find("optim.state_dtype bf16 is not supported by optim.name sgd"), std::string::npos)
      << sgd.output;
  // A model other than llama keeps f32 masters (GPT-2 here, on the CPU).
  const ProcessResult gpt2 = RunCommand(DtrainBin() + " train " + std::string(DT_SOURCE_DIR) +
                                        "/configs/gpt2_tiny.yaml --set train.max_steps=1 --set "
                                        "run.tensorboard=false --set train.master_weights=bf16 --set run.dir=" +
                                        tmp.path() + "/g");
  EXPECT_NE(gpt2.exit_code, 0) << gpt2.output;
  EXPECT_NE(gpt2.output.find("train.master_weights: bf16 is not supported by model.kind gpt2"), std::string::npos)
      << gpt2.output;
  const ProcessResult gpt2_split = RunCommand(DtrainBin() + " train " + std::string(DT_SOURCE_DIR) +
                                              "/configs/gpt2_tiny.yaml --set train.max_steps=1 --set "
                                              "run.tensorboard=false --set train.master_weights=split --set run.dir=" +
                                              tmp.path() + "/g3");
  EXPECT_NE(gpt2_split.exit_code, 0) << gpt2_split.output;
  EXPECT_NE(gpt2_split.output.find("train.master_weights: split is not supported by model.kind gpt2"),
            std::string::npos)
      << gpt2_split.output;
  const ProcessResult gpt2_grads = RunCommand(DtrainBin() + " train " + std::string(DT_SOURCE_DIR) +
                                              "/configs/gpt2_tiny.yaml --set train.max_steps=1 --set "
                                              "run.tensorboard=false --set train.gradients=bf16 --set run.dir=" +
                                              tmp.path() + "/g2");
  EXPECT_NE(gpt2_grads.exit_code, 0) << gpt2_grads.output;
  EXPECT_NE(gpt2_grads.output.find("train.gradients: bf16 is not supported by model.kind gpt2"), std::string::npos)
      << gpt2_grads.output;
}

}  // namespace
}  // namespace dtrain::testing
