// ParameterUpdater between real processes: `mpiexec -n 2 optim_parameter_updater_mpi_test`.
// The factory's choice (replicated / ZeRO-1 sharded) from the config; both strategies driven through the one
// seam exactly as the trainer drives them give the same parameters; checkpoints saved by one strategy restore
// into the other; and fp16 loss scaling with ZeRO-1: the found-inf check runs on the reduce-scattered shard and
// every rank skips the same step when one rank's gradient overflows.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "comm/communicator.h"
#include "core/check.h"
#include "models/mlp.h"
#include "runtime/optim/parameter_updater.h"
#include "tests/comm/mpi_test_env.h"
#include "tests/testing/grad_check.h"

DT_REGISTER_MPI_TEST_ENVIRONMENT();

namespace dtrain::runtime {
namespace {

constexpr int64_t kIn = 12, kClasses = 3, kBatch = 8;
constexpr uint64_t kSeed = 11;
constexpr double kTol = 1e-6;  // relative to max(1, max |p|), as zero1_mpi_test.cc

proto::Config MakeConfig(bool zero1, const std::string& precision) {
  proto::Config cfg;
  proto::OptimConfig* o = cfg.mutable_optim();
  o->set_name("adamw");
  o->set_lr(1e-2);
  o->set_beta1(0.9);
  o->set_beta2(0.999);
  o->set_eps(1e-8);
  o->set_weight_decay(0.01);
  o->set_grad_clip(0.05);
  cfg.mutable_dist()->set_zero1(zero1);
  cfg.mutable_dist()->set_bucket_mb(64.0 / (1 << 20));  // 64-byte buckets: several, cut through parameters
  cfg.mutable_train()->set_precision(precision);
  return cfg;
}

Status MakeBatch(DeviceContext& ctx, int64_t step, int rank, Tensor* x, Tensor* y) {
  const auto xs = testing::RandomVector(kBatch * kIn, 1000 * static_cast<uint64_t>(step) + rank + 1);
  std::vector<double> ys(kBatch);
  for (int64_t i = 0; i < kBatch; ++i) ys[i] = static_cast<double>((step * 7 + rank * 3 + i * 5) % kClasses);
  DT_RETURN_IF_ERROR(testing::MakeTensor(ctx, DType::kF32, {kBatch, kIn}, xs, x));
  return testing::MakeTensor(ctx, DType::kI32, {kBatch}, ys, y);
}

// One model and the updater the factory makes for it.
struct Worker {
  std::unique_ptr<models::Mlp> model;
  std::unique_ptr<ParameterUpdater> updater;

  Status Init(DeviceContext& ctx, const proto::Config& cfg, comm::Communicator* comm) {
    models::MlpOptions mo;
    mo.input_dim = kIn;
    mo.hidden = {7, 5};
    mo.num_classes = kClasses;
    DT_RETURN_IF_ERROR(models::Mlp::Create(ctx, mo, &model));
    DT_RETURN_IF_ERROR(model->InitParams(kSeed));
    const int rank = comm ? comm->rank() : 0, world = comm ? comm->world_size() : 1;
    return MakeParameterUpdater(cfg, ctx, *model, comm, rank, world, &updater);
  }

