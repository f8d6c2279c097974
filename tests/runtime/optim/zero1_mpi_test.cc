// Zero1Optimizer between real processes: `mpiexec -n 2 runtime_zero1_mpi_test` (any world size works).
// A small MLP is trained on the same per-rank data twice — GradientReducer (average) + Optimizer on the
// full buffer, and Zero1Optimizer — and the parameters must agree. The two differ only in the order of
// floating-point sums: reduce-scatter vs all-reduce (bitwise equal for MPI with 2 ranks) and the global
// norm (per-shard f32 partial sums, ~1e-7 relative in the clip coefficient). Measured here (CPU, 2, 3
// and 4 ranks): max |dp| <= 6e-8 (a few f32 ulps) after 12 steps; asserted: max |dp| <= kTol =
// 1e-6 * max(1, max |p|). ctest runs 2 ranks; run `mpiexec -n 3` / `-n 4` by hand for odd worlds and
// uneven splits. ZeRO-1 works in place in the model's grads/params: the memory and grads contracts
// are checked here too.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "comm/communicator.h"
#include "core/allocator.h"
#include "core/check.h"
#include "models/mlp.h"
#include "runtime/optim/gradient_reducer.h"
#include "runtime/optim/optimizer.h"
#include "runtime/optim/zero1.h"
#include "tests/comm/mpi_test_env.h"
#include "tests/testing/grad_check.h"

DT_REGISTER_MPI_TEST_ENVIRONMENT();

namespace dtrain::runtime {
namespace {

using dtrain::testing::MpiTestEnvironment;

constexpr int64_t kIn = 12, kClasses = 3, kBatch = 8;
constexpr uint64_t kSeed = 7;
constexpr double kTol = 1e-6;  // relative to max(1, max |p|); see the file comment

// Sizes 84, 7, 35, 5, 15, 3: 149 elements (odd: a padded tiny bucket for every even world size).
models::MlpOptions MlpOpts() {
  models::MlpOptions o;
  o.input_dim = kIn;
  o.hidden = {7, 5};
  o.num_classes = kClasses;
  return o;
}

// Deterministic per-(micro-batch, rank) data.
Status MakeBatch(DeviceContext& ctx, int64_t micro, int rank, Tensor* x, Tensor* y) {
  const auto xs = testing::RandomVector(kBatch * kIn, 1000 * static_cast<uint64_t>(micro) + rank + 1);
  std::vector<double> ys(kBatch);
  for (int64_t i = 0; i < kBatch; ++i) ys[i] = static_cast<double>((micro * 7 + rank * 3 + i * 5) % kClasses);
  DT_RETURN_IF_ERROR(testing::MakeTensor(ctx, DType::kF32, {kBatch, kIn}, xs, x));
  return testing::MakeTensor(ctx, DType::kI32, {kBatch}, ys, y);
}

double LrAt(int64_t step, double base) { return base * (1.0 + static_cast<double>(step % 3)) / 3.0; }

// The gradient exchange of one path: GradientReducer or Zero1Optimizer.
struct Exchange {
  std::function<void(bool)> set_sync;
  models::GradReadyFn announce;
  std::function<Status()> finalize;
};

// Zero grads, then `accum` micro-batches; gradients are exchanged on the last one only (the earlier
// ones announce with sync off, as the trainer's accumulation contract allows).
Status Accumulate(DeviceContext& ctx, models::Model& m, const Exchange& ex, int64_t step, int rank, int accum) {
  DT_RETURN_IF_ERROR(m.grads().SetZero(ctx.stream()));
  for (int micro = 0; micro < accum; ++micro) {
    Tensor x, y;
    DT_RETURN_IF_ERROR(MakeBatch(ctx, step * accum + micro, rank, &x, &y));
    DT_RETURN_IF_ERROR(m.Forward(x, y));
    ex.set_sync(micro + 1 == accum);
    DT_RETURN_IF_ERROR(m.Backward(1.0f / static_cast<float>(accum), ex.announce));
    DT_RETURN_IF_ERROR(ex.finalize());
  }
  return Status::OK();
}

// Plain data parallelism: the reference.
struct DataParallel {
  std::unique_ptr<models::Mlp> model;
  std::unique_ptr<GradientReducer> reducer;
  std::unique_ptr<Optimizer> opt;

