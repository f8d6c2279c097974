// The training step as one CUDA graph (runtime/train/step_graph.h) through the real binary, against the same run
// with train.cuda_graphs false. Where the kernels are the same in both runs the parameters after N steps must be
// equal bit for bit (the graph replays the eager kernels; the optimizer's staged constants are the argument path's):
// the MLP (cuBLASLt GEMMs), GPT-2 bf16 with gradient accumulation and dtrain's deterministic flash attention.
// The step reads its micro-batches where the loader put them: one graph per set of the loader's rotating device
// buffers, also with gradient accumulation. Across an epoch's evaluation the graphs are dropped and captured again.
// cuDNN picks its convolution and attention algorithms per process (and their backward may sum in a varying order),
// so the fp32 CNN and GPT-2 with cuDNN attention are compared within a tolerance; the bf16 CNN's graph-API plans are
// fixed by heuristics: bit for bit. fp16 (host-side loss scaling) stays eager and says why. GPU only.

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <sstream>
#include <string>
#include <vector>

#include "core/device_context.h"
#include "runtime/checkpoint/safetensors.h"
#include "tests/testing/subprocess.h"

namespace dtrain::testing {
namespace {

const std::string kConfigs = std::string(DT_SOURCE_DIR) + "/configs/";

// GPT-2 small enough for a test but with head size 64 and 128 tokens (flash and cuDNN attention run it).
const std::string kGpt2 = kConfigs + "gpt2_tiny.yaml --set model.gpt2.n_embd=128 --set model.gpt2.n_head=2" +
                          " --set model.gpt2.max_seq_len=128 --set train.precision=bf16";

// `dtrain train` on the GPU; returns its output (the run must succeed).
std::string Train(const std::string& env, const std::string& config_and_sets, bool graphs, const std::string& dir) {
  const std::string cmd = env + " " + DtrainBin() + " train " + config_and_sets +
                          " --set train.device=cuda --set run.tensorboard=false --set run.dir=" + dir +
                          " --set train.cuda_graphs=" + (graphs ? "true" : "false");
  ProcessResult r = RunCommand(cmd);
  EXPECT_EQ(r.exit_code, 0) << cmd << "\n" << r.output;
  return r.output;
}

int Count(const std::string& text, const std::string& what) {
  int n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

std::vector<runtime::NamedTensor> Params(const std::string& dir) {
  std::vector<runtime::NamedTensor> t;
  const Status st = runtime::ReadSafetensors(dir + "/final.safetensors", &t);
  EXPECT_TRUE(st.ok()) << st.ToString();
  return t;
}

// Max |a - b| over every parameter, and the largest |b| (the scale).
void Compare(const std::string& a, const std::string& b, double* max_diff, double* scale) {
  const auto pa = Params(a), pb = Params(b);
  ASSERT_EQ(pa.size(), pb.size());
  *max_diff = *scale = 0;
  for (size_t i = 0; i < pa.size(); ++i) {
    ASSERT_EQ(pa[i].name, pb[i].name);
    ASSERT_EQ(pa[i].data.size(), pb[i].data.size()) << pa[i].name;
    for (size_t k = 0; k < pa[i].data.size(); ++k) {
      *max_diff = std::max(*max_diff, std::fabs(static_cast<double>(pa[i].data[k]) - pb[i].data[k]));
      *scale = std::max(*scale, std::fabs(static_cast<double>(pb[i].data[k])));
    }
  }
}

void ExpectBitwiseEqual(const std::string& a, const std::string& b) {
  const auto pa = Params(a), pb = Params(b);
  ASSERT_EQ(pa.size(), pb.size());
  for (size_t i = 0; i < pa.size(); ++i) {
    ASSERT_EQ(pa[i].name, pb[i].name);
    EXPECT_TRUE(pa[i].data == pb[i].data) << pa[i].name << " differs between the graphed and the eager run";
  }
}

#define DT_SKIP_WITHOUT_GPU() \
  if (CudaDeviceCount() == 0) GTEST_SKIP() << "no CUDA device: the CUDA graph step needs a GPU"

// One graph per set of the loader's device buffers: steps 3 and 4 read the two sets, no third graph follows.
void ExpectTwoGraphs(const std::string& out) {
  EXPECT_EQ(Count(out, "CUDA graph: step 3 captured"), 1) << out;
  EXPECT_EQ(Count(out, "CUDA graph: step 4 captured"), 1) << out;
  EXPECT_EQ(Count(out, "graph 3 for"), 0) << out;
}

// 1000 MLP steps cross the end of epoch 1 (937 steps of 64): the evaluation drops the graph, a new one follows.
TEST(StepGraphE2E, MlpGraphedEqualsEagerBitwiseAcrossAnEpoch) {
  DT_SKIP_WITHOUT_GPU();
  TempDir dir;
  const std::string run = kConfigs + "fashion_mnist_mlp.yaml --set train.max_steps=1000 --set train.log_every=100";
  const std::string out = Train("", run, true, dir.path() + "/graph");
  Train("", run, false, dir.path() + "/eager");
  ExpectTwoGraphs(out);
  EXPECT_GE(Count(out, "captured ("), 4) << "no new captures after the epoch's evaluation\n" << out;
  ExpectBitwiseEqual(dir.path() + "/graph", dir.path() + "/eager");
}

// Three micro-batches a step from the loader: the graphed step takes all three before queueing any work on them
// (the loader keeps 6 device buffers), and steps alternate between two buffer sets.
TEST(StepGraphE2E, MlpGraphedEqualsEagerBitwiseWithOddAccumulation) {
  DT_SKIP_WITHOUT_GPU();
  TempDir dir;
  const std::string run = kConfigs + "fashion_mnist_mlp.yaml --set train.max_steps=300 --set train.grad_accum_steps=3";
  const std::string out = Train("", run, true, dir.path() + "/graph");
  Train("", run, false, dir.path() + "/eager");
  ExpectTwoGraphs(out);
  ExpectBitwiseEqual(dir.path() + "/graph", dir.path() + "/eager");
}

TEST(StepGraphE2E, Gpt2FlashAttentionGraphedEqualsEagerBitwiseWithAccumulation) {
  DT_SKIP_WITHOUT_GPU();
  TempDir dir;
  const std::string run = kGpt2 + " --set train.max_steps=30 --set train.grad_accum_steps=2";
  const std::string out = Train("DTRAIN_ATTENTION=flash", run, true, dir.path() + "/graph");
  Train("DTRAIN_ATTENTION=flash", run, false, dir.path() + "/eager");
  EXPECT_EQ(Count(out, "CUDA graph: step 3 captured"), 1) << out;
  ExpectBitwiseEqual(dir.path() + "/graph", dir.path() + "/eager");
}

// Trains `run` with and without the graph (env before the command): captured at step 3, parameters within 1e-2 of
// the largest one (cuDNN's algorithms and summation orders may differ between the two processes).
void ExpectGraphedCloseToEager(const std::string& env, const std::string& run) {
  TempDir dir;
  const std::string out = Train(env, run, true, dir.path() + "/graph");
  Train(env, run, false, dir.path() + "/eager");
  EXPECT_EQ(Count(out, "CUDA graph: step 3 captured"), 1) << out;
  double diff = 0, scale = 0;
  Compare(dir.path() + "/graph", dir.path() + "/eager", &diff, &scale);
  EXPECT_LE(diff, 1e-2 * scale) << "max |graphed - eager| " << diff << " (largest parameter " << scale << ")";
}

// cuDNN attention inside the graph: the same training within bf16 noise.
TEST(StepGraphE2E, Gpt2CudnnAttentionGraphedMatchesEager) {
  DT_SKIP_WITHOUT_GPU();
  ExpectGraphedCloseToEager("DTRAIN_ATTENTION=cudnn", kGpt2 + " --set train.max_steps=30");
}

TEST(StepGraphE2E, CnnFp32GraphedMatchesEager) {
  DT_SKIP_WITHOUT_GPU();
  ExpectGraphedCloseToEager("", kConfigs + "fashion_mnist_cnn.yaml --set train.max_steps=100 --set train.log_every=50" +
                                    " --set train.precision=fp32");
}

// The bf16 channels-last CNN (train.precision auto on a GPU): cuDNN's graph-API plans come from heuristics, not
// timing, and only deterministic engines are taken, so the graph replays exactly the eager step's kernels.
TEST(StepGraphE2E, CnnBf16GraphedEqualsEagerBitwise) {
  DT_SKIP_WITHOUT_GPU();
  TempDir dir;
  const std::string run = kConfigs + "fashion_mnist_cnn.yaml --set train.max_steps=100 --set train.log_every=50";
  const std::string out = Train("", run, true, dir.path() + "/graph");
  Train("", run, false, dir.path() + "/eager");
  EXPECT_EQ(Count(out, "CUDA graph: step 3 captured"), 1) << out;
  ExpectBitwiseEqual(dir.path() + "/graph", dir.path() + "/eager");
}

TEST(StepGraphE2E, Fp16LossScalingStaysEagerAndSaysWhy) {
  DT_SKIP_WITHOUT_GPU();
  TempDir dir;
  const std::string out = Train("", kGpt2 + " --set train.precision=fp16 --set train.max_steps=10", true, dir.path());
  EXPECT_NE(out.find("CUDA graphs off: fp16 dynamic loss scaling"), std::string::npos) << out;
  EXPECT_EQ(out.find("captured ("), std::string::npos) << out;
}

}  // namespace
}  // namespace dtrain::testing