  // The trainer's protocol for one step (one micro-batch). With `poison_rank` == this rank, the first
  // gradient announced is overwritten with +inf just before its announcement.
  Status Step(DeviceContext& ctx, int64_t step, int rank, int poison_rank = -1) {
    DT_RETURN_IF_ERROR(model->grads().SetZero(ctx.stream()));
    Tensor x, y, in;
    DT_RETURN_IF_ERROR(MakeBatch(ctx, step, rank, &x, &y));
    DT_RETURN_IF_ERROR(model->InputsFromBatch(x, &in));
    DT_RETURN_IF_ERROR(model->Forward(in, y));
    float scale = 0;
    DT_RETURN_IF_ERROR(updater->LossScale(&scale));
    bool poisoned = false;
    DT_RETURN_IF_ERROR(model->Backward(scale, [&](int i) {
      if (rank == poison_rank && !poisoned) {
        model->grads().data<float>()[model->param_infos()[i].offset] = INFINITY;  // CPU: host memory
        poisoned = true;
      }
      return updater->OnGradReady(i);
    }));
    DT_RETURN_IF_ERROR(updater->Finalize());
    return updater->Step(1e-2 * (1.0 + static_cast<double>(step % 3)) / 3.0);
  }
};

std::vector<double> Values(DeviceContext& ctx, const Tensor& t) {
  std::vector<double> v;
  EXPECT_TRUE(testing::Fetch(ctx, t, &v).ok());
  return v;
}

double RelDiff(const std::vector<double>& a, const std::vector<double>& b) {
  return testing::MaxAbsDiff(a, b) / testing::Scale(b);
}

// The full state SaveState copies out (every rank keeping it here), as checkpoint files (name.bin -> bytes).
// The files as RestoreState takes them: f32 host tensors over the strings' bytes.
std::map<std::string, Tensor> AsTensors(const std::map<std::string, std::string>& files) {
  std::map<std::string, Tensor> out;
  for (const auto& [name, bytes] : files) {
    out[name] = Tensor::Wrap(const_cast<char*>(bytes.data()), {static_cast<int64_t>(bytes.size() / 4)}, DType::kF32,
                             DeviceType::kCPU);
  }
  return out;
}

std::map<std::string, std::string> SaveFiles(DeviceContext& ctx, Worker& w, proto::CheckpointManifest* m) {
  const std::vector<std::string> names = w.updater->state_names();
  const int64_t numel = w.model->params().numel();
  std::vector<std::vector<float>> host(names.size(), std::vector<float>(numel));
  std::vector<Tensor> dst;
  std::vector<Tensor*> ptrs;
  for (std::vector<float>& h : host) dst.push_back(Tensor::Wrap(h.data(), {numel}, DType::kF32, DeviceType::kCPU));
  for (Tensor& t : dst) ptrs.push_back(&t);
  Status st = w.updater->SaveState(ptrs, m);
  EXPECT_TRUE(st.ok()) << st.ToString();
  EXPECT_TRUE(ctx.Synchronize().ok());
  std::map<std::string, std::string> files;
  for (size_t i = 0; i < names.size(); ++i) {
    files[names[i] + ".bin"] =
        std::string(reinterpret_cast<const char*>(host[i].data()), host[i].size() * sizeof(float));
  }
  return files;
}

class ParameterUpdaterMpiTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(DeviceContext::CreateCpu(&ctx_).ok());
    Status st = comm::CreateCommunicator(comm::Backend::kMpi, comm::CommOptions{}, &comm_);
    ASSERT_TRUE(st.ok()) << st.ToString();
    r_ = comm_->rank();
    n_ = comm_->world_size();
  }
  // The same double on every rank?
  bool SameOnAllRanks(double v) {
    double mm[2] = {v, -v};
    Tensor t = Tensor::Wrap(mm, {2}, DType::kF64, DeviceType::kCPU);
    EXPECT_TRUE(comm_->AllReduce(&t, comm::ReduceOp::kMax, nullptr).ok());
    return mm[0] == -mm[1];
  }

  std::unique_ptr<DeviceContext> ctx_;
  std::unique_ptr<comm::Communicator> comm_;
  int r_ = 0, n_ = 1;
};