  Status Init(DeviceContext& ctx, comm::Communicator* comm, const OptimizerOptions& oo, size_t bucket_bytes) {
    DT_RETURN_IF_ERROR(models::Mlp::Create(ctx, MlpOpts(), &model));
    DT_RETURN_IF_ERROR(model->InitParams(kSeed));
    GradientReducer::Options ro;
    ro.bucket_bytes = bucket_bytes;
    DT_RETURN_IF_ERROR(GradientReducer::Create(ctx, comm, model->param_infos(), &model->grads(), ro, &reducer));
    return Optimizer::Create(ctx, oo, model->params().numel(), &opt);
  }
  Status Train(DeviceContext& ctx, int64_t from, int64_t to, int rank, int accum, double lr) {
    Exchange ex{[this](bool s) { reducer->set_sync(s); }, [this](int i) { return reducer->MarkReady(i); },
                [this] { return reducer->Finalize(); }};
    for (int64_t s = from; s < to; ++s) {
      DT_RETURN_IF_ERROR(Accumulate(ctx, *model, ex, s, rank, accum));
      DT_RETURN_IF_ERROR(opt->Step(ctx, model->params(), model->grads(), LrAt(s, lr)));
    }
    return Status::OK();
  }
};

struct Sharded {
  std::unique_ptr<models::Mlp> model;
  std::unique_ptr<Zero1Optimizer> zero;

  Status Init(DeviceContext& ctx, comm::Communicator* comm, const OptimizerOptions& oo, size_t bucket_bytes) {
    DT_RETURN_IF_ERROR(models::Mlp::Create(ctx, MlpOpts(), &model));
    DT_RETURN_IF_ERROR(model->InitParams(kSeed));
    return Zero1Optimizer::Create(ctx, oo, *model, comm, comm->rank(), comm->world_size(),
                                  static_cast<double>(bucket_bytes) / (1 << 20), &zero);
  }
  Status Train(DeviceContext& ctx, int64_t from, int64_t to, int rank, int accum, double lr) {
    Exchange ex{[this](bool s) { zero->set_sync(s); }, [this](int i) { return zero->OnGradReady(i); },
                [this] { return zero->Finalize(); }};
    for (int64_t s = from; s < to; ++s) {
      DT_RETURN_IF_ERROR(Accumulate(ctx, *model, ex, s, rank, accum));
      DT_RETURN_IF_ERROR(zero->Step(ctx, LrAt(s, lr)));
    }
    return Status::OK();
  }
};

// The full state through GatherStateInto, into host tensors of this rank (`keep`), or only this rank's part of the
// collective (!keep: *full stays empty).
Status Gather(DeviceContext& ctx, Sharded& z, std::vector<std::pair<std::string, Tensor>>* full, bool keep = true) {
  full->clear();
  const OptimizerOptions& oo = z.zero->options();
  std::vector<Tensor*> dst;
  if (keep) {
    for (const std::string& name : FindOptimAlgorithm(oo.name)->state_names) {
      Tensor t;
      DT_RETURN_IF_ERROR(Tensor::Empty({z.model->params().numel()}, oo.state_dtype, ctx.pinned_allocator(), &t));
      full->emplace_back(name, t);
    }
    for (auto& [name, t] : *full) dst.push_back(&t);
  }
  DT_RETURN_IF_ERROR(z.zero->GatherStateInto(dst));
  return ctx.Synchronize();  // the copies into host memory are queued on the compute stream
}

OptimizerOptions AdamW() {
  OptimizerOptions o;
  o.name = "adamw";
  o.lr = 1e-2;
  o.weight_decay = 0.01;
  o.grad_clip = 0.05;  // below the MLP's gradient norms: clipping is active (checked)
  return o;
}

OptimizerOptions Sgd() {
  OptimizerOptions o;
  o.name = "sgd";
  o.lr = 0.1;
  o.momentum = 0.9;
  o.nesterov = true;
  o.weight_decay = 1e-3;
  o.grad_clip = 0.05;
  return o;
}

OptimizerOptions Lion() {
  OptimizerOptions o;
  o.name = "lion";
  o.lr = 1e-3;
  o.beta2 = 0.99;
  o.weight_decay = 0.1;
  o.grad_clip = 0.05;
  return o;
}

// max |a - b| / max(1, max |b|).
double RelDiff(DeviceContext& ctx, const Tensor& a, const Tensor& b) {
  std::vector<double> va, vb;
  EXPECT_TRUE(testing::Fetch(ctx, a, &va).ok());
  EXPECT_TRUE(testing::Fetch(ctx, b, &vb).ok());
  return testing::MaxAbsDiff(va, vb) / testing::Scale(vb);
}

class Zero1MpiTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(DeviceContext::CreateCpu(&ctx_).ok());
    Status st = comm::CreateCommunicator(comm::Backend::kMpi, comm::CommOptions{}, &comm_);
    ASSERT_TRUE(st.ok()) << st.ToString();
    r_ = comm_->rank();
    n_ = comm_->world_size();
  }

