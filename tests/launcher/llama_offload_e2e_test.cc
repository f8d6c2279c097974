// optim.offload cpu through the real binary on the CPU (configs/llama_tiny.yaml on byte tokens of a fixed text): the
// optimizer state in host memory, updated chunk by chunk (runtime/optim/offloaded_state.h), trains to the same
// parameters bit for bit as the state in place, in fp32 and bf16 state; its checkpoints are the same files, so a run
// interrupted after a checkpoint resumes with or without offload to the uninterrupted run's weights exactly; and
// ZeRO-1's shards offloaded on two ranks likewise. A kept part (optim.offload_keep_gib: the first elements of the state
// updated where the model is, the rest in host memory) trains to the same bits, checkpoints mid-run (the kept part
// settled into the checkpoint's state) and resumes with another kept part to them too.

#include <gtest/gtest.h>

#include <string>

#include "tests/testing/llama_text.h"
#include "tests/testing/safetensors_diff.h"
#include "tests/testing/subprocess.h"

namespace dtrain::testing {
namespace {

const std::string kConfig = std::string(DT_SOURCE_DIR) + "/configs/llama_tiny.yaml";

// 40 steps, a synchronous checkpoint every 20; `offload` is optim.offload, `state` optim.state_dtype.
std::string Args(const std::string& dir, const std::string& run, const std::string& offload,
                 const std::string& state = "fp32") {
  return kConfig + " --set data.dataset=shards --set data.train_shards=" + dir +
         "/tok --set train.max_steps=40 --set train.log_every=10 --set checkpoint.every_steps=20" +
         " --set checkpoint.async=false --set run.tensorboard=false --set run.dir=" + dir + "/" + run +
         " --set optim.offload=" + offload + " --set optim.state_dtype=" + state;
}

TEST(LlamaOffloadE2E, SameWeightsAsTheStateInPlaceAndResumesEitherWay) {
  TempDir tmp;
  const std::string d = tmp.path();
  ASSERT_NO_FATAL_FAILURE(MakeLlamaTextData(d));
  for (const std::string state : {"fp32", "bf16"}) {
    SCOPED_TRACE("optim.state_dtype " + state);
    const ProcessResult in_place = RunCommand(DtrainBin() + " train " + Args(d, "in_place_" + state, "none", state));
    ASSERT_EQ(in_place.exit_code, 0) << in_place.output;
    const ProcessResult off = RunCommand(DtrainBin() + " train " + Args(d, "offload_" + state, "cpu", state));
    ASSERT_EQ(off.exit_code, 0) << off.output;
    EXPECT_NE(off.output.find("(replicated, in host memory (optim.offload cpu))"), std::string::npos) << off.output;
    EXPECT_NE(off.output.find("optimizer state in page-locked host memory (optim.offload cpu)"), std::string::npos)
        << off.output;  // the memory plan's host line
    EXPECT_EQ(MaxSafetensorsDiff(d + "/in_place_" + state + "/final.safetensors",
                                 d + "/offload_" + state + "/final.safetensors"),
              0.0);
  }
  // Interrupted at step 30 with offload, resumed from step 20 without it, and the other way round.
  for (const auto& [first, then] : {std::pair<std::string, std::string>{"cpu", "none"}, {"none", "cpu"}}) {
    SCOPED_TRACE(first + " then " + then);
    const std::string run = "part_" + first;
    const ProcessResult part =
        RunCommand("DTRAIN_FAULT=step=30,action=error " + DtrainBin() + " train " + Args(d, run, first));
    ASSERT_NE(part.exit_code, 0) << part.output;
    const ProcessResult resumed = RunCommand("DTRAIN_RESTART_COUNT=1 " + DtrainBin() + " train " + Args(d, run, then));
    ASSERT_EQ(resumed.exit_code, 0) << resumed.output;
    EXPECT_NE(resumed.output.find("resumed from " + d + "/" + run + "/checkpoints/step-00000020: step 20"),
              std::string::npos)
        << resumed.output;
    EXPECT_EQ(MaxSafetensorsDiff(d + "/in_place_fp32/final.safetensors", d + "/" + run + "/final.safetensors"), 0.0);
  }
}

TEST(LlamaOffloadE2E, KeptPartSameWeightsAndResumesWithAnotherPart) {
  TempDir tmp;
  const std::string d = tmp.path();
  ASSERT_NO_FATAL_FAILURE(MakeLlamaTextData(d));
  const ProcessResult in_place = RunCommand(DtrainBin() + " train " + Args(d, "in_place", "none"));
  ASSERT_EQ(in_place.exit_code, 0) << in_place.output;
  // 2^-13 GiB: 16,384 of llama_tiny's ~107K elements of each AdamW state tensor; 2^-12: twice as many.
  const std::string keep = " --set optim.offload_keep_gib=0.0001220703125";
  const ProcessResult kept = RunCommand(DtrainBin() + " train " + Args(d, "kept", "cpu") + keep);
  ASSERT_EQ(kept.exit_code, 0) << kept.output;
  EXPECT_NE(kept.output.find("(replicated, in host memory (optim.offload cpu), 128 KiB of it kept on the device)"),
            std::string::npos)
      << kept.output;
  EXPECT_EQ(MaxSafetensorsDiff(d + "/in_place/final.safetensors", d + "/kept/final.safetensors"), 0.0);
  const ProcessResult part =
      RunCommand("DTRAIN_FAULT=step=30,action=error " + DtrainBin() + " train " + Args(d, "part", "cpu") + keep);
  ASSERT_NE(part.exit_code, 0) << part.output;
  const ProcessResult resumed = RunCommand("DTRAIN_RESTART_COUNT=1 " + DtrainBin() + " train " +
                                           Args(d, "part", "cpu") + " --set optim.offload_keep_gib=0.000244140625");
  ASSERT_EQ(resumed.exit_code, 0) << resumed.output;
  EXPECT_NE(resumed.output.find("resumed from " + d + "/part/checkpoints/step-00000020: step 20"), std::string::npos)
      << resumed.output;
  EXPECT_EQ(MaxSafetensorsDiff(d + "/in_place/final.safetensors", d + "/part/final.safetensors"), 0.0);
}

// dist.zero1 on two CPU ranks (`dtrain launch`): each rank's shard of the state in host memory trains to the same
// parameters bit for bit as the shards in place, and the offloaded run's checkpoint of step 20, resumed without
// offload, ends there too (the gathered state is the same files).
TEST(LlamaOffloadE2E, Zero1ShardsOffloadedOnTwoRanksSameWeightsAndCheckpoints) {
  TempDir tmp;
  const std::string d = tmp.path();
  ASSERT_NO_FATAL_FAILURE(MakeLlamaTextData(d));
  const auto launch = [&](const std::string& run, const std::string& offload) {
    return RunCommand(DtrainBin() + " launch --oversubscribe --nproc-per-node 2 " + Args(d, run, offload) +
                      " --set dist.zero1=true");
  };
  const ProcessResult in_place = launch("z_in_place", "none");
  ASSERT_EQ(in_place.exit_code, 0) << in_place.output;
  const ProcessResult off = launch("z_offload", "cpu");
  ASSERT_EQ(off.exit_code, 0) << off.output;
  EXPECT_NE(off.output.find("(ZeRO-1: sharded over 2 ranks, in host memory (optim.offload cpu))"), std::string::npos)
      << off.output;
  EXPECT_EQ(MaxSafetensorsDiff(d + "/z_in_place/final.safetensors", d + "/z_offload/final.safetensors"), 0.0);

  const std::string step20 = "/checkpoints/step-00000020";
  ASSERT_EQ(RunCommand("mkdir -p " + d + "/z_resumed/checkpoints && cp -r " + d + "/z_offload" + step20 + " " + d +
                       "/z_resumed/checkpoints/")
                .exit_code,
            0);
  const ProcessResult resumed = launch("z_resumed", "none");
  ASSERT_EQ(resumed.exit_code, 0) << resumed.output;
  EXPECT_NE(resumed.output.find("resumed from " + d + "/z_resumed" + step20 + ": step 20"), std::string::npos)
      << resumed.output;
  EXPECT_EQ(MaxSafetensorsDiff(d + "/z_in_place/final.safetensors", d + "/z_resumed/final.safetensors"), 0.0);
}

}  // namespace
}  // namespace dtrain::testing