TEST_F(ParameterUpdaterMpiTest, FactoryPicksTheStrategyFromTheConfig) {
  Worker sharded, replicated, alone;
  ASSERT_TRUE(sharded.Init(*ctx_, MakeConfig(true, "fp32"), comm_.get()).ok());
  ASSERT_TRUE(replicated.Init(*ctx_, MakeConfig(false, "fp32"), comm_.get()).ok());
  ASSERT_TRUE(alone.Init(*ctx_, MakeConfig(true, "fp32"), nullptr).ok());  // zero1 without peers: replicated
  EXPECT_EQ(sharded.updater->placement(), "ZeRO-1: sharded over " + std::to_string(n_) + " ranks");
  EXPECT_EQ(replicated.updater->placement(), "replicated");
  EXPECT_EQ(alone.updater->placement(), "replicated");
  EXPECT_TRUE(sharded.updater->exchanges());
  EXPECT_TRUE(replicated.updater->exchanges());
  EXPECT_FALSE(alone.updater->exchanges());
  const int64_t numel = sharded.model->params().numel();  // 149
  EXPECT_EQ(replicated.updater->state_bytes(), static_cast<size_t>(2 * numel * 4));
  EXPECT_LT(sharded.updater->state_bytes(), static_cast<size_t>(2 * (numel / n_ + 8) * 4 + 1));

  proto::CheckpointManifest ms, mr;
  SaveFiles(*ctx_, sharded, &ms);
  SaveFiles(*ctx_, replicated, &mr);
  EXPECT_EQ(ms.optimizer(), "adamw");
  EXPECT_TRUE(ms.sharding().zero1());
  EXPECT_EQ(ms.sharding().world_size(), n_);
  EXPECT_GT(ms.sharding().num_buckets(), 1);
  EXPECT_FALSE(mr.sharding().zero1());
  EXPECT_EQ(mr.sharding().world_size(), 1);
  EXPECT_FALSE(ms.has_loss_scaler());  // fp32: no loss scaler
}

TEST_F(ParameterUpdaterMpiTest, BothStrategiesGiveTheSameParamsAndStateAndRestoreEachOther) {
  Worker sharded, replicated;
  ASSERT_TRUE(sharded.Init(*ctx_, MakeConfig(true, "fp32"), comm_.get()).ok());
  ASSERT_TRUE(replicated.Init(*ctx_, MakeConfig(false, "fp32"), comm_.get()).ok());
  for (int64_t s = 0; s < 6; ++s) {
    ASSERT_TRUE(sharded.Step(*ctx_, s, r_).ok());
    ASSERT_TRUE(replicated.Step(*ctx_, s, r_).ok());
  }
  EXPECT_EQ(sharded.updater->step(), 6);
  EXPECT_EQ(replicated.updater->step(), 6);
  EXPECT_LE(RelDiff(Values(*ctx_, sharded.model->params()), Values(*ctx_, replicated.model->params())), kTol);
  // Both report the same global gradient norm of the last step (grad_clip makes ZeRO-1 compute it).
  ASSERT_NE(sharded.updater->grad_norm(), nullptr);
  ASSERT_NE(replicated.updater->grad_norm(), nullptr);
  const double norm_s = Values(*ctx_, *sharded.updater->grad_norm())[0];
  const double norm_r = Values(*ctx_, *replicated.updater->grad_norm())[0];
  EXPECT_GT(norm_r, 0.0);
  EXPECT_NEAR(norm_s, norm_r, 1e-5 * norm_r);
  Worker unclipped;
  proto::Config no_clip = MakeConfig(true, "fp32");
  no_clip.mutable_optim()->set_grad_clip(0);
  ASSERT_TRUE(unclipped.Init(*ctx_, no_clip, comm_.get()).ok());
  ASSERT_TRUE(unclipped.Step(*ctx_, 0, r_).ok());
  if (unclipped.updater->placement() != "replicated") {  // sharded: world > 1
    EXPECT_EQ(unclipped.updater->grad_norm(), nullptr) << "ZeRO-1 without clipping computes no norm";
  }

  // The sharded full state equals the replicated state; a checkpoint of either restores into the other.
  proto::CheckpointManifest ms, mr;
  const auto fs = SaveFiles(*ctx_, sharded, &ms);
  const auto fr = SaveFiles(*ctx_, replicated, &mr);
  ASSERT_EQ(fs.size(), 2u);
  for (const char* name : {"exp_avg.bin", "exp_avg_sq.bin"}) {
    ASSERT_EQ(fs.at(name).size(), fr.at(name).size());
    const auto* a = reinterpret_cast<const float*>(fs.at(name).data());
    const auto* b = reinterpret_cast<const float*>(fr.at(name).data());
    std::vector<double> va(a, a + fs.at(name).size() / 4), vb(b, b + fr.at(name).size() / 4);
    EXPECT_LE(RelDiff(va, vb), kTol) << name;
    EXPECT_GT(testing::Scale(vb), 0.0);
  }
  Worker into_replicated, into_sharded;
  ASSERT_TRUE(into_replicated.Init(*ctx_, MakeConfig(false, "fp32"), comm_.get()).ok());
  ASSERT_TRUE(into_sharded.Init(*ctx_, MakeConfig(true, "fp32"), comm_.get()).ok());
  Status st = into_replicated.updater->RestoreState(ms, AsTensors(fs), "ck-sharded");
  ASSERT_TRUE(st.ok()) << st.ToString();
  st = into_sharded.updater->RestoreState(mr, AsTensors(fr), "ck-replicated");
  ASSERT_TRUE(st.ok()) << st.ToString();
  ASSERT_TRUE(ctx_->Synchronize().ok());
  EXPECT_EQ(into_replicated.updater->step(), 6);
  EXPECT_EQ(into_sharded.updater->step(), 6);
  proto::CheckpointManifest m2, m3;
  const auto back_r = SaveFiles(*ctx_, into_replicated, &m2);
  const auto back_s = SaveFiles(*ctx_, into_sharded, &m3);
  EXPECT_EQ(back_r.at("exp_avg.bin"), fs.at("exp_avg.bin"));  // bitwise: loading copies
  EXPECT_EQ(back_s.at("exp_avg_sq.bin"), fr.at("exp_avg_sq.bin"));

  // Bad checkpoints are named errors.
  auto short_files = fr;
  short_files["exp_avg.bin"].resize(8);
  st = into_sharded.updater->RestoreState(mr, AsTensors(short_files), "ck-x");
  EXPECT_EQ(st.code(), Status::Code::kInvalidArgument) << st.ToString();
  EXPECT_NE(st.message().find("ck-x/exp_avg.bin holds 2 values"), std::string::npos) << st.ToString();
  auto missing = fr;
  missing.erase("exp_avg_sq.bin");
  st = into_replicated.updater->RestoreState(mr, AsTensors(missing), "ck-y");
  EXPECT_EQ(st.code(), Status::Code::kDataLoss) << st.ToString();
  proto::CheckpointManifest sgd = mr;
  sgd.set_optimizer("sgd");
  st = into_sharded.updater->RestoreState(sgd, AsTensors(fr), "ck-z");
  EXPECT_EQ(st.code(), Status::Code::kInvalidArgument);
  EXPECT_NE(st.message().find("saved with optimizer 'sgd'"), std::string::npos) << st.ToString();
}