  // Trains both paths `steps` steps and returns the params' relative difference.
  double TrainBoth(const OptimizerOptions& oo, size_t bucket_bytes, int accum, int steps) {
    DataParallel dp;
    Sharded z;
    Status st = dp.Init(*ctx_, comm_.get(), oo, bucket_bytes);
    EXPECT_TRUE(st.ok()) << st.ToString();
    st = z.Init(*ctx_, comm_.get(), oo, bucket_bytes);
    EXPECT_TRUE(st.ok()) << st.ToString();
    if (!dp.opt || !z.zero) return INFINITY;
    st = dp.Train(*ctx_, 0, steps, r_, accum, oo.lr);
    EXPECT_TRUE(st.ok()) << st.ToString();
    st = z.Train(*ctx_, 0, steps, r_, accum, oo.lr);
    EXPECT_TRUE(st.ok()) << st.ToString();
    float norm = 0;
    EXPECT_TRUE(dp.opt->LastGradNorm(*ctx_, &norm).ok());
    EXPECT_GT(norm, oo.grad_clip) << "clipping must be active for this test to cover it";
    EXPECT_EQ(z.zero->step(), steps);
    return RelDiff(*ctx_, z.model->params(), dp.model->params());
  }

  std::unique_ptr<DeviceContext> ctx_;
  std::unique_ptr<comm::Communicator> comm_;
  int r_ = 0, n_ = 1;
};

// Bucket sizes: one bucket per parameter (rounded to a multiple of world: params split unevenly), 64
// bytes (16 floats: buckets cut through the 84-element weight), 512 bytes, and one bucket for all.
const size_t kBucketBytes[] = {0, 64, 512, 1 << 20};

TEST_F(Zero1MpiTest, AdamWMatchesDataParallel) {
  for (size_t bytes : kBucketBytes) {
    for (int accum : {1, 2}) {
      const double d = TrainBoth(AdamW(), bytes, accum, 12);
      EXPECT_LE(d, kTol) << "bucket_bytes " << bytes << " accum " << accum;
      if (r_ == 0) std::printf("adamw bucket_bytes %zu accum %d: max rel |dp| = %.3g\n", bytes, accum, d);
    }
  }
}

TEST_F(Zero1MpiTest, SgdMatchesDataParallel) {
  for (size_t bytes : kBucketBytes) {
    const double d = TrainBoth(Sgd(), bytes, 1, 12);
    EXPECT_LE(d, kTol) << "bucket_bytes " << bytes;
    if (r_ == 0) std::printf("sgd bucket_bytes %zu: max rel |dp| = %.3g\n", bytes, d);
  }
}

// Lion's step is lr * sign(c) per element: a sum-order difference can only show where c is ~0 (none here).
TEST_F(Zero1MpiTest, LionMatchesDataParallel) {
  for (size_t bytes : kBucketBytes) {
    for (int accum : {1, 2}) {
      const double d = TrainBoth(Lion(), bytes, accum, 12);
      EXPECT_LE(d, kTol) << "bucket_bytes " << bytes << " accum " << accum;
      if (r_ == 0) std::printf("lion bucket_bytes %zu accum %d: max rel |dp| = %.3g\n", bytes, accum, d);
    }
  }
}

