// `dtrain launch` checks the whole run before any rank starts (runtime/train/run_check.h): a bad config,
// data that does not fit the model, a schedule longer than the run, or a Prometheus port in use is one message from
// the launcher (exit 2, every problem listed), printed once, with no mpirun started — also with --dry-run; and a run
// whose memory plan exceeds train.memory_budget_gib.

#include <gtest/gtest.h>

#include <fstream>
#include <string>

#include "core/device_context.h"
#include "tests/testing/subprocess.h"

namespace dtrain::testing {
namespace {

const std::string kMlp = std::string(DT_SOURCE_DIR) + "/configs/fashion_mnist_mlp.yaml";
const std::string kGpt2Tiny = std::string(DT_SOURCE_DIR) + "/configs/gpt2_tiny.yaml";
const std::string kLlamaTiny = std::string(DT_SOURCE_DIR) + "/configs/llama_tiny.yaml";

int Count(const std::string& text, const std::string& what) {
  int n = 0;
  for (size_t p = text.find(what); p != std::string::npos; p = text.find(what, p + 1)) ++n;
  return n;
}

// Runs `dtrain launch --nproc-per-node 2 CONFIG ARGS` and expects exit 2 with `why` in one launcher line.
void ExpectRejected(const std::string& config, const std::string& args, const std::string& why) {
  TempDir dir;
  const ProcessResult r = RunCommand(DtrainBin() + " launch --nproc-per-node 2 " + config + " " + args +
                                     " --set train.device=cpu --set run.dir=" + dir.path() + "/run");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_EQ(Count(r.output, why), 1) << "want '" << why << "' once:\n" << r.output;
  EXPECT_EQ(Count(r.output, "dtrain launch: error:"), 1) << r.output;
  // Rejected before any rank started: no mpirun banner, no rank line, no run directory.
  EXPECT_EQ(r.output.find("mpirun"), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("rank 0"), std::string::npos) << r.output;
  EXPECT_FALSE(std::ifstream(dir.path() + "/run/metrics.jsonl").good());
}

TEST(LaunchCheckE2E, ConfigErrorsAreOneMessageBeforeAnyRank) {
  ExpectRejected(kMlp, "--set optim.lr=fast", "expected a number in [0, 10], got 'fast'");
  ExpectRejected(kMlp, "--set model.kind=transformer", "transformer");
  ExpectRejected(kMlp, "--set data.dir=/nonexistent/fmnist",
                 "/nonexistent/fmnist/train-images-idx3-ubyte.gz not found");
}

// bf16 gradients are all-reduced as they are, but ZeRO-1 reduce-scatters fp32 gradients and all-gathers fp32 params:
// two ranks with dist.zero1 and bf16 gradients or 16-bit masters are refused before either starts, naming the keys.
TEST(LaunchCheckE2E, Bf16GradientsOrMastersWithZeroOneAreRefusedBeforeTheStart) {
  ExpectRejected(kLlamaTiny, "--set train.gradients=bf16 --set dist.zero1=true",
                 "train.gradients bf16 does not run with dist.zero1 on 2 ranks");
  ExpectRejected(kLlamaTiny, "--set train.master_weights=split --set dist.zero1=true",
                 "train.master_weights split does not run with dist.zero1 on 2 ranks");
}

TEST(LaunchCheckE2E, DataThatDoesNotFitTheModelIsRejected) {
  DT_SKIP_WITHOUT_FASHION_MNIST();
  ExpectRejected(kMlp, "--set model.mlp.input_dim=100", "model.mlp.input_dim 100");
  ExpectRejected(kMlp, "--set model.mlp.num_classes=5", "num_classes is 5");
  ExpectRejected(kMlp, "--set data.batch_size=40000", "no full step fits in an epoch");
  // Byte tokens (ids 0..255) against gpt2_tiny's 61-token vocabulary: was a bounds check at step 1.
  TempDir data;
  WriteFile(data.path() + "/input.txt", std::string(20000, 'a') + "\xff\xfe" + std::string(20000, 'b'));
  const ProcessResult conv = RunCommand(DtrainBin() + " data convert-text --out " + data.path() + "/tok --seq-len 64 " +
                                        data.path() + "/input.txt");
  ASSERT_EQ(conv.exit_code, 0) << conv.output;
  ExpectRejected(kGpt2Tiny, "--set data.dataset=shards --set data.train_shards=" + data.path() + "/tok",
                 "model.gpt2.vocab_size is 61: raise it to at least 256");
  ExpectRejected(kMlp, "--set data.dataset=shards --set data.train_shards=" + data.path() + "/tok",
                 "holds tokens, but model.kind mlp takes images");
  ExpectRejected(kMlp, "--set data.dataset=shards --set data.train_shards=" + data.path() + "/missing",
                 "data.train_shards");
}

// The model's constraints on synthetic tokens too (llama_tiny's default data): every worker used to find them at
// build time instead.
TEST(LaunchCheckE2E, ModelConstraintsAreCheckedOnSyntheticTokens) {
  ExpectRejected(kLlamaTiny, "--set model.llama.n_kv_head=3", "must be a multiple of model.llama.n_kv_head 3");
}

// Was: one problem per try (fix it, start again, meet the next).
TEST(LaunchCheckE2E, EveryProblemIsListedAtOnce) {
  DT_SKIP_WITHOUT_FASHION_MNIST();
  ExpectRejected(kMlp,
                 "--set model.mlp.input_dim=100 --set train.eval=false --set train.eval_every=5 "
                 "--set data.batch_size=40000",
                 "3 problems, each of which stops the run:\n  - ");
  TempDir dir;
  const ProcessResult r = RunCommand(DtrainBin() + " launch --nproc-per-node 2 " + kMlp +
                                     " --set model.mlp.input_dim=100 --set train.eval=false --set train.eval_every=5"
                                     " --set data.batch_size=40000 --set train.device=cpu");
  for (const char* each : {"\n  - train.eval_every 5 needs train.eval true", "\n  - data.dataset fashion_mnist",
                           "model.mlp.input_dim 100", "\n  - data.batch_size x train.grad_accum_steps x 2 ranks"}) {
    EXPECT_EQ(Count(r.output, each), 1) << each << "\n" << r.output;
  }
}

// What the workers used to fail on after the start, each with exit 2 inside mpirun's banner: a Prometheus port in
// use (rank 0's endpoint), GPT-2's padded vocabulary below the vocabulary (the embedding's build).
TEST(LaunchCheckE2E, APrometheusPortInUseAndAPaddingBelowTheVocabularyAreFoundBeforeTheStart) {
  const HeldLoopbackPort holder;
  ASSERT_NE(holder.port(), 0);
  const std::string port = std::to_string(holder.port());
  ExpectRejected(kGpt2Tiny, "--set run.prometheus_port=" + port,
                 "run.prometheus_port: cannot serve metrics on 127.0.0.1:" + port + ": Address already in use");
  ExpectRejected(kGpt2Tiny, "--set model.gpt2.vocab_size=100",
                 "model.gpt2.padded_vocab_size 64 is below model.gpt2.vocab_size 100 (the embedding needs a row per "
                 "token id): set it to 128");
}

// The memory plan (runtime/train/memory_fit.h): --dry-run prints it above the command; a budget the run cannot fit
// is refused before any rank starts, naming a knob that fits with its figure.
TEST(LaunchCheckE2E, TheMemoryPlanIsPrintedAndARunOverItsBudgetIsRejected) {
  const ProcessResult plan = RunCommand(DtrainBin() + " launch --dry-run --nproc-per-node 2 " + kLlamaTiny +
                                        " --set train.device=cpu --set model.llama.activation_checkpointing=selective");
  ASSERT_EQ(plan.exit_code, 0) << plan.output;
  EXPECT_EQ(plan.output.rfind("memory plan ", 0), 0u) << plan.output;
  EXPECT_NE(plan.output.find("  activations "), std::string::npos) << plan.output;
  EXPECT_NE(plan.output.find("  selective\n"), std::string::npos) << plan.output;
  EXPECT_LT(plan.output.find(" per rank\n"), plan.output.find("mpirun")) << plan.output;

  ExpectRejected(kLlamaTiny, "--set train.memory_budget_gib=0.004", "exceeds train.memory_budget_gib 0.004");
  ExpectRejected(kLlamaTiny, "--set train.memory_budget_gib=0.004",
                 "data.batch_size 4 (train.grad_accum_steps x2 keeps the global batch)");
}

// On a machine without a GPU (a login node; skipped on one with a GPU), a dry run of a GPU-only config (bf16) plans for
// the GPU it will run on and checks train.memory_budget_gib against that plan.
TEST(LaunchCheckE2E, DryRunWithoutAGpuPlansABf16RunForTheGpu) {
  if (CudaDeviceCount() > 0) GTEST_SKIP() << "this machine has a GPU: a dry run plans for it";
  const std::string bf16 =
      " --set train.device=auto --set train.precision=bf16 --set model.llama.activation_checkpointing=full";
  const ProcessResult plan = RunCommand(DtrainBin() + " launch --dry-run --nproc-per-node 1 " + kLlamaTiny + bf16);
  ASSERT_EQ(plan.exit_code, 0) << plan.output;
  EXPECT_EQ(plan.output.rfind("memory plan ", 0), 0u) << plan.output;
  EXPECT_NE(plan.output.find("(no GPU here: planned for a CUDA device, train.precision bf16 runs on GPUs only"),
            std::string::npos)
      << plan.output;
  // Also when the budget picks the checkpointing policy (the plan's config is then replaced: the note still names
  // the run's precision, once read from a dangling reference).
  const ProcessResult picked =
      RunCommand(DtrainBin() + " launch --dry-run --nproc-per-node 1 " + kLlamaTiny +
                 " --set train.device=auto --set train.precision=bf16 --set train.memory_budget_gib=1");
  ASSERT_EQ(picked.exit_code, 0) << picked.output;
  EXPECT_NE(picked.output.find("chosen to fit train.memory_budget_gib 1"), std::string::npos) << picked.output;
  EXPECT_NE(picked.output.find("train.precision bf16 runs on GPUs only"), std::string::npos) << picked.output;
  const ProcessResult over = RunCommand(DtrainBin() + " launch --dry-run --nproc-per-node 1 " + kLlamaTiny + bf16 +
                                        " --set train.memory_budget_gib=0.004");
  EXPECT_EQ(over.exit_code, 2) << over.output;
  EXPECT_NE(over.output.find("exceeds train.memory_budget_gib 0.004"), std::string::npos) << over.output;
  // Without --dry-run the run itself is refused: it cannot train here.
  const ProcessResult run = RunCommand(DtrainBin() + " launch --nproc-per-node 1 " + kLlamaTiny + bf16);
  EXPECT_EQ(run.exit_code, 2) << run.output;
  EXPECT_NE(run.output.find("train.precision: bf16 needs a GPU"), std::string::npos) << run.output;
}

TEST(LaunchCheckE2E, DryRunChecksTooAndWarmupLongerThanTheRunIsClippedWithOneWarning) {
  DT_SKIP_WITHOUT_FASHION_MNIST();
  const ProcessResult bad =
      RunCommand(DtrainBin() + " launch --dry-run --nproc-per-node 2 " + kMlp + " --set model.mlp.input_dim=100");
  EXPECT_EQ(bad.exit_code, 2) << bad.output;
  EXPECT_EQ(bad.output.find("mpirun"), std::string::npos) << bad.output;

  // The shipped config warms up for 100 steps; a 30-step run used to fail inside every rank.
  TempDir dir;
  const ProcessResult r = RunCommand(DtrainBin() + " launch --nproc-per-node 2 " + kMlp +
                                     " --set train.device=cpu --set train.max_steps=30 --set train.log_every=10" +
                                     " --set train.eval=false --set run.dir=" + dir.path() + "/run");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(Count(r.output, "warmup_steps 100 exceeds the run's 30 optimizer steps"), 1) << r.output;
  // Clipped to the run: the LR rises linearly to the base LR (1e-3) at the last step.
  const auto trains = Lines(ReadFile(dir.path() + "/run/metrics.jsonl"), "\"kind\":\"train\"");
  ASSERT_EQ(trains.size(), 3u);
  EXPECT_NEAR(Field(trains[0], "lr"), 1e-3 * 10 / 30, 1e-9);
  EXPECT_NEAR(Field(trains[2], "lr"), 1e-3, 1e-9);
}

}  // namespace
}  // namespace dtrain::testing
