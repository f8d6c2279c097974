// Zero1Optimizer in one process: the bucket layout (PlanZero1Buckets) for several world sizes, and a
// world of one (an in-process loopback communicator) against Optimizer on the same gradients. The
// multi-rank equivalence is in zero1_mpi_test.cc.
#include "runtime/optim/zero1.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <map>
#include <memory>
#include <vector>

#include "comm/communicator.h"
#include "core/check.h"
#include "models/mlp.h"
#include "runtime/optim/optimizer.h"
#include "tests/testing/grad_check.h"

namespace dtrain::runtime {
namespace {

std::vector<models::ParamInfo> MakeParams(const std::vector<int64_t>& sizes) {
  std::vector<models::ParamInfo> params;
  int64_t offset = 0;
  for (size_t i = 0; i < sizes.size(); ++i) {
    models::ParamInfo p;
    p.name = "p" + std::to_string(i);
    p.shape = {sizes[i]};
    p.offset = offset;
    p.numel = sizes[i];
    offset += sizes[i];
    params.push_back(p);
  }
  return params;
}

const std::vector<int64_t> kSizes = {3, 1000, 17, 4096, 1, 250, 33};  // 5400 elements
constexpr int64_t kTotal = 5400;

using Range = std::pair<int64_t, int64_t>;  // offset, numel

std::vector<Range> Ranges(const std::vector<Zero1Bucket>& buckets) {
  std::vector<Range> r;
  for (const auto& b : buckets) r.emplace_back(b.offset, b.numel);
  return r;
}

TEST(PlanZero1BucketsTest, ClosedFormLayouts) {
  const auto params = MakeParams(kSizes);
  std::vector<Zero1Bucket> b;
  // World 2, 4 KiB: the GradientReducer's buckets {p3..p6}, {p0..p2} are already even.
  DT_ASSERT_OK(PlanZero1Buckets(params, kTotal, 2, 4096, &b));
  EXPECT_EQ(Ranges(b), (std::vector<Range>{{1020, 4380}, {0, 1020}}));
  EXPECT_EQ(b[0].shard_numel, 2190);
  EXPECT_EQ(b[1].shard_offset, 2190);
  EXPECT_EQ(b[0].params, (std::vector<int>{3, 4, 5, 6}));

  // World 7 (5400 = 7 * 771 + 3): 4380 rounds up to 4382 and takes two elements of p2; then 1015 = 7 * 145;
  // the first 3 elements form the padded tiny bucket.
  DT_ASSERT_OK(PlanZero1Buckets(params, kTotal, 7, 4096, &b));
  EXPECT_EQ(Ranges(b), (std::vector<Range>{{1018, 4382}, {3, 1015}, {0, 3}}));
  EXPECT_EQ(b[0].params, (std::vector<int>{2, 3, 4, 5, 6}));
  EXPECT_EQ(b[1].params, (std::vector<int>{1, 2}));
  EXPECT_EQ(b[2].params, (std::vector<int>{0}));
  EXPECT_EQ(b[2].shard_numel, 1);
  EXPECT_EQ(b[2].shard_offset, 626 + 145);

  // World 2, one parameter per bucket, each rounded up to even: parameters split unevenly.
  DT_ASSERT_OK(PlanZero1Buckets(params, kTotal, 2, 0, &b));
  EXPECT_EQ(Ranges(b), (std::vector<Range>{{5366, 34}, {5116, 250}, {1020, 4096}, {1002, 18}, {2, 1000}, {0, 2}}));
  EXPECT_EQ(b[0].params, (std::vector<int>{5, 6}));
  EXPECT_EQ(b[1].params, (std::vector<int>{4, 5}));
  EXPECT_EQ(b[4].params, (std::vector<int>{0, 1}));
}

// Invariants for many world sizes and bucket sizes: buckets tile the buffer from the end, all but a
// tiny last one (total % world elements) are multiples of world, shards are back to back, each bucket
// lists exactly the non-empty parameters it overlaps, and the shard is (total - rem) / world + (rem > 0).
TEST(PlanZero1BucketsTest, InvariantsForAnyWorld) {
  const auto params = MakeParams({5, 0, 1, 77, 1, 1, 300, 2, 129, 0, 64, 3});
  int64_t total = 0;
  for (const auto& p : params) total += p.numel;
  total += 4;  // a gap after the last parameter
  for (int world : {1, 2, 3, 4, 5, 8, 16}) {
    for (size_t bytes : {size_t{0}, size_t{16}, size_t{100}, size_t{1000}, size_t{1} << 20}) {
      SCOPED_TRACE("world " + std::to_string(world) + " bytes " + std::to_string(bytes));
      std::vector<Zero1Bucket> b;
      DT_ASSERT_OK(PlanZero1Buckets(params, total, world, bytes, &b));
      const int64_t rem = total % world;
      int64_t hi = total, shard = 0;
      for (size_t k = 0; k < b.size(); ++k) {
        EXPECT_EQ(b[k].offset + b[k].numel, hi);
        EXPECT_EQ(b[k].shard_offset, shard);
        EXPECT_EQ(b[k].shard_numel, (b[k].numel + world - 1) / world);
        const bool tiny = rem > 0 && k + 1 == b.size();
        if (tiny) {
          EXPECT_EQ(b[k].numel, rem);
        } else {
          EXPECT_EQ(b[k].numel % world, 0);
          // Closed at bucket_bytes, unless it ran into the start (or the tiny bucket).
          if (b[k].offset > rem) {
            EXPECT_GE(b[k].numel * 4, static_cast<int64_t>(bytes));
          }
        }
        std::vector<int> want;
        for (size_t i = 0; i < params.size(); ++i) {
          const auto& p = params[i];
          if (p.numel > 0 && p.offset < hi && p.offset + p.numel > b[k].offset) want.push_back(static_cast<int>(i));
        }
        EXPECT_EQ(b[k].params, want);
        hi = b[k].offset;
        shard += b[k].shard_numel;
      }
      EXPECT_EQ(hi, 0);
      EXPECT_EQ(shard, (total - rem) / world + (rem > 0 ? 1 : 0));
    }
  }
}

TEST(PlanZero1BucketsTest, RejectsBadInput) {
  std::vector<Zero1Bucket> b;
  auto params = MakeParams(kSizes);
  EXPECT_EQ(PlanZero1Buckets(params, kTotal, 0, 0, &b).code(), Status::Code::kInvalidArgument);
  EXPECT_EQ(PlanZero1Buckets(params, kTotal - 1, 2, 0, &b).code(), Status::Code::kInvalidArgument);
  params[3].offset -= 1;
  EXPECT_EQ(PlanZero1Buckets(params, kTotal, 2, 0, &b).code(), Status::Code::kInvalidArgument);
}

// A world of one process: collectives are copies, and nothing to do in place (in and out the same memory).
class LoopbackCommunicator final : public comm::Communicator {
 public:
  Status AllReduce(Tensor*, comm::ReduceOp, cudaStream_t) override { return Status::OK(); }
  Status ReduceScatter(const Tensor& in, Tensor* out, comm::ReduceOp, cudaStream_t s) override {
    if (out->data() != in.data()) return out->CopyFrom(in, s);
    ++in_place_ops;
    return Status::OK();
  }
  Status AllGather(const Tensor& in, Tensor* out, cudaStream_t s) override {
    if (out->data() != in.data()) return out->CopyFrom(in, s);
    ++in_place_ops;
    return Status::OK();
  }
  Status Broadcast(Tensor*, int, cudaStream_t) override { return Status::OK(); }
  Status Barrier() override { return Status::OK(); }
  Status Abort() override { return Status::OK(); }
  int rank() const override { return 0; }
  int world_size() const override { return 1; }
  comm::Backend backend() const override { return comm::Backend::kMpi; }
  int in_place_ops = 0;  // reduce-scatters and all-gathers whose output aliased the input
};

models::MlpOptions SmallMlp() {
  models::MlpOptions o;
  o.input_dim = 6;
  o.hidden = {5};
  o.num_classes = 3;
  return o;
}

// One backward on fixed data; the zero optimizer is announced every gradient.
Status Backward(DeviceContext& ctx, models::Model& m, int64_t step, const models::GradReadyFn& on_ready) {
  Tensor x, y;
  DT_RETURN_IF_ERROR(testing::MakeTensor(ctx, DType::kF32, {4, 6}, testing::RandomVector(24, step + 1), &x));
  DT_RETURN_IF_ERROR(testing::MakeTensor(ctx, DType::kI32, {4}, {0, 1, 2, static_cast<double>(step % 3)}, &y));
  DT_RETURN_IF_ERROR(m.grads().SetZero(ctx.stream()));
  DT_RETURN_IF_ERROR(m.Forward(x, y));
  return m.Backward(1.0f, on_ready);
}

// With one rank Zero1Optimizer is Optimizer: the same kernels on the same values. With one bucket
// (1 MiB) the norm is one partial sum too, so the params agree bitwise; with a bucket per parameter
// (0 MiB) the norm is accumulated bucket by bucket (an f32 rounding per bucket, ~1e-7 relative in the
// clip coefficient): max |dp| <= 1e-6 * max(1, max |p|), as in zero1_mpi_test.cc.
TEST(Zero1SingleProcessTest, EqualsOptimizer) {
  std::unique_ptr<DeviceContext> ctx;
  DT_ASSERT_OK(DeviceContext::CreateCpu(&ctx));
  for (const double bucket_mb : {1.0, 0.0}) {
    for (const char* name : {"adamw", "sgd", "lion"}) {
      LoopbackCommunicator comm;
      const double tol = bucket_mb > 0 ? 0.0 : 1e-6;
      OptimizerOptions oo;
      oo.name = name;
      oo.lr = 0.05;
      oo.weight_decay = 0.01;
      oo.grad_clip = 0.1;
      std::unique_ptr<models::Mlp> a, b;
      DT_ASSERT_OK(models::Mlp::Create(*ctx, SmallMlp(), &a));
      DT_ASSERT_OK(models::Mlp::Create(*ctx, SmallMlp(), &b));
      DT_ASSERT_OK(a->InitParams(3));
      DT_ASSERT_OK(b->InitParams(3));
      std::unique_ptr<Optimizer> opt;
      std::unique_ptr<Zero1Optimizer> zero;
      DT_ASSERT_OK(Optimizer::Create(*ctx, oo, a->params().numel(), &opt));
      DT_ASSERT_OK(Zero1Optimizer::Create(*ctx, oo, *b, &comm, 0, 1, bucket_mb, &zero));
      EXPECT_EQ(zero->shard_numel(), b->params().numel());
      EXPECT_EQ(zero->shard_buffer_bytes(), 3 * sizeof(float));  // no tiny bucket at world 1: the scalars
      for (int64_t s = 0; s < 5; ++s) {
        DT_ASSERT_OK(Backward(*ctx, *a, s, nullptr));
        DT_ASSERT_OK(Backward(*ctx, *b, s, [&](int i) { return zero->OnGradReady(i); }));
        DT_ASSERT_OK(opt->Step(*ctx, a->params(), a->grads(), 0.05));
        DT_ASSERT_OK(zero->Finalize());
        DT_ASSERT_OK(zero->Step(*ctx, 0.05));
      }
      std::vector<double> pa, pb;
      DT_ASSERT_OK(testing::Fetch(*ctx, a->params(), &pa));
      DT_ASSERT_OK(testing::Fetch(*ctx, b->params(), &pb));
      EXPECT_LE(testing::MaxAbsDiff(pa, pb), tol * testing::Scale(pa)) << name << " bucket_mb " << bucket_mb;
      // Every collective ran in place on the model's buffers: per step one reduce-scatter and one
      // all-gather per bucket.
      EXPECT_EQ(comm.in_place_ops, 5 * 2 * static_cast<int>(zero->buckets().size())) << name;
      const auto ref = opt->state();
      std::vector<Tensor> full(ref.size());
      std::vector<Tensor*> dst;
      for (Tensor& t : full) {
        DT_ASSERT_OK(Tensor::Empty({b->params().numel()}, DType::kF32, ctx->allocator(), &t));
        dst.push_back(&t);
      }
      DT_ASSERT_OK(zero->GatherStateInto(dst));
      for (size_t i = 0; i < full.size(); ++i) {
        std::vector<double> sa, sb;
        DT_ASSERT_OK(testing::Fetch(*ctx, *ref[i].second, &sa));
        DT_ASSERT_OK(testing::Fetch(*ctx, full[i], &sb));
        EXPECT_LE(testing::MaxAbsDiff(sa, sb), tol * testing::Scale(sa)) << name << " " << ref[i].first;
      }
    }
  }
}

TEST(Zero1SingleProcessTest, RejectsBadArguments) {
  std::unique_ptr<DeviceContext> ctx;
  DT_ASSERT_OK(DeviceContext::CreateCpu(&ctx));
  LoopbackCommunicator comm;
  std::unique_ptr<models::Mlp> m;
  DT_ASSERT_OK(models::Mlp::Create(*ctx, SmallMlp(), &m));
  std::unique_ptr<Zero1Optimizer> zero;
  OptimizerOptions oo;
  EXPECT_EQ(Zero1Optimizer::Create(*ctx, oo, *m, nullptr, 0, 1, 1.0, &zero).code(), Status::Code::kInvalidArgument);
  EXPECT_EQ(Zero1Optimizer::Create(*ctx, oo, *m, &comm, 0, 2, 1.0, &zero).code(), Status::Code::kInvalidArgument);
  EXPECT_EQ(Zero1Optimizer::Create(*ctx, oo, *m, &comm, 0, 1, -1.0, &zero).code(), Status::Code::kInvalidArgument);
  oo.name = "lamb";
  EXPECT_EQ(Zero1Optimizer::Create(*ctx, oo, *m, &comm, 0, 1, 1.0, &zero).code(), Status::Code::kInvalidArgument);
  oo.name = "adamw";
  DT_ASSERT_OK(Zero1Optimizer::Create(*ctx, oo, *m, &comm, 0, 1, 1.0, &zero));
  Tensor short_state;
  DT_ASSERT_OK(Tensor::Empty({3}, DType::kF32, ctx->allocator(), &short_state));
  EXPECT_EQ(zero->LoadState({{"exp_avg", short_state}, {"exp_avg_sq", short_state}}).code(),
            Status::Code::kInvalidArgument);
}

}  // namespace
}  // namespace dtrain::runtime