TEST_F(Zero1MpiTest, StateBytesIsFullOverWorld) {
  Sharded z;
  DT_ASSERT_OK(z.Init(*ctx_, comm_.get(), AdamW(), 64));
  const int64_t total = z.model->params().numel();  // 149
  // Every bucket but the tiny one is a multiple of world: the shard is exactly ceil-free.
  const int64_t shard = (total - total % n_) / n_ + (total % n_ != 0 ? 1 : 0);
  EXPECT_EQ(z.zero->shard_numel(), shard);
  EXPECT_EQ(z.zero->state_bytes(), static_cast<size_t>(2 * 4 * shard));
  const size_t full = 2 * 4 * static_cast<size_t>(total);
  EXPECT_GE(z.zero->state_bytes() * n_, full);
  EXPECT_LT(z.zero->state_bytes() * n_, full + 2 * 4 * static_cast<size_t>(n_));
  Sharded s;
  DT_ASSERT_OK(s.Init(*ctx_, comm_.get(), Sgd(), 64));
  EXPECT_EQ(s.zero->state_bytes(), static_cast<size_t>(4 * shard));
  Sharded l;
  DT_ASSERT_OK(l.Init(*ctx_, comm_.get(), Lion(), 64));
  EXPECT_EQ(l.zero->state_bytes(), static_cast<size_t>(4 * shard));
}

// In place: besides the state shards ZeRO-1 allocates only the tiny bucket's two padded buffers (world
// floats each, when numel % world != 0) and three f32 scalars.
TEST_F(Zero1MpiTest, AllocatesOnlyPaddingAndScalarsBesidesTheState) {
  for (const OptimizerOptions& oo : {AdamW(), Sgd(), Lion()}) {
    for (size_t bytes : kBucketBytes) {
      Sharded z;
      DT_ASSERT_OK(z.Init(*ctx_, comm_.get(), oo, bytes));
      const int64_t total = z.model->params().numel();  // 149
      const size_t pad = total % n_ != 0 ? 2 * sizeof(float) * n_ : 0;
      EXPECT_EQ(z.zero->shard_buffer_bytes(), pad + 3 * sizeof(float)) << oo.name << " " << bytes;
      EXPECT_LT(z.zero->shard_buffer_bytes(), 1024u);
    }
  }
}

// After a synced Finalize the model's grads hold, in this rank's owned ranges (slice r of every
// bucket), the average that GradientReducer leaves in the full buffer (bitwise for MPI with 2 ranks;
// kTol in general).
TEST_F(Zero1MpiTest, FinalizeLeavesTheAverageInOwnedRanges) {
  for (size_t bytes : kBucketBytes) {
    DataParallel dp;
    Sharded z;
    DT_ASSERT_OK(dp.Init(*ctx_, comm_.get(), AdamW(), bytes));
    DT_ASSERT_OK(z.Init(*ctx_, comm_.get(), AdamW(), bytes));
    Exchange dex{[&](bool s) { dp.reducer->set_sync(s); }, [&](int i) { return dp.reducer->MarkReady(i); },
                 [&] { return dp.reducer->Finalize(); }};
    Exchange zex{[&](bool s) { z.zero->set_sync(s); }, [&](int i) { return z.zero->OnGradReady(i); },
                 [&] { return z.zero->Finalize(); }};
    DT_ASSERT_OK(Accumulate(*ctx_, *dp.model, dex, 0, r_, 2));
    DT_ASSERT_OK(Accumulate(*ctx_, *z.model, zex, 0, r_, 2));
    std::vector<double> ref, got;
    DT_ASSERT_OK(testing::Fetch(*ctx_, dp.model->grads(), &ref));
    DT_ASSERT_OK(testing::Fetch(*ctx_, z.model->grads(), &got));
    int64_t owned = 0;
    double worst = 0;
    for (const Zero1Bucket& b : z.zero->buckets()) {
      const int64_t first = b.offset + r_ * b.shard_numel;
      const int64_t last = std::min(b.offset + b.numel, first + b.shard_numel);
      for (int64_t i = first; i < last; ++i, ++owned) worst = std::max(worst, std::fabs(got[i] - ref[i]));
    }
    EXPECT_LE(worst, kTol * testing::Scale(ref)) << "bucket_bytes " << bytes;
    if (n_ == 2) {
      EXPECT_EQ(worst, 0.0) << "bucket_bytes " << bytes;
    }
    // Owned ranges: this rank's slice of every bucket (the tiny bucket's element r when r < 149 % n).
    const int64_t total = z.model->params().numel();
    EXPECT_EQ(owned, (total - total % n_) / n_ + (r_ < total % n_ ? 1 : 0));
  }
}

