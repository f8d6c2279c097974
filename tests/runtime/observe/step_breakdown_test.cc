// Step-time breakdown: the progress-line text, each verdict rule at and below its threshold, the
// choice among several bottlenecks, and the window mean.

#include "runtime/observe/step_breakdown.h"

#include <gtest/gtest.h>

namespace dtrain::runtime {
namespace {

// A 100 ms step: each argument is then also its percentage.
StepPhases Step(double data, double fwd_bwd, double comm, double optim, double ckpt) {
  StepPhases p;
  p.data_ms = data;
  p.fwd_bwd_ms = fwd_bwd;
  p.comm_exposed_ms = comm;
  p.optim_ms = optim;
  p.ckpt_stall_ms = ckpt;
  p.step_ms = 100;
  return p;
}

TEST(StepBreakdownTest, FormatsShares) {
  StepPhases p = Step(38, 45, 8, 5, 0);
  EXPECT_DOUBLE_EQ(p.other_ms(), 4);
  EXPECT_EQ(FormatStepBreakdown(p), "data 38% | fwd+bwd 45% | comm 8% | optim 5% | ckpt 0% | other 4%");
  p.step_ms = 200;  // halves every share; other = 200 - 96 = 104 ms = 52%
  EXPECT_EQ(FormatStepBreakdown(p), "data 19% | fwd+bwd 23% | comm 4% | optim 3% | ckpt 0% | other 52%");
  // Phases adding up to more than the step (overlapping timers): other is 0, not negative.
  EXPECT_EQ(Step(30, 60, 10, 5, 0).other_ms(), 0);
  EXPECT_EQ(FormatStepBreakdown(StepPhases()), "");
}

// The schema's defaults, with the fashion_mnist_mlp batch.
TuningSettings Defaults() {
  TuningSettings s;
  s.batch_size = 64;
  return s;
}

TEST(StepBreakdownTest, EachRuleAtItsThreshold) {
  const TuningSettings s = Defaults();
  EXPECT_EQ(StepVerdict(Step(38, 45, 8, 5, 0), s),
            "input-bound: data wait 38% of the step; raise data.workers (4) or data.prefetch (4)");
  EXPECT_EQ(StepVerdict(Step(20, 70, 0, 5, 0), s),  // exactly 20%
            "input-bound: data wait 20% of the step; raise data.workers (4) or data.prefetch (4)");
  EXPECT_EQ(StepVerdict(Step(5, 60, 30, 5, 0), s),
            "communication-bound: exposed all-reduce 30% of the step; raise dist.bucket_mb (25), set "
            "dist.bf16_compress, or do more work per step (data.batch_size 64, train.grad_accum_steps 1)");
  EXPECT_EQ(StepVerdict(Step(5, 70, 5, 5, 12), s),
            "checkpoint-bound: checkpoint stall 12% of the step; raise checkpoint.every_steps (500) "
            "(checkpoint.async is on: the stall is the snapshot)");
  EXPECT_EQ(StepVerdict(Step(5, 60, 5, 26, 0), s),
            "optimizer-bound: optimizer 26% of the step; set dist.zero1 to shard the update, or raise "
            "train.grad_accum_steps (1)");
  EXPECT_EQ(StepVerdict(Step(5, 50, 5, 5, 0), s),  // other = 35%
            "host-bound: time outside the measured phases 35% of the step; record a trace (run.trace_steps) to "
            "see where the host spends it");
  EXPECT_EQ(StepVerdict(Step(5, 85, 5, 5, 0), s), "compute-bound: forward+backward 85% of the step (the healthy case)");
}

// Was: a communication-bound run with dist.bf16_compress on was told to set it; a checkpoint-bound one with async
// saves to set checkpoint.async, one with dist.zero1 to set dist.zero1.
TEST(StepBreakdownTest, AdviceReadsTheRunsSettings) {
  TuningSettings s = Defaults();
  s.bf16_compress = true;
  s.bucket_mb = 100;
  s.grad_accum_steps = 4;
  s.checkpoint_async = false;
  s.checkpoint_every_steps = 50;
  s.zero1 = true;
  EXPECT_EQ(StepVerdict(Step(5, 60, 30, 5, 0), s),
            "communication-bound: exposed all-reduce 30% of the step; raise dist.bucket_mb (100), or do more work per "
            "step (data.batch_size 64, train.grad_accum_steps 4)");
  EXPECT_EQ(StepVerdict(Step(5, 70, 5, 5, 12), s),
            "checkpoint-bound: checkpoint stall 12% of the step; set checkpoint.async or raise "
            "checkpoint.every_steps (50)");
  EXPECT_EQ(StepVerdict(Step(5, 60, 5, 26, 0), s),
            "optimizer-bound: optimizer 26% of the step; raise train.grad_accum_steps (4) (dist.zero1 already shards "
            "the update)");
  s.offload = true;  // the update's time is the state's trip over PCIe (already sharded here)
  EXPECT_EQ(StepVerdict(Step(5, 60, 5, 26, 0), s),
            "optimizer-bound: optimizer 26% of the step; optim.offload cpu moves the optimizer state not kept on the "
            "GPU over PCIe each update: raise train.grad_accum_steps (4), or keep more of it on the GPU (optim.offload "
            "auto keeps what the memory plan leaves, a stronger activation checkpointing policy leaves more; dtrain "
            "launch --dry-run)");
  s.zero1 = false;  // sharding the offloaded state divides each rank's trip
  EXPECT_EQ(StepVerdict(Step(5, 60, 5, 26, 0), s),
            "optimizer-bound: optimizer 26% of the step; optim.offload cpu moves the optimizer state not kept on the "
            "GPU over PCIe each update: raise train.grad_accum_steps (4), set dist.zero1 on several GPUs (each rank "
            "moves only its shard), or keep more of it on the GPU (optim.offload auto keeps what the memory plan "
            "leaves, a stronger activation checkpointing policy leaves more; dtrain launch --dry-run)");
}

TEST(StepBreakdownTest, BelowThresholdsNoVerdict) {
  // data 19%, comm 19%, ckpt 9%, optim 24%, other 0%, fwd+bwd 29% < 60%: nothing dominates.
  EXPECT_EQ(StepVerdict(Step(19, 29, 19, 24, 9), Defaults()), "");
  EXPECT_EQ(StepVerdict(StepPhases(), Defaults()), "");
}

TEST(StepBreakdownTest, LargestBottleneckWins) {
  // Input (25%) and communication (30%) both fire; communication has the larger share.
  EXPECT_EQ(StepVerdict(Step(25, 40, 30, 5, 0), Defaults()).rfind("communication-bound: exposed all-reduce 30%", 0),
            0u);
  // A checkpoint stall of 15% passes its 10% threshold but loses to data wait at 22%.
  EXPECT_EQ(StepVerdict(Step(22, 58, 0, 5, 15), Defaults()).rfind("input-bound: data wait 22%", 0), 0u);
}

TEST(StepBreakdownTest, WindowMean) {
  StepTimeWindow w;
  EXPECT_EQ(w.Mean().step_ms, 0);
  w.Add(Step(10, 60, 10, 10, 0));
  StepPhases b = Step(30, 40, 20, 0, 10);
  b.step_ms = 120;
  w.Add(b);
  EXPECT_EQ(w.count(), 2);
  const StepPhases m = w.Mean();
  EXPECT_DOUBLE_EQ(m.data_ms, 20);
  EXPECT_DOUBLE_EQ(m.fwd_bwd_ms, 50);
  EXPECT_DOUBLE_EQ(m.comm_exposed_ms, 15);
  EXPECT_DOUBLE_EQ(m.optim_ms, 5);
  EXPECT_DOUBLE_EQ(m.ckpt_stall_ms, 5);
  EXPECT_DOUBLE_EQ(m.step_ms, 110);
  w.Reset();
  EXPECT_EQ(w.count(), 0);
  EXPECT_EQ(w.Mean().data_ms, 0);
}

}  // namespace
}  // namespace dtrain::runtime
