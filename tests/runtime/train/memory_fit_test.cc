// The memory plan (models/memory_plan.h, Llama's in models/llama_spec.cc, the run's in runtime/train/memory_fit.h)
// against what a training step takes: configs/llama_tiny.yaml on the CPU (fp32), one real step (data source, model,
// AdamW updater, the step body) under each activation-checkpointing policy and two per-layer mixes, the host
// allocator's peak within 5% of the plan, and the order none > selective > full in plan and measurement alike. Then
// the checkpointing keys (old aliases, conflicts), train.memory_budget_gib picking the cheapest policy that fits, and
// a run that cannot fit refused naming the knobs. GPT-2's plan against configs/gpt2_tiny.yaml's step likewise; fp8's
// inputs of the FP8 linears planned once for all layers.
#include "runtime/train/memory_fit.h"

#include <gtest/gtest.h>

#include <array>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "comm/dist_env.h"
#include "core/allocator.h"
#include "core/check.h"
#include "core/device_context.h"
#include "kernels/matmul_fp8.h"
#include "models/llama.h"
#include "runtime/config/config.h"
#include "runtime/optim/offloaded_state.h"
#include "runtime/optim/parameter_updater.h"
#include "runtime/train/data_source.h"
#include "runtime/train/model_factory.h"
#include "runtime/train/step_body.h"
#include "tests/testing/fixtures.h"

namespace dtrain::runtime {
namespace {

const std::string kTiny = DT_SOURCE_DIR "/configs/llama_tiny.yaml";

proto::Config Tiny(std::vector<std::string> sets = {}) {
  proto::Config cfg;
  sets.insert(sets.begin(), "train.max_steps=1");
  const Status st = LoadConfig(kTiny, sets, &cfg);
  EXPECT_TRUE(st.ok()) << st.ToString();
  return cfg;
}

int64_t Plan(const proto::Config& cfg, std::string* policy = nullptr) {
  models::MemoryPlanInputs in;
  models::MemoryPlan plan;
  Status st = MemoryPlanInputsOf(cfg, 1, /*cuda=*/false, &in);
  if (st.ok()) st = PlanRunMemory(cfg, in, &plan);
  EXPECT_TRUE(st.ok()) << st.ToString();
  if (policy != nullptr) *policy = plan.activation_policy;
  return plan.total();
}

// The trainer's eager step, reduced to its parts: batches from the data source, the updater's Step.
class Hooks final : public StepHooks {
 public:
  Hooks(DataSource& data, ParameterUpdater& updater) : data_(data), updater_(updater) {}
  Status TakeBatch(int64_t, const Tensor** inputs, const Tensor** targets) override {
    DT_RETURN_IF_ERROR(data_.Next(&batch_));
    *inputs = &batch_.inputs;
    *targets = &batch_.targets;
    return Status::OK();
  }
  Status Update() override { return updater_.Step(1e-3); }