// GatherStateInto reassembles exactly the state plain data parallelism holds; LoadState takes it back.
TEST_F(Zero1MpiTest, GatheredStateEqualsOptimizerStateAndRoundTrips) {
  for (const OptimizerOptions& oo : {AdamW(), Sgd(), Lion()}) {
    DataParallel dp;
    Sharded z;
    DT_ASSERT_OK(dp.Init(*ctx_, comm_.get(), oo, 64));
    DT_ASSERT_OK(z.Init(*ctx_, comm_.get(), oo, 64));
    DT_ASSERT_OK(dp.Train(*ctx_, 0, 6, r_, 1, oo.lr));
    DT_ASSERT_OK(z.Train(*ctx_, 0, 6, r_, 1, oo.lr));
    std::vector<std::pair<std::string, Tensor>> full, rank0;
    DT_ASSERT_OK(Gather(*ctx_, z, &full));
    // Only rank 0 keeping it (as a checkpoint): the same values there.
    DT_ASSERT_OK(Gather(*ctx_, z, &rank0, r_ == 0));
    ASSERT_EQ(rank0.size(), r_ == 0 ? full.size() : 0u);
    for (size_t i = 0; i < rank0.size(); ++i) EXPECT_EQ(RelDiff(*ctx_, rank0[i].second, full[i].second), 0.0);
    const auto ref = dp.opt->state();
    ASSERT_EQ(full.size(), ref.size());
    std::map<std::string, Tensor> by_name;
    for (size_t i = 0; i < full.size(); ++i) {
      EXPECT_EQ(full[i].first, ref[i].first);
      EXPECT_LE(RelDiff(*ctx_, full[i].second, *ref[i].second), kTol) << oo.name << " " << ref[i].first;
      by_name[full[i].first] = full[i].second;
    }
    // Round trip: a fresh Zero1Optimizer loads the gathered state and gathers the same bytes back.
    Sharded back;
    DT_ASSERT_OK(back.Init(*ctx_, comm_.get(), oo, 512));  // another bucket layout: slices differ
    DT_ASSERT_OK(back.zero->LoadState(by_name));
    std::vector<std::pair<std::string, Tensor>> again;
    DT_ASSERT_OK(Gather(*ctx_, back, &again));
    ASSERT_EQ(again.size(), full.size());
    for (size_t i = 0; i < full.size(); ++i) EXPECT_EQ(RelDiff(*ctx_, again[i].second, full[i].second), 0.0);
    by_name.erase(full[0].first);
    EXPECT_EQ(back.zero->LoadState(by_name).code(), Status::Code::kInvalidArgument);
  }
}

// A checkpoint's gather goes bucket by bucket through one buffer of the largest bucket: the context's memory grows
// by that during the gather and not at all after it — never by the full state (which every rank used to allocate
// and keep until the next save). In place and offloaded.
TEST_F(Zero1MpiTest, GatherAllocatesOneBucketNotTheState) {
  for (bool offload : {false, true}) {
    OptimizerOptions oo = AdamW();
    oo.offload = offload;
    Sharded z;
    DT_ASSERT_OK(z.Init(*ctx_, comm_.get(), oo, 64));
    DT_ASSERT_OK(z.Train(*ctx_, 0, 2, r_, 1, oo.lr));
    const int64_t numel = z.model->params().numel();
    std::vector<std::vector<float>> host(2, std::vector<float>(numel));
    std::vector<Tensor> dst;
    std::vector<Tensor*> ptrs;
    for (std::vector<float>& h : host) dst.push_back(Tensor::Wrap(h.data(), {numel}, DType::kF32, DeviceType::kCPU));
    for (Tensor& t : dst) ptrs.push_back(&t);
    int64_t largest = 0;
    for (const Zero1Bucket& b : z.zero->buckets()) largest = std::max(largest, b.shard_numel * n_);
    const int64_t bound = static_cast<int64_t>(CpuAllocator::RoundSize(static_cast<size_t>(largest) * 4));
    ASSERT_LT(bound, numel * 4) << "the bound must be below one state tensor";
    ctx_->ResetMemoryPeak();
    const int64_t before = ctx_->memory_stats().bytes_in_use;
    DT_ASSERT_OK(z.zero->GatherStateInto(ptrs));
    EXPECT_LE(ctx_->memory_stats().peak_bytes_in_use - before, bound) << "offload " << offload;
    EXPECT_EQ(ctx_->memory_stats().bytes_in_use, before) << "offload " << offload;
  }
}