// The restore that streams files into the state: writing each file's bytes where StateSlices says (a whole tensor
// replicated, this rank's bucket ranges sharded) and telling RestoreState they are in place restores the same state
// as RestoreState from the files; ResetState then gives the state as created (zeros, no updates).
TEST_F(ParameterUpdaterMpiTest, StateSlicesTakeTheFullFilesAndResetStateUndoesThem) {
  Worker trained;
  ASSERT_TRUE(trained.Init(*ctx_, MakeConfig(false, "fp32"), comm_.get()).ok());
  for (int64_t s = 0; s < 4; ++s) ASSERT_TRUE(trained.Step(*ctx_, s, r_).ok());
  proto::CheckpointManifest m;
  const auto files = SaveFiles(*ctx_, trained, &m);
  for (bool zero1 : {false, true}) {
    SCOPED_TRACE(zero1);
    Worker w;
    ASSERT_TRUE(w.Init(*ctx_, MakeConfig(zero1, "fp32"), comm_.get()).ok());
    std::vector<StateSlice> slices;
    w.updater->StateSlices(&slices);
    int64_t taken = 0;
    for (const StateSlice& sl : slices) {
      ASSERT_EQ(sl.file_numel, trained.model->params().numel());
      ASSERT_EQ(files.count(sl.file), 1u) << sl.file;
      std::memcpy(sl.dst->data<float>() + sl.dst_offset,
                  reinterpret_cast<const float*>(files.at(sl.file).data()) + sl.file_offset, sl.numel * 4);
      taken += sl.numel;
    }
    // Replicated: both files whole; sharded: this rank's part of both (the ranks' parts tile each file).
    std::vector<double> total = {static_cast<double>(taken)};
    Tensor t = Tensor::Wrap(total.data(), {1}, DType::kF64, DeviceType::kCPU);
    if (zero1) {
      ASSERT_TRUE(comm_->AllReduce(&t, comm::ReduceOp::kSum, nullptr).ok());
    }
    EXPECT_EQ(total[0], 2.0 * static_cast<double>(trained.model->params().numel()));
    const Status st = w.updater->RestoreState(m, {}, "ck", {"exp_avg.bin", "exp_avg_sq.bin"});
    ASSERT_TRUE(st.ok()) << st.ToString();
    EXPECT_EQ(w.updater->step(), 4);
    proto::CheckpointManifest back;
    EXPECT_EQ(SaveFiles(*ctx_, w, &back), files);  // bitwise
    ASSERT_TRUE(w.updater->ResetState().ok());
    EXPECT_EQ(w.updater->step(), 0);
    for (const auto& [name, bytes] : SaveFiles(*ctx_, w, &back)) {
      EXPECT_EQ(bytes, std::string(bytes.size(), '\0')) << name;
    }
  }
}

