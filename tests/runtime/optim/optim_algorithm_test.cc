// Tests of the optimizer-algorithm seam (runtime/optim/optim_algorithm.h): the registered names and the checkpoint
// state names (unchanged, so old checkpoints resume), the shared hyper-parameter checks, and, for EVERY registered
// algorithm, that the update of a buffer cut into ranges (as ZeRO-1 cuts it) equals the update of the whole buffer.
#include "runtime/optim/optim_algorithm.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <memory>
#include <string>
#include <vector>

#include "core/check.h"
#include "kernels/bf16_round.h"
#include "models/mlp.h"
#include "runtime/optim/optimizer.h"
#include "runtime/optim/parameter_updater.h"
#include "tests/testing/grad_check.h"

namespace dtrain::runtime {
namespace {

std::unique_ptr<DeviceContext> CpuContext() {
  std::unique_ptr<DeviceContext> ctx;
  EXPECT_TRUE(DeviceContext::CreateCpu(&ctx).ok());
  return ctx;
}

std::unique_ptr<OptimAlgorithm> Make(const OptimizerOptions& o) {
  const OptimAlgorithmSpec* spec = nullptr;
  std::unique_ptr<OptimAlgorithm> algo;
  const Status st = CreateOptimAlgorithm(o, &spec, &algo);
  EXPECT_TRUE(st.ok()) << st.ToString();
  return algo;
}

TEST(OptimAlgorithm, BuiltInsAreRegisteredFirstInOrder) {
  const std::vector<std::string> names = OptimAlgorithmNames();
  ASSERT_GE(names.size(), 2u);
  EXPECT_EQ(names[0], "sgd");
  EXPECT_EQ(names[1], "adamw");
  for (const std::string& name : names) {
    const OptimAlgorithmSpec* spec = FindOptimAlgorithm(name);
    ASSERT_NE(spec, nullptr) << name;
    EXPECT_EQ(spec->name, name);
    EXPECT_FALSE(spec->state_names.empty()) << name;
    EXPECT_EQ(std::count(names.begin(), names.end(), name), 1) << name << " registered twice";
  }
  EXPECT_EQ(FindOptimAlgorithm("adam"), nullptr);
}

// The checkpoints' state files are these names + ".bin": they must never change.
TEST(OptimAlgorithm, CheckpointStateNamesAreUnchanged) {
  EXPECT_EQ(FindOptimAlgorithm("sgd")->state_names, (std::vector<std::string>{"momentum_buffer"}));
  EXPECT_EQ(FindOptimAlgorithm("adamw")->state_names, (std::vector<std::string>{"exp_avg", "exp_avg_sq"}));

  // And through the updater the trainer holds: the names it saves and the manifest's optimizer.
  auto ctx = CpuContext();
  for (const char* name : {"sgd", "adamw"}) {
    proto::Config cfg;
    cfg.mutable_optim()->set_name(name);
    cfg.mutable_optim()->set_lr(0.1);
    cfg.mutable_optim()->set_beta1(0.9);
    cfg.mutable_optim()->set_beta2(0.999);
    std::unique_ptr<models::Mlp> model;
    models::MlpOptions mo;
    mo.input_dim = 4;
    mo.hidden = {3};
    mo.num_classes = 2;
    DT_ASSERT_OK(models::Mlp::Create(*ctx, mo, &model));
    std::unique_ptr<ParameterUpdater> updater;
    DT_ASSERT_OK(MakeParameterUpdater(cfg, *ctx, *model, nullptr, 0, 1, &updater));
    EXPECT_EQ(updater->state_names(), FindOptimAlgorithm(name)->state_names) << name;
    // SaveState copies one tensor per state name (a fresh state: zeros), and refuses another count.
    const int64_t numel = model->params().numel();
    std::vector<std::vector<float>> host(updater->state_names().size(), std::vector<float>(numel, -1.0f));
    std::vector<Tensor> dst;
    std::vector<Tensor*> ptrs;
    for (std::vector<float>& h : host) dst.push_back(Tensor::Wrap(h.data(), {numel}, DType::kF32, DeviceType::kCPU));
    for (Tensor& t : dst) ptrs.push_back(&t);
    proto::CheckpointManifest m;
    DT_ASSERT_OK(updater->SaveState(ptrs, &m));
    for (const std::vector<float>& h : host) EXPECT_EQ(h, std::vector<float>(numel, 0.0f)) << name;
    EXPECT_EQ(m.optimizer(), name);
    ptrs.push_back(ptrs[0]);  // one too many (none at all: a rank that does not write)
    EXPECT_EQ(updater->SaveState(ptrs, &m).code(), Status::Code::kInvalidArgument) << name;
  }
}

TEST(OptimAlgorithm, UnknownNamesAndSharedHyperParametersAreRefused) {
  const OptimAlgorithmSpec* spec = nullptr;
  std::unique_ptr<OptimAlgorithm> algo;
  OptimizerOptions o;
  o.name = "lamb";
  const Status st = CreateOptimAlgorithm(o, &spec, &algo);
  EXPECT_EQ(st.code(), Status::Code::kInvalidArgument);
  EXPECT_NE(st.message().find("unknown optimizer 'lamb' (expected sgd|adamw"), std::string::npos) << st.message();
  for (const std::string& name : OptimAlgorithmNames()) {
    OptimizerOptions ok;
    ok.name = name;
    EXPECT_TRUE(CreateOptimAlgorithm(ok, &spec, &algo).ok()) << name;
    EXPECT_EQ(spec, FindOptimAlgorithm(name));
    for (int field = 0; field < 3; ++field) {
      OptimizerOptions bad = ok;
      (field == 0 ? bad.lr : field == 1 ? bad.weight_decay : bad.grad_clip) = -0.5;
      EXPECT_EQ(CreateOptimAlgorithm(bad, &spec, &algo).code(), Status::Code::kInvalidArgument) << name << field;
    }
  }
}

// The per-step constants fit a StagedArgs buffer, for every algorithm.
TEST(OptimAlgorithm, StagedConstantsFitTheBuffer) {
  for (const std::string& name : OptimAlgorithmNames()) {
    OptimizerOptions o;
    o.name = name;
    auto algo = Make(o);
    ASSERT_NE(algo, nullptr);
    StagedConstants c;
    algo->Prepare(0.01, 1, &c);
    EXPECT_GT(c.size, 0u) << name;
    EXPECT_LE(c.size, ops::kStagedArgsBytes) << name;
  }
}

// ZeRO-1 updates each rank's owned ranges separately: for every algorithm, the update of a buffer cut into
// uneven ranges must be bitwise the update of the whole buffer, step after step (with a gradient scale); with bf16
// state too (bf16_storage algorithms), whose stochastic rounding draws by the range's offset in the whole buffer.
TEST(OptimAlgorithm, RangesUpdateLikeTheWholeBuffer) {
  auto ctx = CpuContext();
  constexpr int64_t kN = 37;
  const int64_t cuts[] = {0, 5, 6, 30, kN};  // ranges of 5, 1, 24 and 7 elements
  for (const std::string& name : OptimAlgorithmNames()) {
    for (DType state_dtype : {DType::kF32, DType::kBF16}) {
      if (state_dtype == DType::kBF16 && !FindOptimAlgorithm(name)->bf16_storage) continue;
      SCOPED_TRACE(name + " state " + DTypeName(state_dtype));
      OptimizerOptions o;
      o.name = name;
      o.weight_decay = 0.05;
      o.state_dtype = state_dtype;
      o.seed = 3;
      auto whole = Make(o), cut = Make(o);
      ASSERT_TRUE(whole && cut);
      const size_t ns = FindOptimAlgorithm(name)->state_names.size();
      std::vector<Tensor> pw(1), pc(1), sw(ns), sc(ns);
      Tensor scale;
      const auto p0 = testing::RandomVector(kN, 1);
      DT_ASSERT_OK(testing::MakeTensor(*ctx, DType::kF32, {kN}, p0, &pw[0]));
      DT_ASSERT_OK(testing::MakeTensor(*ctx, DType::kF32, {kN}, p0, &pc[0]));
      DT_ASSERT_OK(testing::MakeTensor(*ctx, DType::kF32, {1}, {0.5}, &scale));
      for (size_t i = 0; i < ns; ++i) {
        DT_ASSERT_OK(testing::MakeTensor(*ctx, state_dtype, {kN}, std::vector<double>(kN, 0.0), &sw[i]));
        DT_ASSERT_OK(testing::MakeTensor(*ctx, state_dtype, {kN}, std::vector<double>(kN, 0.0), &sc[i]));
      }
      for (int step = 1; step <= 3; ++step) {
        Tensor g;
        DT_ASSERT_OK(testing::MakeTensor(*ctx, DType::kF32, {kN}, testing::RandomVector(kN, 10 + step), &g));
        whole->Prepare(0.01 * step, step, nullptr);
        cut->Prepare(0.01 * step, step, nullptr);
        std::vector<Tensor*> state;
        for (Tensor& t : sw) state.push_back(&t);
        DT_ASSERT_OK(whole->Update(*ctx, &pw[0], g, state, &scale, nullptr, nullptr));
        for (size_t r = 0; r + 1 < std::size(cuts); ++r) {
          const int64_t first = cuts[r], count = cuts[r + 1] - cuts[r];
          Tensor p, gv;
          std::vector<Tensor> views(ns);
          std::vector<Tensor*> vs;
          DT_ASSERT_OK(pc[0].View(first, {count}, &p));
          DT_ASSERT_OK(g.View(first, {count}, &gv));
          for (size_t i = 0; i < ns; ++i) {
            DT_ASSERT_OK(sc[i].View(first, {count}, &views[i]));
            vs.push_back(&views[i]);
          }
          DT_ASSERT_OK(cut->Update(*ctx, &p, gv, vs, &scale, nullptr, nullptr, /*offset=*/first));
        }
      }
      std::vector<double> a, b;
      DT_ASSERT_OK(testing::Fetch(*ctx, pw[0], &a));
      DT_ASSERT_OK(testing::Fetch(*ctx, pc[0], &b));
      EXPECT_EQ(a, b);
      EXPECT_GT(testing::MaxAbsDiff(a, p0), 1e-3) << "the updates moved the parameters";
      for (size_t i = 0; i < ns; ++i) {
        DT_ASSERT_OK(testing::Fetch(*ctx, sw[i], &a));
        DT_ASSERT_OK(testing::Fetch(*ctx, sc[i], &b));
        EXPECT_EQ(a, b) << FindOptimAlgorithm(name)->state_names[i];
      }
    }
  }
}

// bf16 storage (optim.state_dtype, train.master_weights, train.gradients) is for algorithms whose spec has bf16_storage
// (AdamW); the others are refused with the key and the algorithm named.
TEST(OptimAlgorithm, Bf16StorageOnlyWhereTheSpecTakesIt) {
  const OptimAlgorithmSpec* spec = nullptr;
  std::unique_ptr<OptimAlgorithm> algo;
  for (const std::string& name : OptimAlgorithmNames()) {
    const bool takes = FindOptimAlgorithm(name)->bf16_storage;
    for (int which = 0; which < 3; ++which) {
      OptimizerOptions o;
      o.name = name;
      (which == 0 ? o.state_dtype : which == 1 ? o.param_dtype : o.grad_dtype) = DType::kBF16;
      const Status st = CreateOptimAlgorithm(o, &spec, &algo);
      EXPECT_EQ(st.ok(), takes) << name << " " << which << ": " << st.ToString();
      if (!takes) {
        const std::string key = which == 0   ? "optim.state_dtype bf16"
                                : which == 1 ? "train.master_weights bf16"
                                             : "train.gradients bf16";
        EXPECT_NE(st.message().find(key + " is not supported by optim.name " + name), std::string::npos)
            << st.message();
      }
    }
  }
  EXPECT_TRUE(FindOptimAlgorithm("adamw")->bf16_storage);
  OptimizerOptions f16;
  f16.state_dtype = DType::kF16;
  EXPECT_EQ(CreateOptimAlgorithm(f16, &spec, &algo).code(), Status::Code::kInvalidArgument);
}

// The replicated optimizer allocates its state in optim.state_dtype and steps f32 params with it (CPU).
TEST(Optimizer, KeepsStateInTheStateDtype) {
  auto ctx = CpuContext();
  OptimizerOptions o;
  o.lr = 0.1;
  o.state_dtype = DType::kBF16;
  std::unique_ptr<Optimizer> opt;
  DT_ASSERT_OK(Optimizer::Create(*ctx, o, 8, &opt));
  for (const auto& [name, t] : opt->state()) EXPECT_EQ(t->dtype(), DType::kBF16) << name;
  Tensor p, g;
  DT_ASSERT_OK(testing::MakeTensor(*ctx, DType::kF32, {8}, std::vector<double>(8, 1.0), &p));
  DT_ASSERT_OK(testing::MakeTensor(*ctx, DType::kF32, {8}, std::vector<double>(8, 0.5), &g));
  DT_ASSERT_OK(opt->Step(*ctx, p, g, 0.1));
  std::vector<double> after;
  DT_ASSERT_OK(testing::Fetch(*ctx, p, &after));
  for (double x : after) EXPECT_NEAR(x, 0.9, 1e-6);  // AdamW's first step: lr * sign(g)
  // Params of another dtype than the options' param_dtype are refused.
  Tensor p16;
  DT_ASSERT_OK(Tensor::Empty({8}, DType::kBF16, ctx->allocator(), &p16));
  EXPECT_EQ(opt->Step(*ctx, p16, g, 0.1).code(), Status::Code::kInvalidArgument);
  // So are grads of another dtype than grad_dtype.
  EXPECT_EQ(opt->Step(*ctx, p, p16, 0.1).code(), Status::Code::kInvalidArgument);
}

// train.gradients bf16: the optimizer reads bf16 grads exactly. With bf16-representable values the step equals the
// step on the same values in f32 grads, on the mixed path both times (bf16 state), bit for bit; the norm is the same.
TEST(Optimizer, ReadsBf16GradsExactly) {
  auto ctx = CpuContext();
  std::vector<double> grads = {0.5, -0.25, 3.0, 1e-3, -7.5, 0.0, 2.0, -0.125};
  for (double& x : grads) x = static_cast<double>(static_cast<float>(x));
  std::vector<double> after[2];
  float norm[2] = {};
  for (int g16 = 0; g16 < 2; ++g16) {
    OptimizerOptions o;
    o.lr = 0.1;
    o.grad_clip = 1.0;
    o.state_dtype = DType::kBF16;
    o.grad_dtype = g16 ? DType::kBF16 : DType::kF32;
    std::unique_ptr<Optimizer> opt;
    DT_ASSERT_OK(Optimizer::Create(*ctx, o, 8, &opt));
    Tensor p, g;
    DT_ASSERT_OK(testing::MakeTensor(*ctx, DType::kF32, {8}, std::vector<double>(8, 1.0), &p));
    DT_ASSERT_OK(testing::MakeTensor(*ctx, o.grad_dtype, {8}, grads, &g));
    DT_ASSERT_OK(opt->Step(*ctx, p, g, 0.1));
    DT_ASSERT_OK(testing::Fetch(*ctx, p, &after[g16]));
    DT_ASSERT_OK(opt->LastGradNorm(*ctx, &norm[g16]));
  }
  EXPECT_EQ(after[1], after[0]);
  EXPECT_EQ(norm[1], norm[0]);
  EXPECT_GT(norm[0], 8.0f);  // sqrt(0.25 + 0.0625 + 9 + 56.25 + 4 + ...): the clip applied
}

// train.master_weights split: AdamW on bf16 high halves with the low halves as its last state tensor steps exactly as
// AdamW on the f32 masters (clipping on, 4 steps): the halves join to its params bit for bit. The low halves are not
// part of state() (a checkpoint holds the joined params); split needs bf16 params and an algorithm that takes it.
TEST(Optimizer, SplitMastersStepAsF32Masters) {
  auto ctx = CpuContext();
  constexpr int64_t n = 257;
  OptimizerOptions o;
  o.lr = 0.01;
  o.weight_decay = 0.1;
  o.grad_clip = 1.0;
  std::unique_ptr<Optimizer> f32, split;
  DT_ASSERT_OK(Optimizer::Create(*ctx, o, n, &f32));
  EXPECT_EQ(f32->master_low(), nullptr);
  o.param_dtype = DType::kBF16;
  o.split_masters = true;
  DT_ASSERT_OK(Optimizer::Create(*ctx, o, n, &split));
  ASSERT_NE(split->master_low(), nullptr);
  EXPECT_EQ(split->master_low()->dtype(), DType::kBF16);
  ASSERT_EQ(split->state().size(), 2u);
  EXPECT_EQ(split->state()[1].first, "exp_avg_sq");
  std::vector<double> init = testing::RandomVector(n, 1, -1, 1);
  for (double& x : init) x = Bf16BitsToF32(RoundBf16Rne(static_cast<float>(x)));  // the masters start bf16
  Tensor p, hi;
  DT_ASSERT_OK(testing::MakeTensor(*ctx, DType::kF32, {n}, init, &p));
  DT_ASSERT_OK(testing::MakeTensor(*ctx, DType::kBF16, {n}, init, &hi));
  for (int s = 1; s <= 4; ++s) {
    Tensor g;
    DT_ASSERT_OK(testing::MakeTensor(*ctx, DType::kF32, {n}, testing::RandomVector(n, 10 + s, -0.3, 0.3), &g));
    DT_ASSERT_OK(f32->Step(*ctx, p, g, 0.01));
    DT_ASSERT_OK(split->Step(*ctx, hi, g, 0.01));
  }
  const uint16_t* h = hi.data<uint16_t>();
  const uint16_t* l = split->master_low()->data<uint16_t>();
  int64_t differ = 0, moved = 0;
  for (int64_t i = 0; i < n; ++i) {
    differ += F32Bits(ops::JoinF32(h[i], l[i])) != F32Bits(p.data<float>()[i]);
    moved += l[i] != 0;  // the masters left the bf16 grid
  }
  EXPECT_EQ(differ, 0);
  EXPECT_GT(moved, n / 2);
  // Refused: split without bf16 params, and by an algorithm without split_masters.
  o.param_dtype = DType::kF32;
  std::unique_ptr<Optimizer> bad;
  EXPECT_EQ(Optimizer::Create(*ctx, o, n, &bad).code(), Status::Code::kInvalidArgument);
  o.param_dtype = DType::kBF16;
  o.name = "sgd";
  const Status sgd = Optimizer::Create(*ctx, o, n, &bad);
  EXPECT_EQ(sgd.code(), Status::Code::kInvalidArgument);
  EXPECT_NE(sgd.message().find("train.master_weights split is not supported by optim.name sgd"), std::string::npos)
      << sgd.ToString();
}

// The one statement of the bf16 gradients' rule (the run check, the memory fit and MakeParameterUpdater ask it):
// fp32 anywhere; bf16 gradients and bf16 or split masters replicated at any world size and with ZeRO-1 on one rank
// (no reduce-scatter), refused with ZeRO-1 on more, naming the keys and the world size.
TEST(ParameterUpdater, Bf16GradientsAndMastersRunWithoutZeroOne) {
  auto train = [](const std::string& gradients, const std::string& masters) {
    proto::TrainConfig t;
    t.set_gradients(gradients);
    t.set_master_weights(masters);
    return t;
  };
  DT_ASSERT_OK(CheckZeroOneStorage(train("fp32", "fp32"), 8, true));
  DT_ASSERT_OK(CheckZeroOneStorage(train("", ""), 8, true));  // a config built in code
  DT_ASSERT_OK(CheckZeroOneStorage(train("bf16", "split"), 8, false));
  DT_ASSERT_OK(CheckZeroOneStorage(train("bf16", "bf16"), 1, true));
  const Status grads = CheckZeroOneStorage(train("bf16", "fp32"), 2, true);
  EXPECT_EQ(grads.code(), Status::Code::kInvalidArgument);
  EXPECT_NE(grads.message().find("train.gradients bf16 does not run with dist.zero1 on 2 ranks"), std::string::npos)
      << grads.ToString();
  EXPECT_NE(grads.message().find("set dist.zero1 false"), std::string::npos) << grads.ToString();
  for (const std::string masters : {"bf16", "split"}) {
    const Status st = CheckZeroOneStorage(train("fp32", masters), 4, true);
    EXPECT_EQ(st.code(), Status::Code::kInvalidArgument);
    EXPECT_NE(st.message().find("train.master_weights " + masters + " does not run with dist.zero1 on 4 ranks"),
              std::string::npos)
        << st.ToString();
  }
}

}  // namespace
}  // namespace dtrain::runtime