// Resume: plain state -> Zero1Optimizer, and Zero1Optimizer state -> plain Optimizer, each continue
// exactly like the run they were taken from.
TEST_F(Zero1MpiTest, ResumeAcrossPathsGivesTheSameContinuation) {
  const OptimizerOptions oo = AdamW();
  constexpr int64_t kFirst = 5, kLast = 10;
  // Plain run, then a Zero1Optimizer resumed from its params + state.
  DataParallel dp;
  DT_ASSERT_OK(dp.Init(*ctx_, comm_.get(), oo, 64));
  DT_ASSERT_OK(dp.Train(*ctx_, 0, kFirst, r_, 1, oo.lr));
  Sharded z;
  DT_ASSERT_OK(z.Init(*ctx_, comm_.get(), oo, 64));
  DT_ASSERT_OK(z.model->params().CopyFrom(dp.model->params()));
  std::map<std::string, Tensor> saved;
  for (auto& [name, t] : dp.opt->state()) saved[name] = *t;
  DT_ASSERT_OK(z.zero->LoadState(saved));
  z.zero->set_step(dp.opt->step());
  DT_ASSERT_OK(dp.Train(*ctx_, kFirst, kLast, r_, 1, oo.lr));
  DT_ASSERT_OK(z.Train(*ctx_, kFirst, kLast, r_, 1, oo.lr));
  EXPECT_LE(RelDiff(*ctx_, z.model->params(), dp.model->params()), kTol);

  // Zero1 run, then a plain optimizer resumed from its gathered state.
  Sharded z2;
  DT_ASSERT_OK(z2.Init(*ctx_, comm_.get(), oo, 0));
  DT_ASSERT_OK(z2.Train(*ctx_, 0, kFirst, r_, 1, oo.lr));
  std::vector<std::pair<std::string, Tensor>> full;
  DT_ASSERT_OK(Gather(*ctx_, z2, &full));
  DataParallel dp2;
  DT_ASSERT_OK(dp2.Init(*ctx_, comm_.get(), oo, 64));
  DT_ASSERT_OK(dp2.model->params().CopyFrom(z2.model->params()));
  auto state = dp2.opt->state();
  ASSERT_EQ(state.size(), full.size());
  for (size_t i = 0; i < full.size(); ++i) DT_ASSERT_OK(state[i].second->CopyFrom(full[i].second));
  dp2.opt->set_step(z2.zero->step());
  DT_ASSERT_OK(z2.Train(*ctx_, kFirst, kLast, r_, 1, oo.lr));
  DT_ASSERT_OK(dp2.Train(*ctx_, kFirst, kLast, r_, 1, oo.lr));
  EXPECT_LE(RelDiff(*ctx_, z2.model->params(), dp2.model->params()), kTol);
  // And both continuations equal the uninterrupted plain run.
  EXPECT_LE(RelDiff(*ctx_, dp2.model->params(), dp.model->params()), kTol);
}

TEST_F(Zero1MpiTest, StepNeedsASyncedFinalize) {
  Sharded z;
  DT_ASSERT_OK(z.Init(*ctx_, comm_.get(), AdamW(), 64));
  EXPECT_EQ(z.zero->Step(*ctx_, 1e-3).code(), Status::Code::kFailedPrecondition);
  z.zero->set_sync(false);  // keep the checks local: no collective is issued
  DT_ASSERT_OK(z.zero->OnGradReady(5));
  EXPECT_EQ(z.zero->OnGradReady(5).code(), Status::Code::kFailedPrecondition);
  EXPECT_EQ(z.zero->OnGradReady(6).code(), Status::Code::kInvalidArgument);
  DT_ASSERT_OK(z.zero->Finalize());
  EXPECT_EQ(z.zero->Step(*ctx_, 1e-3).code(), Status::Code::kFailedPrecondition);  // the micro-step did not sync
  z.zero->set_sync(true);
  DT_ASSERT_OK(z.zero->Finalize());  // reduces every bucket, announced or not
  DT_ASSERT_OK(z.zero->Step(*ctx_, 1e-3));
  EXPECT_EQ(z.zero->step(), 1);
}