// fp16 loss scaling with ZeRO-1 (refused before the seam): the sharded path unscales, clips and skips exactly
// like the replicated reference, and an overflow on one rank makes EVERY rank skip that step.
TEST_F(ParameterUpdaterMpiTest, Fp16WithZero1SkipsTheSameStepsAsReplicated) {
  Worker sharded, replicated;
  ASSERT_TRUE(sharded.Init(*ctx_, MakeConfig(true, "fp16"), comm_.get()).ok());
  ASSERT_TRUE(replicated.Init(*ctx_, MakeConfig(false, "fp16"), comm_.get()).ok());
  const int poison_rank = n_ - 1;
  for (int64_t s = 0; s < 5; ++s) {
    std::vector<double> before = Values(*ctx_, sharded.model->params());
    const int poison = s == 2 ? poison_rank : -1;  // step 3 overflows on the last rank only
    Status st = sharded.Step(*ctx_, s, r_, poison);
    ASSERT_TRUE(st.ok()) << st.ToString();
    st = replicated.Step(*ctx_, s, r_, poison);
    ASSERT_TRUE(st.ok()) << st.ToString();
    const std::vector<double> after = Values(*ctx_, sharded.model->params());
    if (s == 2) {
      EXPECT_EQ(testing::MaxAbsDiff(before, after), 0.0) << "the overflowing step must be skipped on rank " << r_;
    } else {
      EXPECT_GT(testing::MaxAbsDiff(before, after), 0.0) << "step " << s + 1;
    }
    EXPECT_LE(RelDiff(after, Values(*ctx_, replicated.model->params())), kTol) << "after step " << s + 1;
  }
  float scale_s = 0, scale_r = 0;
  ASSERT_TRUE(sharded.updater->LossScale(&scale_s).ok());
  ASSERT_TRUE(replicated.updater->LossScale(&scale_r).ok());
  EXPECT_EQ(scale_s, 32768.0f);  // 2^16 halved once
  EXPECT_EQ(scale_r, 32768.0f);
  EXPECT_TRUE(SameOnAllRanks(scale_s));
  proto::CheckpointManifest m;
  SaveFiles(*ctx_, sharded, &m);
  ASSERT_TRUE(m.has_loss_scaler());
  EXPECT_EQ(m.loss_scaler().skipped_steps(), 1);
  EXPECT_EQ(m.loss_scaler().good_steps(), 2);
  EXPECT_EQ(m.optimizer_step(), 5);
  EXPECT_TRUE(SameOnAllRanks(static_cast<double>(m.loss_scaler().skipped_steps())));
}

}  // namespace
}  // namespace dtrain::runtime