 private:
  DataSource& data_;
  ParameterUpdater& updater_;
  data::Batch batch_;
};

// One training step of `cfg` on a fresh CPU (or GPU 0) context; the allocator's peak through the step (the host
// allocator's on the CPU, the caching allocator's on CUDA).
int64_t MeasuredPeak(const proto::Config& cfg, bool cuda = false) {
  std::unique_ptr<DeviceContext> ctx;
  EXPECT_TRUE((cuda ? DeviceContext::CreateCuda(0, &ctx) : DeviceContext::CreateCpu(&ctx)).ok());
  comm::DistEnv env;
  std::unique_ptr<DataSource> data;
  std::unique_ptr<models::Model> model;
  std::unique_ptr<ParameterUpdater> updater;
  Tensor loss_acc;
  Status st = MakeDataSource(cfg, *ctx, env, &data);
  if (st.ok()) st = BuildModel(cfg, *ctx, &model);
  if (st.ok()) st = model->InitParams(cfg.train().seed());
  if (st.ok()) st = MakeParameterUpdater(cfg, *ctx, *model, nullptr, 0, 1, &updater);
  if (st.ok()) st = Tensor::Empty({1, 1}, DType::kF32, ctx->allocator(), &loss_acc);
  if (st.ok()) st = loss_acc.SetZero(ctx->stream());
  EXPECT_TRUE(st.ok()) << st.ToString();
  if (!st.ok()) return 0;
  ctx->ResetMemoryPeak();  // as the trainer does before its first step: InitParams' staging is gone
  Hooks hooks(*data, *updater);
  st = RunStepBody({*ctx, *model, *updater, loss_acc}, cfg.train().grad_accum_steps(), hooks);
  EXPECT_TRUE(st.ok()) << st.ToString();
  return ctx->memory_stats().peak_bytes_in_use;
}

// One rank's plan of cfg for a GPU (planned without one).
models::MemoryPlan CudaPlan(const proto::Config& cfg) {
  models::MemoryPlanInputs in;
  models::MemoryPlan plan;
  Status st = MemoryPlanInputsOf(cfg, 1, /*cuda=*/true, &in);
  if (st.ok()) st = PlanRunMemory(cfg, in, &plan);
  EXPECT_TRUE(st.ok()) << st.ToString();
  return plan;
}

// The plan's allocator part within 5% of the caching allocator's peak through one step of cfg on GPU 0.
void ExpectPlanNearCudaPeak(const proto::Config& cfg) {
  models::MemoryPlanInputs in;
  models::MemoryPlan plan;
  ASSERT_TRUE(MemoryPlanInputsOf(cfg, 1, /*cuda=*/true, &in).ok());
  ASSERT_TRUE(PlanRunMemory(cfg, in, &plan).ok());
  const int64_t peak = MeasuredPeak(cfg, /*cuda=*/true);
  ASSERT_GT(peak, 0);
  EXPECT_NEAR(static_cast<double>(plan.allocator_total()) / static_cast<double>(peak), 1.0, 0.05)
      << "plan " << plan.allocator_total() << " B through the allocator, measured peak " << peak << " B\n"
      << plan.Table();
}

TEST(MemoryPlan, LlamaTinyPlanIsWithinFivePercentOfTheMeasuredPeakUnderEveryPolicy) {
  struct Case {
    std::vector<std::string> sets;
    std::string policy;
  };
  // 4 layers (llama_tiny has 2), so that a per-layer mix (full on the first 2) saves memory.
  const std::vector<Case> cases = {
      {{"model.llama.activation_checkpointing=none"}, "none"},
      {{"model.llama.activation_checkpointing=selective"}, "selective"},
      {{"model.llama.activation_checkpointing=full"}, "full"},
      {{"model.llama.activation_checkpointing=none", "model.llama.full_checkpoint_layers=2"},
       "full on the first 2 of 4 layers, none on the rest"},
      {{"model.llama.activation_checkpointing=selective", "model.llama.full_checkpoint_layers=2"},
       "full on the first 2 of 4 layers, selective on the rest"},
      {{"data.batch_size=3", "train.grad_accum_steps=2", "model.llama.activation_checkpointing=selective"},
       "selective"},
  };
  std::vector<int64_t> plans, peaks;
  for (const Case& c : cases) {
    SCOPED_TRACE(c.policy + " (" + c.sets[0] + ")");
    std::vector<std::string> sets = c.sets;
    sets.push_back("model.llama.n_layer=4");
    const proto::Config cfg = Tiny(sets);
    std::string policy;
    const int64_t plan = Plan(cfg, &policy);
    const int64_t peak = MeasuredPeak(cfg);
    EXPECT_EQ(policy, c.policy);
    ASSERT_GT(peak, 0);
    EXPECT_NEAR(static_cast<double>(plan) / static_cast<double>(peak), 1.0, 0.05)
        << "plan " << plan << " B, measured peak " << peak << " B";
    plans.push_back(plan);
    peaks.push_back(peak);
  }
  // none > selective > full, planned and measured; two full first layers lie between their policy alone and full.
  EXPECT_GT(plans[0], plans[1]);
  EXPECT_GT(plans[1], plans[2]);
  EXPECT_GT(peaks[0], peaks[1]);
  EXPECT_GT(peaks[1], peaks[2]);
  EXPECT_LT(plans[3], plans[0]);
  EXPECT_GT(plans[3], plans[2]);
  EXPECT_LT(plans[4], plans[1]);
  EXPECT_GT(plans[4], plans[2]);
  EXPECT_LT(peaks[3], peaks[0]);
  EXPECT_LT(peaks[4], peaks[1]);
}

// On a GPU (skipped without one): a bf16 Llama of 4 layers, hidden 512, T 512, batch 8 (tensors of MiBs, so the
// caching allocator's 2 MiB granules weigh little), the plan's allocator part within 5% of the caching allocator's
// peak under each policy; and fp8 (every block linear: the plan's FP8 copies) on a GPU with FP8 tensor cores. (The
// cuDNN attention workspace is not known before the graph is built: the plan counts the flash path's delta.)
TEST(MemoryPlanCuda, Bf16LlamaPlanIsWithinFivePercentOfTheCachingAllocatorsPeak) {
  DT_SKIP_WITHOUT_GPU("the caching allocator's peak");
  std::unique_ptr<DeviceContext> gpu;
  ASSERT_TRUE(DeviceContext::CreateCuda(0, &gpu).ok());
  const bool fp8_gpu = ops::CheckFp8Device(*gpu, "test").ok();
  struct Case {
    std::string precision, policy, offload = "none", keep_gib = "0", cast = "step", grads = "fp32";
  };
  const std::vector<Case> cases = {{"bf16", "none"},
                                   {"bf16", "selective"},
                                   {"bf16", "full"},
                                   {"bf16", "none", "cpu"},         // ~29M parameters: more state than the ring's 16M
                                   {"bf16", "none", "cpu", "0.1"},  // 13.4M of them kept on the GPU, the rest streamed
                                   {"fp8", "none"},
                                   {"fp8", "selective"},
                                   {"fp8:qkv,down", "none"},  // some inputs shared by all layers, the others kept
                                   {"fp8:gate_up", "full"},
                                   {"bf16", "selective", "none", "0", "layer"},  // model.llama.weight_cast layer
                                   {"bf16", "full", "none", "0", "layer"},
                                   {"bf16", "selective", "none", "0", "layer", "bf16"},  // train.gradients bf16
                                   {"fp8", "none", "none", "0", "step", "bf16"}};
  for (const auto& [precision_layers, policy, offload, keep_gib, cast, grads] : cases) {
    // "fp8" (every block linear) or "fp8:LIST" (model.llama.fp8_layers)
    const std::string precision = precision_layers.substr(0, precision_layers.find(':'));
    const std::string layers = precision != "fp8"              ? "auto"
                               : precision == precision_layers ? "all"
                                                               : precision_layers.substr(4);
    if (precision == "fp8" && !fp8_gpu) continue;
    SCOPED_TRACE(precision_layers + " " + policy + " offload " + offload + " keep " + keep_gib + " cast " + cast +
                 " grads " + grads);
    const proto::Config cfg =
        Tiny({"train.device=cuda", "train.precision=" + precision, "optim.offload=" + offload,
              "optim.offload_keep_gib=" + keep_gib, "model.llama.vocab_size=32000", "model.llama.fp8_layers=" + layers,
              "model.llama.hidden=512", "model.llama.n_head=8", "model.llama.n_kv_head=4",
              "model.llama.ffn_hidden=1376", "model.llama.n_layer=4", "model.llama.max_seq_len=512",
              "data.batch_size=8", "model.llama.activation_checkpointing=" + policy, "model.llama.weight_cast=" + cast,
              "train.gradients=" + grads});
    ExpectPlanNearCudaPeak(cfg);
  }
}

// On a GPU with FP8 tensor cores (skipped otherwise): GPT-2's plan against the caching allocator's peak, as the Llama
// case above, for bf16 and for fp8 with every block linear, with some (their inputs shared by all blocks, the others
// kept per block) and under recompute. 4 blocks, C 512, T 512, batch 8.
TEST(MemoryPlanCuda, Fp8Gpt2PlanIsWithinFivePercentOfTheCachingAllocatorsPeak) {
  DT_SKIP_WITHOUT_GPU("the caching allocator's peak");
  std::unique_ptr<DeviceContext> gpu;
  ASSERT_TRUE(DeviceContext::CreateCuda(0, &gpu).ok());
  if (!ops::CheckFp8Device(*gpu, "test").ok()) GTEST_SKIP() << "needs a GPU with FP8 tensor cores (compute 8.9+)";
  for (const auto& [precision, layers, recompute] :
       std::vector<std::array<std::string, 3>>{{"bf16", "auto", "false"},
                                               {"fp8", "all", "false"},
                                               {"fp8", "qkv,fc_proj", "false"},
                                               {"fp8", "all", "true"}}) {
    SCOPED_TRACE(precision + " " + layers + " recompute " + recompute);
    proto::Config cfg;
    ASSERT_TRUE(
        LoadConfig(DT_SOURCE_DIR "/configs/gpt2_tiny.yaml",
                   {"train.max_steps=1", "train.device=cuda", "train.precision=" + precision,
                    "model.gpt2.fp8_layers=" + layers, "train.recompute=" + recompute, "model.gpt2.vocab_size=32000",
                    "model.gpt2.padded_vocab_size=32000", "model.gpt2.n_embd=512", "model.gpt2.n_head=8",
                    "model.gpt2.n_layer=4", "model.gpt2.max_seq_len=512", "data.batch_size=8"},
                   &cfg)
            .ok());
    ExpectPlanNearCudaPeak(cfg);
  }
}

// An FP8 linear's bf16 input is planned once for all layers (models::LlamaSharedActsOf, Gpt2SharedInputsOf): against
// bf16, the planned activations drop exactly the per-layer copies of the FP8 linears' inputs and add the shared
// buffer once (planned for a GPU; no GPU needed to plan). The measured side is MemoryPlanCuda's fp8 cases.
TEST(MemoryPlan, Fp8LinearsInputsArePlannedOnceForAllLayers) {
  auto activations = [](const proto::Config& cfg) { return CudaPlan(cfg).activations; };
  models::MemoryPlanInputs in;
  in.cuda = true;
  const int64_t L = 4;
  {  // Llama, 4 layers: ln1 and ln2 ([n, C], one shared buffer for both) and act ([n, F])
    auto plan = [&](const std::string& precision, const std::string& layers, const std::string& policy,
                    const std::string& full_layers = "0") {
      return activations(Tiny({"train.device=cuda", "train.precision=" + precision, "model.llama.fp8_layers=" + layers,
                               "model.llama.n_layer=4", "model.llama.activation_checkpointing=" + policy,
                               "model.llama.full_checkpoint_layers=" + full_layers}));
    };
    const proto::Config cfg = Tiny();
    const int64_t n = cfg.data().batch_size() * cfg.model().llama().max_seq_len();
    const int64_t ln = in.Bytes(n * cfg.model().llama().hidden(), DType::kBF16);
    const int64_t act = in.Bytes(n * cfg.model().llama().ffn_hidden(), DType::kBF16);
    const int64_t none = plan("bf16", "auto", "none");
    EXPECT_EQ(none - plan("fp8", "all", "none"), L * (2 * ln + act) - ln - act);
    EXPECT_EQ(none - plan("fp8", "qkv", "none"), L * ln - ln);
    EXPECT_EQ(none - plan("fp8", "qkv,gate_up", "none"), 2 * L * ln - ln);
    EXPECT_EQ(none - plan("fp8", "o_proj,down", "none"), L * act - act);
    // Selective layers share them already; the full layers' set shares ln1 too when qkv is FP8.
    EXPECT_EQ(plan("bf16", "auto", "selective"), plan("fp8", "all", "selective"));
    EXPECT_EQ(plan("bf16", "auto", "selective", "2") - plan("fp8", "qkv", "selective", "2"), ln);
    EXPECT_EQ(plan("bf16", "auto", "none", "2") - plan("fp8", "down", "none", "2"), 3 * act - act);
  }
  {  // GPT-2, 4 blocks: ln1 and ln2 ([n, C], one shared buffer) and fc_act ([n, 4C]); none under recompute
    proto::Config cfg;
    auto plan = [&](const std::string& precision, const std::string& layers, const std::string& recompute) {
      EXPECT_TRUE(LoadConfig(DT_SOURCE_DIR "/configs/gpt2_tiny.yaml",
                             {"train.device=cuda", "train.precision=" + precision, "model.gpt2.fp8_layers=" + layers,
                              "model.gpt2.n_layer=4", "train.recompute=" + recompute},
                             &cfg)
                      .ok());
      return activations(cfg);
    };
    const int64_t none = plan("bf16", "auto", "false");
    const int64_t n = cfg.data().batch_size() * cfg.model().gpt2().max_seq_len(), c = cfg.model().gpt2().n_embd();
    const int64_t ln = in.Bytes(n * c, DType::kBF16), fc_act = in.Bytes(4 * n * c, DType::kBF16);
    EXPECT_EQ(none - plan("fp8", "all", "false"), L * (2 * ln + fc_act) - ln - fc_act);
    EXPECT_EQ(none - plan("fp8", "qkv,fc_proj", "false"), L * (ln + fc_act) - ln - fc_act);
    EXPECT_EQ(none - plan("fp8", "attn_proj", "false"), 0);
    EXPECT_EQ(plan("bf16", "auto", "true"), plan("fp8", "all", "true"));
  }
}

// The weights that run in FP8 have no bf16 working copy (their FP8 copies come from the f32 masters): GPT-2's planned
// working copy is the bf16 of every other parameter; with lm_head, wte's too is left out.
TEST(MemoryPlan, Fp8WeightsHaveNoBf16WorkingCopy) {
  models::MemoryPlanInputs in;
  in.cuda = true;
  auto plan = [&](const std::string& precision, const std::string& layers) {
    proto::Config cfg;
    EXPECT_TRUE(LoadConfig(DT_SOURCE_DIR "/configs/gpt2_tiny.yaml",
                           {"train.device=cuda", "train.precision=" + precision, "model.gpt2.fp8_layers=" + layers,
                            "model.gpt2.n_layer=4"},
                           &cfg)
                    .ok());
    return CudaPlan(cfg);
  };
  const models::MemoryPlan bf16 = plan("bf16", "auto");
  proto::Config cfg;
  ASSERT_TRUE(LoadConfig(DT_SOURCE_DIR "/configs/gpt2_tiny.yaml", {}, &cfg).ok());
  const int64_t c = cfg.model().gpt2().n_embd(), vp = cfg.model().gpt2().padded_vocab_size(), L = 4;
  EXPECT_EQ(bf16.working_copy, in.Bytes(bf16.num_params, DType::kBF16));
  EXPECT_EQ(plan("fp8", "none").working_copy, bf16.working_copy);
  EXPECT_EQ(plan("fp8", "qkv,fc_proj").working_copy, in.Bytes(bf16.num_params - L * 7 * c * c, DType::kBF16));
  EXPECT_EQ(plan("fp8", "all").working_copy, in.Bytes(bf16.num_params - L * 12 * c * c - vp * c, DType::kBF16));
}

// CudaPlan of a 4-layer llama_tiny in bf16 on CUDA with `sets` on top.
models::MemoryPlan Bf16LlamaPlan(const std::vector<std::string>& sets) {
  std::vector<std::string> all = {"train.device=cuda", "train.precision=bf16", "model.llama.n_layer=4"};
  all.insert(all.end(), sets.begin(), sets.end());
  return CudaPlan(Tiny(all));
}

// The bf16 copy holds what the GEMMs read in bf16 (Llama::MakeWeightCopy): the LM head (here the tied embedding) and
// the block linears' weights, no RMSNorm weight; with model.llama.weight_cast layer the head and one layer's; under
// fp8 no FP8 linear's weight (quantized from the f32 master); none with bf16 masters.
TEST(MemoryPlan, LlamaBf16CopyHoldsTheGemmWeightsOfEveryLayerOrOne) {
  models::MemoryPlanInputs in;
  in.cuda = true;
  const auto plan = Bf16LlamaPlan;
  const models::MemoryPlan step = plan({"model.llama.weight_cast=step"});
  const models::MemoryPlan layer = plan({"model.llama.weight_cast=layer"});
  const proto::Config tiny = Tiny({});
  const proto::LlamaConfig& g = tiny.model().llama();
  const int64_t c = g.hidden(), vp = models::Llama::PaddedVocab(g.vocab_size()), L = 4;
  const int64_t linears = (step.num_params - vp * c - c) / L - 2 * c;  // a layer's, without its two norms
  EXPECT_EQ(step.working_copy, in.Bytes(vp * c + L * linears, DType::kBF16));
  EXPECT_EQ(layer.working_copy, in.Bytes(vp * c + linears, DType::kBF16));
  EXPECT_EQ(step.total() - layer.total(), step.working_copy - layer.working_copy);
  EXPECT_EQ(plan({"train.precision=fp8", "model.llama.fp8_layers=all"}).working_copy, in.Bytes(vp * c, DType::kBF16));
  EXPECT_EQ(plan({"train.master_weights=bf16", "model.llama.weight_cast=layer"}).working_copy, 0);
}

// train.master_weights split: the params are planned in bf16 with no bf16 copy (as bf16 masters), and their low halves
// beside the optimizer state (2 bytes a parameter), which optim.offload cpu moves to the host with the rest.
TEST(MemoryPlan, SplitMastersAreBf16ParamsAndLowHalvesInTheState) {
  models::MemoryPlanInputs in;
  in.cuda = true;
  const auto plan = Bf16LlamaPlan;
  const models::MemoryPlan fp32 = plan({"train.master_weights=fp32"}), split = plan({"train.master_weights=split"});
  const models::MemoryPlan bf16 = plan({"train.master_weights=bf16"});
  const int64_t p = fp32.num_params;
  EXPECT_EQ(split.params, in.Bytes(p, DType::kBF16));
  EXPECT_EQ(split.working_copy, 0);
  EXPECT_EQ(split.optimizer_state, bf16.optimizer_state + in.Bytes(p, DType::kBF16));
  EXPECT_EQ(split.total(), bf16.total() + in.Bytes(p, DType::kBF16));
  EXPECT_LT(split.total(), fp32.total());  // the copy is gone, the masters take the same 4 bytes
  const models::MemoryPlan off = plan({"train.master_weights=split", "optim.offload=cpu"});
  EXPECT_EQ(off.host_state, 2 * static_cast<int64_t>(CpuAllocator::RoundSize(p * 4)) +
                                static_cast<int64_t>(CpuAllocator::RoundSize(p * 2)));
}

// GPT-2 plugs in its own plan (models/gpt2_spec.cc): configs/gpt2_tiny.yaml, none and full (train.recompute).
TEST(MemoryPlan, Gpt2TinyPlanIsWithinFivePercentOfTheMeasuredPeak) {
  int64_t none = 0;
  for (const char* recompute : {"train.recompute=false", "train.recompute=true"}) {
    SCOPED_TRACE(recompute);
    proto::Config cfg;
    ASSERT_TRUE(LoadConfig(DT_SOURCE_DIR "/configs/gpt2_tiny.yaml", {"train.max_steps=1", recompute}, &cfg).ok());
    std::string policy;
    const int64_t plan = Plan(cfg, &policy);
    const int64_t peak = MeasuredPeak(cfg);
    ASSERT_GT(peak, 0);
    EXPECT_EQ(policy, cfg.train().recompute() ? "full" : "none");
    EXPECT_NEAR(static_cast<double>(plan) / static_cast<double>(peak), 1.0, 0.05)
        << "plan " << plan << " B, measured peak " << peak << " B";
    if (cfg.train().recompute()) {
      EXPECT_LT(plan, none);
    } else {
      none = plan;
    }
  }
}

TEST(MemoryPlan, OldKeysAreAliasesAndConflictsNameBothKeys) {
  std::string policy;
  Plan(Tiny({"train.recompute=true"}), &policy);
  EXPECT_EQ(policy, "full");
  Plan(Tiny({"model.llama.recompute_pointwise=true"}), &policy);
  EXPECT_EQ(policy, "selective");
  Plan(Tiny({"model.llama.recompute_pointwise=true", "train.recompute=true"}), &policy);
  EXPECT_EQ(policy, "full");
  Plan(Tiny({"model.llama.full_checkpoint_layers=2"}), &policy);  // every layer: full
  EXPECT_EQ(policy, "full");
  EXPECT_EQ(Plan(Tiny({"train.recompute=true"})), Plan(Tiny({"model.llama.activation_checkpointing=full"})));

  models::MemoryPlanInputs in;
  models::MemoryPlan plan;
  ASSERT_TRUE(MemoryPlanInputsOf(Tiny(), 1, false, &in).ok());
  Status st =
      PlanRunMemory(Tiny({"train.recompute=true", "model.llama.activation_checkpointing=selective"}), in, &plan);
  EXPECT_EQ(st.code(), Status::Code::kInvalidArgument);
  EXPECT_NE(st.message().find("train.recompute"), std::string::npos) << st.ToString();
  EXPECT_NE(st.message().find("model.llama.activation_checkpointing"), std::string::npos) << st.ToString();
  st = PlanRunMemory(Tiny({"model.llama.recompute_pointwise=true", "model.llama.activation_checkpointing=none"}), in,
                     &plan);
  EXPECT_NE(st.message().find("model.llama.recompute_pointwise"), std::string::npos) << st.ToString();
  st = PlanRunMemory(Tiny({"model.llama.activation_checkpointing=full", "model.llama.full_checkpoint_layers=1"}), in,
                     &plan);
  EXPECT_NE(st.message().find("model.llama.full_checkpoint_layers 1"), std::string::npos) << st.ToString();
  st = PlanRunMemory(Tiny({"model.llama.full_checkpoint_layers=3"}), in, &plan);
  EXPECT_NE(st.message().find("at most model.llama.n_layer 2"), std::string::npos) << st.ToString();
}

TEST(MemoryPlan, ZeroOneDividesTheOptimizerStateByTheWorld) {
  const proto::Config cfg = Tiny();
  models::MemoryPlanInputs in;
  models::MemoryPlan one, four;
  ASSERT_TRUE(MemoryPlanInputsOf(cfg, 1, false, &in).ok());
  EXPECT_EQ(in.optim_state_tensors, 2);  // AdamW: exp_avg, exp_avg_sq
  ASSERT_TRUE(PlanRunMemory(cfg, in, &one).ok());
  in.zero1 = true;
  in.world_size = 4;
  ASSERT_TRUE(PlanRunMemory(cfg, in, &four).ok());
  const int64_t p = one.num_params;
  EXPECT_EQ(one.params, in.Bytes(p, DType::kF32));
  EXPECT_GE(one.optimizer_state, 2 * p * 4);
  EXPECT_NEAR(static_cast<double>(four.optimizer_state - 2 * in.Bytes((p + 3) / 4, DType::kF32)),
              static_cast<double>(one.optimizer_state - 2 * in.Bytes(p, DType::kF32)), 0.0);
  EXPECT_EQ(one.activations, four.activations);
}

// optim.offload cpu: the state leaves the device's plan for the host line; on the CPU (updated in place in host
// memory) the step's peak still matches the plan; on CUDA the device keeps a ring of four chunks.
TEST(MemoryPlan, OffloadMovesTheOptimizerStateToHostMemory) {
  const proto::Config plain = Tiny(), offloaded = Tiny({"optim.offload=cpu"});
  for (const bool cuda : {false, true}) {
    models::MemoryPlanInputs in, in_off;
    models::MemoryPlan a, b;
    ASSERT_TRUE(MemoryPlanInputsOf(plain, 1, cuda, &in).ok());
    ASSERT_TRUE(MemoryPlanInputsOf(offloaded, 1, cuda, &in_off).ok());
    EXPECT_TRUE(in_off.offload_state);
    ASSERT_TRUE(PlanRunMemory(plain, in, &a).ok());
    ASSERT_TRUE(PlanRunMemory(offloaded, in_off, &b).ok());
    const int64_t p = a.num_params, state = 2 * in.Bytes(p, DType::kF32);
    EXPECT_EQ(a.host_state, 0);
    EXPECT_EQ(b.host_state, 2 * static_cast<int64_t>(CpuAllocator::RoundSize(p * 4)));
    // llama_tiny is smaller than the ring: on CUDA the ring holds all of it, on the CPU there is none.
    EXPECT_EQ(a.optimizer_state - b.optimizer_state, cuda ? 0 : state) << (cuda ? "cuda" : "cpu");
    EXPECT_NE(b.Table().find("host memory"), std::string::npos) << b.Table();
  }
  std::string policy;
  const int64_t plan = Plan(offloaded, &policy);
  const int64_t peak = MeasuredPeak(offloaded);
  EXPECT_NEAR(static_cast<double>(plan) / static_cast<double>(peak), 1.0, 0.05) << plan << " vs " << peak;
  EXPECT_LT(plan, Plan(plain));
}

// optim.offload_keep_gib: the kept part is planned on the device beside the ring of the rest (CUDA) or alone (CPU,
// where the step's measured peak matches the plan); the host line still holds the whole state; the key without
// optim.offload cpu is refused naming it.
TEST(MemoryPlan, KeptPartOfTheOffloadedStateIsPlannedOnTheDevice) {
  const int64_t keep_bytes = int64_t{1} << 17;  // 16,384 elements of each of AdamW's two f32 state tensors
  const proto::Config all = Tiny({"optim.offload=cpu"}),
                      kept = Tiny({"optim.offload=cpu", "optim.offload_keep_gib=0.0001220703125"});  // 2^-13
  for (const bool cuda : {false, true}) {
    models::MemoryPlanInputs in_all, in_kept;
    models::MemoryPlan a, b;
    ASSERT_TRUE(MemoryPlanInputsOf(all, 1, cuda, &in_all).ok());
    ASSERT_TRUE(MemoryPlanInputsOf(kept, 1, cuda, &in_kept).ok());
    EXPECT_EQ(in_kept.offload_keep_bytes, keep_bytes);
    ASSERT_TRUE(PlanRunMemory(all, in_all, &a).ok());
    ASSERT_TRUE(PlanRunMemory(kept, in_kept, &b).ok());
    const int64_t p = a.num_params, k = keep_bytes / 8;
    ASSERT_GT(p, k);
    EXPECT_EQ(b.host_state, a.host_state);
    const int64_t ring_all = cuda ? 2 * in_all.Bytes(OffloadedState::RingNumel(p, 0), DType::kF32) : 0;
    const int64_t ring_rest = cuda ? 2 * in_all.Bytes(OffloadedState::RingNumel(p - k, 0), DType::kF32) : 0;
    EXPECT_EQ(b.optimizer_state - a.optimizer_state, 2 * in_all.Bytes(k, DType::kF32) + ring_rest - ring_all)
        << (cuda ? "cuda" : "cpu");
  }
  EXPECT_NEAR(static_cast<double>(Plan(kept)) / static_cast<double>(MeasuredPeak(kept)), 1.0, 0.05);
  models::MemoryPlanInputs in;
  const Status st = MemoryPlanInputsOf(Tiny({"optim.offload_keep_gib=2"}), 1, false, &in);
  EXPECT_EQ(st.code(), Status::Code::kInvalidArgument);
  EXPECT_EQ(st.message(), "optim.offload_keep_gib 2: only with optim.offload cpu (it is none; auto sets it itself)");
}

// optim.offload auto, against a budget on the CPU: a state that fits stays where it is (none); one that does not
// fits with all of it offloaded and keeps what the budget leaves, less 2% of it, in whole 2 MiB; with no room left,
// cpu with nothing kept; with no limit at all, none. The plan written back fits, and the line says what was chosen.
TEST(MemoryFit, AutoOffloadKeepsWhatTheBudgetLeaves) {
  const double gib = 1024.0 * 1024.0 * 1024.0;
  const proto::Config plain = Tiny({"model.llama.activation_checkpointing=none", "model.llama.vocab_size=32000"});
  proto::Config all = plain;
  all.mutable_optim()->set_offload("cpu");
  const int64_t on_device = Plan(plain), offloaded = Plan(all);
  ASSERT_GT(on_device - offloaded, int64_t{8} << 20) << "the state must span several 2 MiB granules";
  auto fit = [&](double budget_bytes, MemoryFit* out) {
    proto::Config cfg = plain;
    cfg.mutable_optim()->set_offload("auto");
    cfg.mutable_train()->set_memory_budget_gib(budget_bytes / gib);
    const Status st = FitMemory(&cfg, 1, /*cuda=*/false, 0, out);
    EXPECT_TRUE(st.ok()) << st.ToString();
    return cfg;
  };
  MemoryFit f;
  proto::Config c = fit(on_device * 1.001, &f);
  EXPECT_EQ(c.optim().offload(), "none");
  EXPECT_EQ(f.plan.total(), on_device);
  EXPECT_NE(DescribeMemoryFit(f).find("optim.offload auto: none (the optimizer state fits within "
                                      "train.memory_budget_gib"),
            std::string::npos)
      << DescribeMemoryFit(f);

  const double budget = (offloaded + on_device) / 2.0;  // room for about half of the state
  c = fit(budget, &f);
  EXPECT_EQ(c.optim().offload(), "cpu");
  const int64_t limit = static_cast<int64_t>(budget / gib * gib), granule = int64_t{2} << 20;
  const int64_t keep = (limit - limit * 20 / 1000 - offloaded) / granule * granule;
  ASSERT_GT(keep, 0);
  EXPECT_EQ(static_cast<int64_t>(c.optim().offload_keep_gib() * gib), keep);
  EXPECT_LE(f.plan.total(), f.limit);
  EXPECT_EQ(f.plan.total(), Plan(c));
  EXPECT_NE(DescribeMemoryFit(f).find("optim.offload auto: cpu, " + models::FormatBytes(keep) + " of the "),
            std::string::npos)
      << DescribeMemoryFit(f);

  c = fit(offloaded * 1.001, &f);  // fits only all offloaded, within the margin
  EXPECT_EQ(c.optim().offload(), "cpu");
  EXPECT_EQ(c.optim().offload_keep_gib(), 0.0);

  proto::Config none = plain;  // no budget on the CPU: no limit
  none.mutable_optim()->set_offload("auto");
  ASSERT_TRUE(FitMemory(&none, 1, false, 0, &f).ok());
  EXPECT_EQ(none.optim().offload(), "none");
  EXPECT_NE(f.offload.find("no memory limit here"), std::string::npos) << f.offload;
}

// A budget above what the GPU holds (a config written for a larger GPU) is capped to the GPU, and the limit says so:
// the H200 budget of configs/llama3_8b.yaml's runs on an 80 GiB GPU plans against 79 GiB, where the whole optimizer
// state no longer fits beside the activations and auto offloads part of it, instead of planning 138.7 GiB and failing
// in cudaMalloc. A budget below the GPU stays the limit; without a GPU (gpu_bytes 0) the budget is all there is.
TEST(MemoryFit, ABudgetAboveTheGpuIsCappedToIt) {
  const std::string eight_b = DT_SOURCE_DIR "/configs/llama3_8b.yaml";
  const std::vector<std::string> sets = {"optim.offload=auto", "train.memory_budget_gib=138.7",
                                         "model.llama.activation_checkpointing=auto"};
  const int64_t gib = int64_t{1} << 30;
  proto::Config cfg;
  MemoryFit fit;
  ASSERT_TRUE(LoadConfig(eight_b, sets, &cfg).ok());
  Status st = FitMemory(&cfg, 1, /*cuda=*/true, 80 * gib, &fit);
  ASSERT_TRUE(st.ok()) << st.ToString();
  EXPECT_EQ(fit.limit, 80 * gib - kCudaReservedBytes);
  EXPECT_EQ(fit.limit_what,
            "train.memory_budget_gib 138.7, capped at the GPU's 80.00 GiB less 1.00 GiB for the CUDA "
            "context");
  EXPECT_LE(fit.plan.total(), fit.limit);
  EXPECT_EQ(cfg.optim().offload(), "cpu");

  ASSERT_TRUE(LoadConfig(eight_b, sets, &cfg).ok());
  ASSERT_TRUE(FitMemory(&cfg, 1, /*cuda=*/true, 0, &fit).ok());
  EXPECT_EQ(fit.limit_what, "train.memory_budget_gib 138.7");
  EXPECT_EQ(fit.limit, static_cast<int64_t>(138.7 * static_cast<double>(gib)));
  EXPECT_EQ(cfg.optim().offload(), "none");

  ASSERT_TRUE(LoadConfig(eight_b, sets, &cfg).ok());
  ASSERT_TRUE(FitMemory(&cfg, 1, /*cuda=*/true, 141 * gib, &fit).ok());
  EXPECT_EQ(fit.limit_what, "train.memory_budget_gib 138.7");
}

// optim.offload auto with the policy left to the budget weighs each fitting policy's recompute against the PCIe time
// of the state it leaves in host memory. Llama-3-8B with fp32 masters and state, the weights' bf16 copy made per step:
// on an H200's 138.7 GiB the whole state fits beside 31 full layers and a selective one; 4.7 GiB less, full keeps
// 53 of the 59.83 GiB on the GPU and wins (with the copy of every parameter, at 138.7 GiB, measured: 9,055 tokens/s
// against 5,835 for none keeping 25.6 GiB: bench/results/2026-12-04-llama-offload-keep-h200.md); with the cast per
// layer open too, the whole state fits with 12 full layers; bf16 masters and state under a budget 0.5 GiB short of
// the plan without offload or checkpointing: selective fits it all on the GPU for less than streaming the rest.
TEST(MemoryFit, AutoOffloadWeighsRecomputeAgainstPcie) {
  const std::string eight_b = DT_SOURCE_DIR "/configs/llama3_8b.yaml";
  proto::Config cfg;
  const std::vector<std::string> fp32_auto = {"train.master_weights=fp32", "optim.state_dtype=fp32",
                                              "optim.offload=auto", "train.memory_budget_gib=138.7",
                                              "model.llama.activation_checkpointing=auto"};
  std::vector<std::string> step_cast = fp32_auto;
  step_cast.push_back("model.llama.weight_cast=step");
  ASSERT_TRUE(LoadConfig(eight_b, step_cast, &cfg).ok());
  MemoryFit fit;
  Status st = FitMemory(&cfg, 1, /*cuda=*/true, 0, &fit);
  ASSERT_TRUE(st.ok()) << st.ToString();
  EXPECT_EQ(fit.chosen, "full on the first 31 of 32 layers, selective on the rest");
  EXPECT_EQ(cfg.optim().offload(), "none");
  // 4.7 GiB less: full everywhere, and 53.04 GiB of the state kept (a CPU-only build, the asan stage, plans without
  // cuDNN's workspace: 2 MiB more).
  step_cast.back() = "train.memory_budget_gib=134";
  step_cast.push_back("model.llama.weight_cast=step");
  ASSERT_TRUE(LoadConfig(eight_b, step_cast, &cfg).ok());
  st = FitMemory(&cfg, 1, /*cuda=*/true, 0, &fit);
  ASSERT_TRUE(st.ok()) << st.ToString();
  EXPECT_EQ(fit.chosen, "full");
  EXPECT_EQ(cfg.optim().offload(), "cpu");
  EXPECT_NEAR(cfg.optim().offload_keep_gib(), 53.04, 0.01);
  EXPECT_NE(fit.offload.find("the least recompute + PCIe time"), std::string::npos) << fit.offload;
  // weight_cast auto: without the 15 GiB bf16 copy the whole state fits beside 12 full and 20 selective layers, far
  // less recompute than full everywhere, and no PCIe.
  ASSERT_TRUE(LoadConfig(eight_b, fp32_auto, &cfg).ok());
  st = FitMemory(&cfg, 1, /*cuda=*/true, 0, &fit);
  ASSERT_TRUE(st.ok()) << st.ToString();
  EXPECT_EQ(fit.chosen, "full on the first 12 of 32 layers, selective on the rest, weights cast per layer");
  EXPECT_EQ(cfg.model().llama().weight_cast(), "layer");
  EXPECT_EQ(cfg.model().llama().full_checkpoint_layers(), 12);
  EXPECT_EQ(cfg.optim().offload(), "none");
  // train.gradients bf16 frees 15 GiB more: selective on every layer.
  std::vector<std::string> bf16_grads = fp32_auto;
  bf16_grads.push_back("train.gradients=bf16");
  ASSERT_TRUE(LoadConfig(eight_b, bf16_grads, &cfg).ok());
  st = FitMemory(&cfg, 1, /*cuda=*/true, 0, &fit);
  ASSERT_TRUE(st.ok()) << st.ToString();
  EXPECT_EQ(fit.chosen, "selective, weights cast per layer");
  EXPECT_NEAR(fit.plan.grads, fit.plan.params / 2, 2 << 20);  // the allocator rounds each to 2 MiB
  EXPECT_EQ(cfg.optim().offload(), "none");

  proto::Config plain;
  ASSERT_TRUE(
      LoadConfig(eight_b, {"model.llama.activation_checkpointing=none", "train.memory_budget_gib=0"}, &plain).ok());
  models::MemoryPlanInputs in;
  models::MemoryPlan none;
  ASSERT_TRUE(MemoryPlanInputsOf(plain, 1, /*cuda=*/true, &in).ok());
  ASSERT_TRUE(PlanRunMemory(plain, in, &none).ok());
  const double none_gib = static_cast<double>(none.total()) / (1024.0 * 1024.0 * 1024.0);
  ASSERT_TRUE(LoadConfig(eight_b,
                         {"optim.offload=auto", "model.llama.activation_checkpointing=auto",
                          "train.memory_budget_gib=" + std::to_string(none_gib - 0.5)},
                         &cfg)
                  .ok());
  st = FitMemory(&cfg, 1, /*cuda=*/true, 0, &fit);
  ASSERT_TRUE(st.ok()) << st.ToString();
  EXPECT_EQ(fit.chosen, "selective");
  EXPECT_EQ(cfg.optim().offload(), "none");
}

// Offloaded state is pinned host memory: more than the machine has available for its ranks is refused, naming the
// figures and the knobs; without offload, or with the figure unknown, nothing is checked.
TEST(MemoryFit, OffloadedStateMustFitTheHostsAvailableMemory) {
  models::MemoryPlanInputs in;
  models::MemoryPlan plan, plain;
  const proto::Config cfg = Tiny({"optim.offload=cpu"});
  ASSERT_TRUE(MemoryPlanInputsOf(cfg, 1, false, &in).ok());
  ASSERT_TRUE(PlanRunMemory(cfg, in, &plan).ok());
  ASSERT_GT(plan.host_state, 0);
  EXPECT_TRUE(CheckHostMemory(cfg, plan, 2, 2 * plan.host_state).ok());
  const Status st = CheckHostMemory(cfg, plan, 2, 2 * plan.host_state - 1);
  EXPECT_EQ(st.code(), Status::Code::kInvalidArgument);
  EXPECT_NE(st.message().find("optim.offload cpu: the optimizer state takes " + models::FormatBytes(plan.host_state) +
                              " of page-locked host memory per rank, " + models::FormatBytes(2 * plan.host_state) +
                              " for the 2 rank(s) on this machine"),
            std::string::npos)
      << st.ToString();
  EXPECT_NE(st.message().find("set optim.state_dtype bf16"), std::string::npos) << st.ToString();
  const Status bf16 = CheckHostMemory(Tiny({"optim.state_dtype=bf16"}), plan, 2, 1);  // no advice to set what is set
  EXPECT_EQ(bf16.message().find("optim.state_dtype"), std::string::npos) << bf16.ToString();
  EXPECT_NE(bf16.message().find("run fewer ranks per machine, or set optim.offload none"), std::string::npos);
  EXPECT_TRUE(CheckHostMemory(cfg, plan, 2, 0).ok());    // unknown: not checked
  EXPECT_TRUE(CheckHostMemory(cfg, plain, 64, 1).ok());  // nothing offloaded
  EXPECT_GT(HostMemoryAvailable(), 0);                   // Linux's /proc/meminfo
}

TEST(MemoryFit, TheBudgetPicksTheCheapestPolicyThatFitsAndSaysSo) {
  const double gib = 1024.0 * 1024.0 * 1024.0;
  const int64_t none = Plan(Tiny({"model.llama.activation_checkpointing=none"}));
  const int64_t selective = Plan(Tiny({"model.llama.activation_checkpointing=selective"}));
  const int64_t full = Plan(Tiny({"model.llama.activation_checkpointing=full"}));
  auto budget = [&](int64_t bytes) { return "train.memory_budget_gib=" + std::to_string(bytes / gib); };

  // Room for none: none.
  proto::Config cfg = Tiny({budget(none + 4096)});
  MemoryFit fit;
  ASSERT_TRUE(FitMemory(&cfg, 1, false, 0, &fit).ok());
  EXPECT_EQ(fit.chosen, "none");
  EXPECT_EQ(cfg.model().llama().activation_checkpointing(), "none");
  // Between selective and none: selective, written into the config the model is built from.
  cfg = Tiny({budget((none + selective) / 2)});
  ASSERT_TRUE(FitMemory(&cfg, 1, false, 0, &fit).ok());
  EXPECT_EQ(fit.chosen, "selective");
  EXPECT_EQ(cfg.model().llama().activation_checkpointing(), "selective");
  EXPECT_EQ(fit.plan.total(), selective);
  EXPECT_LE(fit.plan.total(), fit.limit);
  EXPECT_NE(DescribeMemoryFit(fit).find("activation checkpointing selective chosen to fit train.memory_budget_gib"),
            std::string::npos)
      << DescribeMemoryFit(fit);
  // Between full and selective: the first policy that fits is a per-layer mix or full, never more than the budget.
  cfg = Tiny({budget((selective + full) / 2)});
  ASSERT_TRUE(FitMemory(&cfg, 1, false, 0, &fit).ok());
  EXPECT_NE(fit.chosen, "selective");
  EXPECT_LE(fit.plan.total(), fit.limit);
  EXPECT_GE(fit.plan.total(), full);

  // Below full: refused, naming the knobs with their figures.
  cfg = Tiny({budget(full - 65536)});
  const Status st = FitMemory(&cfg, 1, false, 0, &fit);
  EXPECT_EQ(st.code(), Status::Code::kInvalidArgument);
  EXPECT_NE(st.message().find("exceeds train.memory_budget_gib"), std::string::npos) << st.ToString();
  EXPECT_NE(st.message().find("activations"), std::string::npos) << st.ToString();
  EXPECT_NE(st.message().find(" MiB  full\n"), std::string::npos) << st.ToString();  // the activations' line
  EXPECT_NE(st.message().find("data.batch_size 4 (train.grad_accum_steps x2 keeps the global batch)"),
            std::string::npos)
      << st.ToString();
  EXPECT_NE(st.message().find("dist.zero1 on 2 GPUs"), std::string::npos) << st.ToString();  // half the state: 64 KiB
  EXPECT_NE(st.message().find("optim.state_dtype bf16 (half the optimizer state): "), std::string::npos)
      << st.ToString();

  // A policy the config fixes is checked, not changed.
  cfg = Tiny({budget((none + selective) / 2), "model.llama.activation_checkpointing=none"});
  const Status fixed = FitMemory(&cfg, 1, false, 0, &fit);
  EXPECT_EQ(fixed.code(), Status::Code::kInvalidArgument);
  EXPECT_NE(
      fixed.message().find("activation checkpointing selective (model.llama.activation_checkpointing: selective): "),
      std::string::npos)
      << fixed.ToString();  // the cheapest policy that fits
  EXPECT_EQ(cfg.model().llama().activation_checkpointing(), "none");
}

// A language model's chunked LM head and loss is a knob the refusal names with its figure (ModelSpec::memory_knobs):
// the SmolLM2-360M shape (vocabulary 49152, 16 x 1024 tokens: 1.5 GiB of bf16 logits) and GPT-2 124M planned for a
// GPU, each with a budget just under its plan and its checkpointing policy fixed. Not named where the run already
// chunks, nor for GPT-2 in fp16 (which refuses the chunked loss).
TEST(MemoryFit, ChunkedLossIsNamedForLanguageModels) {
  auto refusal = [](const std::string& config, std::vector<std::string> sets) {
    proto::Config cfg;
    sets.push_back("train.device=cuda");
    EXPECT_TRUE(LoadConfig(DT_SOURCE_DIR "/configs/" + config, sets, &cfg).ok());
    cfg.mutable_train()->set_memory_budget_gib(static_cast<double>(CudaPlan(cfg).total()) / (1024.0 * 1024.0 * 1024.0) -
                                               0.01);
    MemoryFit fit;
    const Status st = FitMemory(&cfg, 1, /*cuda=*/true, 0, &fit);
    EXPECT_EQ(st.code(), Status::Code::kInvalidArgument) << st.ToString();
    return st.message();
  };
  const std::string llama = refusal("smollm2_360m.yaml", {"model.llama.activation_checkpointing=none"});
  EXPECT_NE(llama.find("\n  - model.llama.loss_chunk_tokens: 1024: "), std::string::npos) << llama;
  EXPECT_NE(llama.find("loss_chunk_tokens: 1024: 2"), std::string::npos) << llama;  // 2x.xx GiB
  EXPECT_EQ(
      refusal("smollm2_360m.yaml", {"model.llama.activation_checkpointing=none", "model.llama.loss_chunk_tokens=2048"})
          .find("loss_chunk_tokens"),
      std::string::npos);
  const std::string gpt2_vocab = "model.gpt2.vocab_size=50257", gpt2_padded = "model.gpt2.padded_vocab_size=50304",
                    gpt2_seq = "model.gpt2.max_seq_len=1024";  // (the config's 0s come from its data)
  const std::string gpt2 =
      refusal("gpt2_124m.yaml", {gpt2_vocab, gpt2_padded, gpt2_seq, "train.precision=bf16", "train.recompute=true"});
  EXPECT_NE(gpt2.find("\n  - model.gpt2.loss_chunk_tokens: 1024: "), std::string::npos) << gpt2;
  EXPECT_EQ(
      refusal("gpt2_124m.yaml", {gpt2_vocab, gpt2_padded, gpt2_seq, "train.precision=fp16", "train.recompute=true"})
          .find("loss_chunk_tokens"),
      std::string::npos);
}

// A run whose optimizer state is most of it: ZeRO-1 on enough GPUs is the knob named.
// train.gradients bf16 is named for a Llama run over its budget with fp32 gradients, with the plan the bf16 ones give
// (the knob's plan takes the dtype the knob sets), also on two ranks replicated, but not with dist.zero1 on two
// (ZeRO-1 takes fp32 gradients); and with bf16 gradients set, dist.zero1 is not named. Split masters are named too,
// with the plan without the bf16 copy.
TEST(MemoryFit, Bf16GradientsAreNamedWhereTheyRun) {
  auto refusal = [](int world, const std::vector<std::string>& more) {
    std::vector<std::string> sets = {"train.master_weights=fp32", "optim.state_dtype=fp32",
                                     "train.memory_budget_gib=125", "model.llama.activation_checkpointing=full",
                                     "model.llama.weight_cast=layer"};
    sets.insert(sets.end(), more.begin(), more.end());  // later sets win
    proto::Config cfg;
    EXPECT_TRUE(LoadConfig(DT_SOURCE_DIR "/configs/llama3_8b.yaml", sets, &cfg).ok());
    MemoryFit fit;
    const Status st = FitMemory(&cfg, world, /*cuda=*/true, 0, &fit);
    EXPECT_EQ(st.code(), Status::Code::kInvalidArgument) << st.ToString();
    return st.message();
  };
  const std::string one = refusal(1, {});
  EXPECT_NE(one.find("\n  - train.gradients: bf16 (bf16 weight gradients): 110.4"), std::string::npos) << one;
  // Split masters: the layer copy (1.38 GiB) gone, the same masters.
  EXPECT_NE(one.find("\n  - train.master_weights: split, model.llama.weight_cast: step (fp32 masters without their "
                     "bf16 copy): 124.0"),
            std::string::npos)
      << one;
  const std::string two = refusal(2, {});
  EXPECT_NE(two.find("\n  - train.gradients: bf16 (bf16 weight gradients): "), std::string::npos) << two;
  const std::string zero1 = refusal(2, {"dist.zero1=true", "train.memory_budget_gib=90"});
  EXPECT_EQ(zero1.find("train.gradients"), std::string::npos) << zero1;
  EXPECT_EQ(zero1.find("train.master_weights: split"), std::string::npos) << zero1;
  EXPECT_NE(two.find("dist.zero1 on"), std::string::npos) << two;
  EXPECT_EQ(refusal(2, {"train.gradients=bf16", "train.memory_budget_gib=100"}).find("dist.zero1 on"),
            std::string::npos);
  EXPECT_EQ(refusal(2, {"train.master_weights=split", "model.llama.weight_cast=step", "train.memory_budget_gib=100"})
                .find("dist.zero1 on"),
            std::string::npos);  // nor for 16-bit masters
}

TEST(MemoryFit, ZeroOneIsNamedWhenMoreGpusWouldFit) {
  const std::vector<std::string> big_vocab = {"model.llama.vocab_size=32000", "data.batch_size=1",
                                              "model.llama.activation_checkpointing=full"};
  const proto::Config plain = Tiny(big_vocab);
  models::MemoryPlanInputs in;
  models::MemoryPlan plan;
  ASSERT_TRUE(MemoryPlanInputsOf(plain, 1, false, &in).ok());
  ASSERT_TRUE(PlanRunMemory(plain, in, &plan).ok());
  ASSERT_GT(plan.optimizer_state, plan.activations);
  std::vector<std::string> sets = big_vocab;
  const int64_t limit = plan.total() - plan.optimizer_state / 2 + 4096;  // half the state must go
  sets.push_back("train.memory_budget_gib=" + std::to_string(limit / (1024.0 * 1024.0 * 1024.0)));
  proto::Config cfg = Tiny(sets);
  MemoryFit fit;
  const Status st = FitMemory(&cfg, 1, false, 0, &fit);
  EXPECT_EQ(st.code(), Status::Code::kInvalidArgument);
  EXPECT_NE(st.message().find("dist.zero1 on 2 GPUs (optimizer state "), std::string::npos) << st.ToString();
  EXPECT_NE(st.message().find("(fits)"), std::string::npos) << st.ToString();
  EXPECT_NE(st.message().find("optim.offload cpu (optimizer state to "), std::string::npos) << st.ToString();
  EXPECT_EQ(st.message().find("data.batch_size"), std::string::npos) << st.ToString();  // 1 already
}

// ZeRO-1 on two ranks whose shard of the state still does not fit: offloading the shard is named, with each rank's
// host memory (half the replicated state's).
TEST(MemoryFit, OffloadOfTheShardIsNamedUnderZeroOne) {
  const std::vector<std::string> sets = {"model.llama.vocab_size=32000", "data.batch_size=1",
                                         "model.llama.activation_checkpointing=full", "dist.zero1=true"};
  const proto::Config sharded = Tiny(sets);
  models::MemoryPlanInputs in;
  models::MemoryPlan plan, offloaded, replicated;
  ASSERT_TRUE(MemoryPlanInputsOf(sharded, 2, false, &in).ok());
  ASSERT_TRUE(PlanRunMemory(sharded, in, &plan).ok());
  in.offload_state = true;
  ASSERT_TRUE(PlanRunMemory(sharded, in, &offloaded).ok());
  in.world_size = 1;
  ASSERT_TRUE(PlanRunMemory(sharded, in, &replicated).ok());
  EXPECT_NEAR(static_cast<double>(offloaded.host_state), replicated.host_state / 2.0, 256.0);
  std::vector<std::string> budget = sets;
  budget.push_back("train.memory_budget_gib=" +
                   std::to_string((plan.total() - plan.optimizer_state / 2) / (1024.0 * 1024.0 * 1024.0)));
  proto::Config cfg = Tiny(budget);
  MemoryFit fit;
  const Status st = FitMemory(&cfg, 2, false, 0, &fit);
  EXPECT_EQ(st.code(), Status::Code::kInvalidArgument);
  EXPECT_NE(st.message().find("optim.offload cpu (optimizer state to " + models::FormatBytes(offloaded.host_state) +
                              " of host memory)"),
            std::string::npos)
      << st.ToString();
}

TEST(MemoryFit, NoBudgetOnTheCpuChecksNothingAndAModelWithoutAPlanRefusesABudget) {
  proto::Config cfg = Tiny({"data.batch_size=4096"});
  MemoryFit fit;
  ASSERT_TRUE(FitMemory(&cfg, 1, false, 0, &fit).ok());
  EXPECT_TRUE(fit.planned);
  EXPECT_EQ(fit.limit, 0);
  EXPECT_EQ(fit.chosen, "");
  // A CUDA run without a budget must fit the GPU less kCudaReservedBytes: bf16 activations, a working copy, 2 MiB
  // granules.
  cfg = Tiny({"train.precision=bf16"});
  models::MemoryPlanInputs in;
  models::MemoryPlan plan;
  ASSERT_TRUE(MemoryPlanInputsOf(cfg, 1, /*cuda=*/true, &in).ok());
  ASSERT_TRUE(PlanRunMemory(cfg, in, &plan).ok());
  const int64_t norms = cfg.model().llama().hidden() * (2 * cfg.model().llama().n_layer() + 1);  // not copied
  const int64_t bf16_bytes = 2 * (plan.num_params - norms);  // ~214 KB: 512 B granules (below 1 MiB)
  EXPECT_EQ(plan.working_copy, (bf16_bytes + 511) / 512 * 512);
  EXPECT_EQ(plan.params % 512, 0);
  EXPECT_GT(plan.workspace, 32 << 20);  // the cuBLASLt workspace
  ASSERT_TRUE(FitMemory(&cfg, 1, true, plan.total() + kCudaReservedBytes, &fit).ok());
  EXPECT_EQ(fit.limit, plan.total());
  const Status gpu = FitMemory(&cfg, 1, true, plan.total() + kCudaReservedBytes - 1, &fit);
  EXPECT_EQ(gpu.code(), Status::Code::kInvalidArgument);
  EXPECT_NE(gpu.message().find("exceeds the GPU's"), std::string::npos) << gpu.ToString();

  proto::Config mlp;
  ASSERT_TRUE(ParseConfig("", "test", {"train.memory_budget_gib=1"}, &mlp).ok());
  const Status st = FitMemory(&mlp, 1, false, 0, &fit);
  EXPECT_EQ(st.code(), Status::Code::kInvalidArgument);
  EXPECT_NE(st.message().find("model.kind mlp has no memory plan"), std::string::npos) << st.ToString();
}

}  // namespace
}  // namespace dtrain::runtime