// optim.offload cpu: the shards in host memory, each owned range streamed in chunks of 5 elements (chunks cut at the
// bucket edges too). The same params and gathered state as the shards in place, bit for bit (the same elementwise
// update per element, the same stochastic-rounding index for bf16 state), with none or the first part of each shard
// kept on the device (240 bytes: 30 of ~75 elements of AdamW's f32 state, 60 of a one-tensor or bf16 state); a fresh
// offloaded optimizer of another bucket layout, keeping nothing, loads that state and continues like the run in place.
TEST_F(Zero1MpiTest, OffloadedShardsEqualShardsInPlaceBitForBit) {
  OptimizerOptions bf16 = AdamW();
  bf16.state_dtype = DType::kBF16;
  for (const OptimizerOptions& base : {AdamW(), Sgd(), Lion(), bf16}) {
    OptimizerOptions off = base;
    off.offload = true;
    off.offload_chunk = 5;
    for (const auto& [bytes, keep] : {std::pair<size_t, int64_t>{0, 0}, {size_t{1} << 20, 0}, {0, 240}}) {
      SCOPED_TRACE(base.name + " state " + DTypeName(base.state_dtype) + " bucket_bytes " + std::to_string(bytes) +
                   " keep " + std::to_string(keep));  // (bucket_bytes 0: a bucket per parameter, 1 MiB: one for all)
      off.offload_keep_bytes = keep;
      Sharded in_place, offloaded;
      DT_ASSERT_OK(in_place.Init(*ctx_, comm_.get(), base, bytes));
      DT_ASSERT_OK(offloaded.Init(*ctx_, comm_.get(), off, bytes));
      EXPECT_FALSE(in_place.zero->offloaded());
      ASSERT_TRUE(offloaded.zero->offloaded());
      EXPECT_EQ(offloaded.zero->state_bytes(), in_place.zero->state_bytes());
      DT_ASSERT_OK(in_place.Train(*ctx_, 0, 8, r_, 2, base.lr));
      DT_ASSERT_OK(offloaded.Train(*ctx_, 0, 8, r_, 2, base.lr));
      EXPECT_EQ(RelDiff(*ctx_, offloaded.model->params(), in_place.model->params()), 0.0);
      std::vector<std::pair<std::string, Tensor>> a, b;
      DT_ASSERT_OK(Gather(*ctx_, in_place, &a));
      DT_ASSERT_OK(Gather(*ctx_, offloaded, &b));
      ASSERT_EQ(a.size(), b.size());
      std::map<std::string, Tensor> by_name;
      for (size_t i = 0; i < a.size(); ++i) {
        EXPECT_EQ(b[i].first, a[i].first);
        EXPECT_EQ(RelDiff(*ctx_, b[i].second, a[i].second), 0.0) << a[i].first;
        by_name[b[i].first] = b[i].second;
      }
      if (keep > 0) EXPECT_GT(offloaded.zero->offloaded()->kept(), 0);
      Sharded resumed;
      off.offload_keep_bytes = 0;
      DT_ASSERT_OK(resumed.Init(*ctx_, comm_.get(), off, 512));
      DT_ASSERT_OK(resumed.model->params().CopyFrom(offloaded.model->params()));
      DT_ASSERT_OK(resumed.zero->LoadState(by_name));
      resumed.zero->set_step(offloaded.zero->step());
      DT_ASSERT_OK(resumed.Train(*ctx_, 8, 12, r_, 2, base.lr));
      DT_ASSERT_OK(in_place.Train(*ctx_, 8, 12, r_, 2, base.lr));
      EXPECT_LE(RelDiff(*ctx_, resumed.model->params(), in_place.model->params()), kTol);
    }
  }
}

// CUDA: Zero1Optimizer over NCCL against GradientReducer + Optimizer over NCCL, one GPU per rank.
// NCCL's reduce-scatter and all-reduce may sum in different orders (W > 2): same tolerance as the CPU.
class Zero1GpuTest : public Zero1MpiTest {
 protected:
  void SetUp() override {
    Zero1MpiTest::SetUp();
    const auto& s = MpiTestEnvironment::session();
    const int gpus = CudaDeviceCount();
    if (gpus == 0) GTEST_SKIP() << "no CUDA device: ZeRO-1 over NCCL needs one GPU per rank";
    if (gpus < s.local_world_size()) {
      GTEST_SKIP() << "no CUDA device for every rank: " << gpus << " GPU(s) for " << s.local_world_size() << " ranks";
    }
    ASSERT_TRUE(DeviceContext::CreateCuda(s.local_rank(), &gpu_ctx_).ok());
    comm::CommOptions opts;
    opts.device = s.local_rank();
    Status st = comm::CreateCommunicator(comm::Backend::kNccl, opts, &nccl_);
    ASSERT_TRUE(st.ok()) << st.ToString();
  }

