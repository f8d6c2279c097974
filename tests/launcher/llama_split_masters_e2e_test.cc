// train.master_weights split through the real binary on a GPU (configs/llama_tiny.yaml, bf16 compute, byte tokens of a
// fixed text): it trains like fp32 masters; its checkpoint holds the fp32 masters, joined exactly — the weights a
// finished run writes from it (restored: split again; exported: joined again) are the checkpoint's own bit for bit —
// and a split run's checkpoint resumes into fp32 masters. The CPU's refusal is in llama_bf16_state_e2e_test.cc. Every
// case needs a GPU and skips without one.

#include <gtest/gtest.h>

#include <cstdio>
#include <string>

#include "tests/testing/fixtures.h"
#include "tests/testing/llama_text.h"
#include "tests/testing/safetensors_diff.h"
#include "tests/testing/subprocess.h"

namespace dtrain::testing {
namespace {

const std::string kConfig = std::string(DT_SOURCE_DIR) + "/configs/llama_tiny.yaml";

// `steps` steps on CUDA in bf16, a loss line every 10, a synchronous checkpoint every 30; `masters` is
// train.master_weights.
std::string Args(const std::string& dir, const std::string& run, const std::string& masters, int steps) {
  return kConfig + " --set train.device=cuda --set train.precision=bf16 --set data.dataset=shards" +
         " --set data.train_shards=" + dir + "/tok --set train.max_steps=" + std::to_string(steps) +
         " --set train.log_every=10 --set checkpoint.every_steps=30 --set checkpoint.async=false" +
         " --set run.tensorboard=false --set run.dir=" + dir + "/" + run + " --set train.master_weights=" + masters;
}

TEST(LlamaSplitMastersE2E, TrainsLikeFp32MastersAndCheckpointsTheFp32Values) {
  DT_SKIP_WITHOUT_GPU("train.master_weights split");
  TempDir tmp;
  const std::string d = tmp.path();
  ASSERT_NO_FATAL_FAILURE(MakeLlamaTextData(d));
  const ProcessResult f32 = RunCommand(DtrainBin() + " train " + Args(d, "f32", "fp32", 60));
  ASSERT_EQ(f32.exit_code, 0) << f32.output;
  const ProcessResult split = RunCommand(DtrainBin() + " train " + Args(d, "split", "split", 60));
  ASSERT_EQ(split.exit_code, 0) << split.output;
  EXPECT_NE(split.output.find("(split masters, f32 gradients)"), std::string::npos) << split.output;
  const auto l32 = Lines(ReadFile(d + "/f32/metrics.jsonl"), "\"kind\":\"train\"");
  const auto ls = Lines(ReadFile(d + "/split/metrics.jsonl"), "\"kind\":\"train\"");
  ASSERT_EQ(l32.size(), 6u);
  ASSERT_EQ(ls.size(), 6u);
  std::printf("llama_tiny bf16, 60 steps: final loss fp32 masters %.4f, split masters %.4f\n", Field(l32[5], "loss"),
              Field(ls[5], "loss"));
  EXPECT_LT(Field(ls[5], "loss"), Field(ls[0], "loss") - 1.0) << ls[5];
  EXPECT_NEAR(Field(ls[5], "loss"), Field(l32[5], "loss"), 0.05);

  // A finished run without its weights file, started again: it restores the step-60 checkpoint (split) and writes
  // final.safetensors from it (joined): the checkpoint's values, bit for bit.
  const ProcessResult exported =
      RunCommand(DtrainBin() + " ckpt export " + d + "/split/checkpoints --out " + d + "/ckpt.safetensors");
  ASSERT_EQ(exported.exit_code, 0) << exported.output;
  std::remove((d + "/split/final.safetensors").c_str());
  const ProcessResult rewritten = RunCommand(DtrainBin() + " train " + Args(d, "split", "split", 60));
  ASSERT_EQ(rewritten.exit_code, 0) << rewritten.output;
  EXPECT_EQ(MaxSafetensorsDiff(d + "/ckpt.safetensors", d + "/split/final.safetensors"), 0.0);
}

TEST(LlamaSplitMastersE2E, ACheckpointResumesIntoFp32Masters) {
  DT_SKIP_WITHOUT_GPU("train.master_weights split");
  TempDir tmp;
  const std::string d = tmp.path();
  ASSERT_NO_FATAL_FAILURE(MakeLlamaTextData(d));
  const ProcessResult part =
      RunCommand("DTRAIN_FAULT=step=45,action=error " + DtrainBin() + " train " + Args(d, "r", "split", 60));
  ASSERT_NE(part.exit_code, 0) << part.output;
  const ProcessResult resumed =
      RunCommand("DTRAIN_RESTART_COUNT=1 " + DtrainBin() + " train " + Args(d, "r", "fp32", 60));
  ASSERT_EQ(resumed.exit_code, 0) << resumed.output;
  EXPECT_NE(resumed.output.find("resumed from " + d + "/r/checkpoints/step-00000030: step 30"), std::string::npos)
      << resumed.output;
  EXPECT_EQ(resumed.output.find("parameters saved as"), std::string::npos) << resumed.output;  // f32 both: as saved
  const auto l = Lines(ReadFile(d + "/r/metrics.jsonl"), "\"kind\":\"train\"");
  ASSERT_EQ(l.size(), 7u);
  EXPECT_LT(Field(l[6], "loss"), Field(l[0], "loss") - 1.0) << l[6];
}

}  // namespace
}  // namespace dtrain::testing