  std::unique_ptr<DeviceContext> gpu_ctx_;
  std::unique_ptr<comm::Communicator> nccl_;
};

TEST_F(Zero1GpuTest, MatchesDataParallelOnNccl) {
  for (const OptimizerOptions& oo : {AdamW(), Sgd(), Lion()}) {
    for (size_t bytes : kBucketBytes) {
      DataParallel dp;
      Sharded z;
      DT_ASSERT_OK(dp.Init(*gpu_ctx_, nccl_.get(), oo, bytes));
      DT_ASSERT_OK(z.Init(*gpu_ctx_, nccl_.get(), oo, bytes));
      DT_ASSERT_OK(dp.Train(*gpu_ctx_, 0, 12, r_, 2, oo.lr));
      // Both paths share one NCCL communicator from different comm streams: let the reducer's
      // collectives finish (the compute stream waited for them) before Zero1's start.
      DT_ASSERT_OK(gpu_ctx_->Synchronize());
      DT_ASSERT_OK(z.Train(*gpu_ctx_, 0, 12, r_, 2, oo.lr));
      const double d = RelDiff(*gpu_ctx_, z.model->params(), dp.model->params());
      EXPECT_LE(d, kTol) << oo.name << " bucket_bytes " << bytes;
      if (r_ == 0) std::printf("gpu %s bucket_bytes %zu: max rel |dp| = %.3g\n", oo.name.c_str(), bytes, d);
      // The gathered state matches the plain optimizer's too.
      std::vector<std::pair<std::string, Tensor>> full;
      DT_ASSERT_OK(Gather(*gpu_ctx_, z, &full));
      const auto ref = dp.opt->state();
      ASSERT_EQ(full.size(), ref.size());
      for (size_t i = 0; i < full.size(); ++i) EXPECT_LE(RelDiff(*gpu_ctx_, full[i].second, *ref[i].second), kTol);
      double exposed = -1;
      DT_ASSERT_OK(z.zero->TakeExposedCommMs(&exposed));
      EXPECT_GE(exposed, 0.0);
    }
  }
}

// The device memory Create takes is the state shards plus shard_buffer_bytes(), each tensor rounded
// up by the caching allocator: no shard copies of grads or params (they are reduced, updated and
// gathered in place in the model's buffers), and a step leaves nothing more allocated.
TEST_F(Zero1GpuTest, DeviceMemoryIsTheStateShardsOnly) {
  CudaCachingAllocator* alloc = gpu_ctx_->device_allocator();
  ASSERT_NE(alloc, nullptr);
  Sharded z;
  DT_ASSERT_OK(models::Mlp::Create(*gpu_ctx_, MlpOpts(), &z.model));
  DT_ASSERT_OK(z.model->InitParams(kSeed));
  // One local forward/backward first: the model's activations (kept across steps) are then allocated.
  Exchange local{[](bool) {}, nullptr, [] { return Status::OK(); }};
  DT_ASSERT_OK(Accumulate(*gpu_ctx_, *z.model, local, 0, r_, 1));
  DT_ASSERT_OK(gpu_ctx_->Synchronize());
  const int64_t before = alloc->stats().bytes_in_use;
  DT_ASSERT_OK(Zero1Optimizer::Create(*gpu_ctx_, AdamW(), *z.model, nccl_.get(), r_, n_, 64.0 / (1 << 20), &z.zero));
  const int64_t created = alloc->stats().bytes_in_use - before;
  const int64_t total = z.model->params().numel();
  auto round = [](size_t b) { return static_cast<int64_t>(CudaCachingAllocator::RoundSize(b)); };
  const int64_t expect = 2 * round(z.zero->state_bytes() / 2) + (total % n_ != 0 ? 2 * round(sizeof(float) * n_) : 0) +
                         3 * round(sizeof(float));
  EXPECT_EQ(created, expect);
  DT_ASSERT_OK(z.Train(*gpu_ctx_, 0, 2, r_, 1, 1e-2));
  DT_ASSERT_OK(gpu_ctx_->Synchronize());
  EXPECT_EQ(alloc->stats().bytes_in_use - before, expect) << "a step keeps no buffers of its own";
}

}  // namespace
}  // namespace dtrain::runtime
