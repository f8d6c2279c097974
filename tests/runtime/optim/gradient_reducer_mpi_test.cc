// GradientReducer between real processes: `mpiexec -n 2 runtime_gradient_reducer_mpi_test`.
// Rank r's gradient element i is (r + 1) * F(i); after Finalize every rank holds the average
// F(i) * (n + 1) / 2 (or the sum F(i) * n (n + 1) / 2). CPU cases use MPI; the GPU case (NCCL, one
// GPU per rank) is compared with the CPU result and skipped without enough GPUs.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <vector>

#include "comm/communicator.h"
#include "core/bf16.h"
#include "runtime/optim/gradient_reducer.h"
#include "tests/comm/mpi_test_env.h"

DT_REGISTER_MPI_TEST_ENVIRONMENT();

namespace dtrain::runtime {
namespace {

using dtrain::testing::MpiTestEnvironment;

// Forward-order parameters of varied sizes, contiguous in the flat buffer.
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

float F(int64_t i) { return 1.0f + 0.25f * static_cast<float>(i % 13); }
// Not exactly representable in bf16 (for the compression test).
float G(int64_t i, int rank) { return std::sin(0.37f * static_cast<float>(i) + static_cast<float>(rank)) * 3.0f; }

class GradientReducerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(DeviceContext::CreateCpu(&ctx_).ok());
    Status st = comm::CreateCommunicator(comm::Backend::kMpi, comm::CommOptions{}, &comm_);
    ASSERT_TRUE(st.ok()) << st.ToString();
    r_ = comm_->rank();
    n_ = comm_->world_size();
    params_ = MakeParams(kSizes);
    ASSERT_TRUE(Tensor::Empty({kTotal}, DType::kF32, ctx_->allocator(), &grads_).ok());
  }

  std::unique_ptr<GradientReducer> MakeReducer(const GradientReducer::Options& opts) {
    std::unique_ptr<GradientReducer> red;
    Status st = GradientReducer::Create(*ctx_, comm_.get(), params_, &grads_, opts, &red);
    EXPECT_TRUE(st.ok()) << st.ToString();
    return red;
  }

  void FillRankTimesF(float scale = 1.0f) {
    for (int64_t i = 0; i < kTotal; ++i) grads_.data<float>()[i] = scale * static_cast<float>(r_ + 1) * F(i);
  }

  // Number of elements not within a relative 1e-6 of scale * F(i) * factor.
  int64_t CountWrong(float factor, float scale = 1.0f) const {
    int64_t bad = 0;
    for (int64_t i = 0; i < kTotal; ++i) {
      const double want = static_cast<double>(scale) * F(i) * factor;
      bad += std::fabs(grads_.data<float>()[i] - want) > 1e-6 * std::fabs(want);
    }
    return bad;
  }

  std::unique_ptr<DeviceContext> ctx_;
  std::unique_ptr<comm::Communicator> comm_;
  std::vector<models::ParamInfo> params_;
  Tensor grads_;
  int r_ = 0;
  int n_ = 1;
};

TEST_F(GradientReducerTest, BucketsAreBuiltFromTheEnd) {
  GradientReducer::Options opts;
  opts.bucket_bytes = 4096;  // 1024 floats
  auto red = MakeReducer(opts);
  ASSERT_TRUE(red);
  // From the end: 33 + 250 + 1 + 4096 floats cross 4 KiB at p3; then p2, p1, p0 (4080 bytes) close at p0.
  using R = std::pair<int64_t, int64_t>;
  EXPECT_EQ(red->buckets(), (std::vector<R>{{1020, 4380}, {0, 1020}}));
  EXPECT_EQ(red->bucket_of(6), 0);
  EXPECT_EQ(red->bucket_of(3), 0);
  EXPECT_EQ(red->bucket_of(2), 1);
  EXPECT_EQ(red->bucket_of(0), 1);

  opts.bucket_bytes = 0;  // one bucket per parameter, last parameter first
  auto per_param = MakeReducer(opts);
  ASSERT_TRUE(per_param);
  ASSERT_EQ(per_param->buckets().size(), kSizes.size());
  for (size_t k = 0; k < kSizes.size(); ++k) {
    const auto& p = params_[kSizes.size() - 1 - k];
    EXPECT_EQ(per_param->buckets()[k], R(p.offset, p.numel)) << k;
  }

  opts.bucket_bytes = 25u << 20;  // the default: everything in one bucket
  auto one = MakeReducer(opts);
  ASSERT_TRUE(one);
  EXPECT_EQ(one->buckets(), (std::vector<R>{{0, kTotal}}));
}

TEST_F(GradientReducerTest, AveragesAcrossRanksWithManyBuckets) {
  GradientReducer::Options opts;
  opts.bucket_bytes = 512;  // 128 floats: p1, p3, p5 alone, small ones grouped
  auto red = MakeReducer(opts);
  ASSERT_TRUE(red);
  EXPECT_GE(red->buckets().size(), 4u);
  for (int step = 1; step <= 3; ++step) {  // the reducer resets between steps
    FillRankTimesF(static_cast<float>(step));
    for (int i = static_cast<int>(params_.size()) - 1; i >= 0; --i) ASSERT_TRUE(red->MarkReady(i).ok());
    ASSERT_TRUE(red->Finalize().ok());
    EXPECT_EQ(CountWrong((n_ + 1) / 2.0f, static_cast<float>(step)), 0) << "step " << step;
  }
}

TEST_F(GradientReducerTest, ReducesEachBucketAsSoonAsItIsComplete) {
  GradientReducer::Options opts;
  opts.bucket_bytes = 4096;  // buckets {p3..p6}, {p0..p2}
  auto red = MakeReducer(opts);
  ASSERT_TRUE(red);
  FillRankTimesF();
  for (int i = 6; i >= 3; --i) ASSERT_TRUE(red->MarkReady(i).ok());
  // Bucket 0 is reduced (CPU path: blocking MPI inside MarkReady); bucket 1 is still local.
  const float avg = (n_ + 1) / 2.0f;
  EXPECT_FLOAT_EQ(grads_.data<float>()[kTotal - 1], F(kTotal - 1) * avg);
  EXPECT_FLOAT_EQ(grads_.data<float>()[1020], F(1020) * avg);
  EXPECT_FLOAT_EQ(grads_.data<float>()[1019], F(1019) * (r_ + 1));
  EXPECT_FLOAT_EQ(grads_.data<float>()[0], F(0) * (r_ + 1));
  for (int i = 2; i >= 0; --i) ASSERT_TRUE(red->MarkReady(i).ok());
  ASSERT_TRUE(red->Finalize().ok());
  EXPECT_EQ(CountWrong(avg), 0);
}

TEST_F(GradientReducerTest, AnyAnnouncementOrderAndSum) {
  GradientReducer::Options opts;
  opts.bucket_bytes = 512;
  opts.average = false;
  auto red = MakeReducer(opts);
  ASSERT_TRUE(red);
  FillRankTimesF();
  // Forward order: nothing launches until p6 completes bucket 0; then all buckets go in order.
  for (int i = 0; i < static_cast<int>(params_.size()); ++i) ASSERT_TRUE(red->MarkReady(i).ok());
  ASSERT_TRUE(red->Finalize().ok());
  EXPECT_EQ(CountWrong(n_ * (n_ + 1) / 2.0f), 0);
}

TEST_F(GradientReducerTest, FinalizeReducesUnannouncedParams) {
  GradientReducer::Options opts;
  opts.bucket_bytes = 512;
  auto red = MakeReducer(opts);
  ASSERT_TRUE(red);
  FillRankTimesF();
  ASSERT_TRUE(red->MarkReady(6).ok());
  ASSERT_TRUE(red->Finalize().ok());
  EXPECT_EQ(CountWrong((n_ + 1) / 2.0f), 0);
}

TEST_F(GradientReducerTest, NoSyncLeavesGradsUntouched) {
  GradientReducer::Options opts;
  opts.bucket_bytes = 512;
  auto red = MakeReducer(opts);
  ASSERT_TRUE(red);
  FillRankTimesF();
  red->set_sync(false);
  for (int micro = 0; micro < 2; ++micro) {  // two accumulation micro-steps
    for (int i = static_cast<int>(params_.size()) - 1; i >= 0; --i) ASSERT_TRUE(red->MarkReady(i).ok());
    ASSERT_TRUE(red->Finalize().ok());
    EXPECT_EQ(CountWrong(static_cast<float>(r_ + 1)), 0) << "micro-step " << micro;
  }
  red->set_sync(true);  // the last micro-step exchanges
  for (int i = static_cast<int>(params_.size()) - 1; i >= 0; --i) ASSERT_TRUE(red->MarkReady(i).ok());
  ASSERT_TRUE(red->Finalize().ok());
  EXPECT_EQ(CountWrong((n_ + 1) / 2.0f), 0);
}

TEST_F(GradientReducerTest, SyncFlagIsLatchedForTheStep) {
  GradientReducer::Options opts;
  opts.bucket_bytes = 0;
  auto red = MakeReducer(opts);
  ASSERT_TRUE(red);
  FillRankTimesF();
  red->set_sync(false);
  ASSERT_TRUE(red->MarkReady(6).ok());
  red->set_sync(true);  // mid-step: applies from the next step
  for (int i = 5; i >= 0; --i) ASSERT_TRUE(red->MarkReady(i).ok());
  ASSERT_TRUE(red->Finalize().ok());
  EXPECT_EQ(CountWrong(static_cast<float>(r_ + 1)), 0);
}

TEST_F(GradientReducerTest, RejectsDuplicateAndOutOfRangeAnnouncements) {
  auto red = MakeReducer(GradientReducer::Options{});
  ASSERT_TRUE(red);
  red->set_sync(false);  // keep the checks local: no collective is issued
  ASSERT_TRUE(red->MarkReady(6).ok());
  Status dup = red->MarkReady(6);
  EXPECT_EQ(dup.code(), Status::Code::kFailedPrecondition);
  EXPECT_NE(dup.message().find("p6"), std::string::npos) << dup.message();
  EXPECT_EQ(red->MarkReady(7).code(), Status::Code::kInvalidArgument);
  EXPECT_EQ(red->MarkReady(-1).code(), Status::Code::kInvalidArgument);
  ASSERT_TRUE(red->Finalize().ok());
  EXPECT_TRUE(red->MarkReady(6).ok());  // a new step
  ASSERT_TRUE(red->Finalize().ok());
}

TEST_F(GradientReducerTest, RejectsBadLayouts) {
  std::unique_ptr<GradientReducer> red;
  auto overlapping = params_;
  overlapping[2].offset -= 1;
  EXPECT_EQ(GradientReducer::Create(*ctx_, comm_.get(), overlapping, &grads_, {}, &red).code(),
            Status::Code::kInvalidArgument);
  auto too_long = params_;
  too_long.back().numel += 1;
  EXPECT_EQ(GradientReducer::Create(*ctx_, comm_.get(), too_long, &grads_, {}, &red).code(),
            Status::Code::kInvalidArgument);
  Tensor f64;  // f32 or bf16 only
  ASSERT_TRUE(Tensor::Empty({kTotal}, DType::kF64, ctx_->allocator(), &f64).ok());
  EXPECT_EQ(GradientReducer::Create(*ctx_, comm_.get(), params_, &f64, {}, &red).code(),
            Status::Code::kInvalidArgument);
  Tensor fake_gpu = Tensor::Wrap(grads_.data(), {kTotal}, DType::kF32, DeviceType::kCUDA);
  EXPECT_EQ(GradientReducer::Create(*ctx_, comm_.get(), params_, &fake_gpu, {}, &red).code(),
            Status::Code::kInvalidArgument);
}

// bf16 compression: each rank's bucket is rounded to bf16 (rel. error <= 2^-9), summed in bf16
// (each partial sum rounded again) and averaged. Tolerance: 2^-7 * max|g| + 1e-6, several roundings.
TEST_F(GradientReducerTest, Bf16CompressionWithinTolerance) {
  GradientReducer::Options opts;
  opts.bucket_bytes = 2048;
  opts.bf16_compress = true;
  auto red = MakeReducer(opts);
  ASSERT_TRUE(red);
  for (int64_t i = 0; i < kTotal; ++i) grads_.data<float>()[i] = G(i, r_);
  for (int i = static_cast<int>(params_.size()) - 1; i >= 0; --i) ASSERT_TRUE(red->MarkReady(i).ok());
  ASSERT_TRUE(red->Finalize().ok());
  int64_t bad = 0;
  int64_t not_bf16 = 0;
  for (int64_t i = 0; i < kTotal; ++i) {
    double want = 0;
    for (int q = 0; q < n_; ++q) want += G(i, q);
    want /= n_;
    const float got = grads_.data<float>()[i];
    bad += std::fabs(got - want) > 3.0 / 128 + 1e-6;
    not_bf16 += Bf16BitsToF32(RoundBf16Rne(got)) != got;  // the result went through bf16
  }
  EXPECT_EQ(bad, 0);
  EXPECT_EQ(not_bf16, 0);
}

// bf16 grads (train.gradients bf16) are all-reduced in place: the compressed wire's sums on the same values, bit for
// bit (the wire is the rounded f32 grads; here the grads are those bf16 values themselves), over the same buckets.
// Buckets are cut by the grads' own bytes: 1100 bytes close at p5 for f32 grads (p6 + p5 = 1132 bytes) and at p3 for
// bf16 ones (568 bytes before it), as 2200 bytes do for f32 grads.
TEST_F(GradientReducerTest, Bf16GradsAreReducedAsTheCompressedWire) {
  GradientReducer::Options opts;
  opts.bucket_bytes = 1100;
  opts.bf16_compress = true;
  auto f32_cut = MakeReducer(opts);
  ASSERT_TRUE(f32_cut);
  EXPECT_EQ(f32_cut->buckets().front().first, params_[5].offset);
  opts.bucket_bytes = 2200;
  auto compressed = MakeReducer(opts);
  ASSERT_TRUE(compressed);
  EXPECT_EQ(compressed->buckets().front().first, params_[3].offset);
  opts.bucket_bytes = 1100;
  for (int64_t i = 0; i < kTotal; ++i) grads_.data<float>()[i] = G(i, r_);
  for (int i = static_cast<int>(params_.size()) - 1; i >= 0; --i) ASSERT_TRUE(compressed->MarkReady(i).ok());
  ASSERT_TRUE(compressed->Finalize().ok());

  Tensor g16;
  ASSERT_TRUE(Tensor::Empty({kTotal}, DType::kBF16, ctx_->allocator(), &g16).ok());
  for (int64_t i = 0; i < kTotal; ++i) g16.data<uint16_t>()[i] = RoundBf16Rne(G(i, r_));
  for (const bool compress : {false, true}) {  // bf16_compress has nothing to do with bf16 grads
    opts.bf16_compress = compress;
    std::unique_ptr<GradientReducer> red;
    const Status st = GradientReducer::Create(*ctx_, comm_.get(), params_, &g16, opts, &red);
    ASSERT_TRUE(st.ok()) << st.ToString();
    EXPECT_EQ(red->buckets(), compressed->buckets());
    if (compress) {
      for (int64_t i = 0; i < kTotal; ++i) g16.data<uint16_t>()[i] = RoundBf16Rne(G(i, r_));
    }
    for (int i = static_cast<int>(params_.size()) - 1; i >= 0; --i) ASSERT_TRUE(red->MarkReady(i).ok());
    ASSERT_TRUE(red->Finalize().ok());
    int64_t differ = 0;
    for (int64_t i = 0; i < kTotal; ++i) differ += Bf16BitsToF32(g16.data<uint16_t>()[i]) != grads_.data<float>()[i];
    EXPECT_EQ(differ, 0) << "bf16_compress " << compress;
  }
}

// GPU (NCCL) reducer against the CPU (MPI) reducer on the same inputs. f32: NCCL and MPI sum in
// different orders, so agreement is to a relative 1e-6. bf16: both round inputs the same way (RNE);
// sums may be rounded in a different order (ncclAvg pre-scales by 1/n), so allow one bf16 ulp of
// the result (<= 2^-7 relative) plus one input rounding at the largest magnitude (3 * 2^-9).
class GradientReducerGpuTest : public GradientReducerTest {
 protected:
  void SetUp() override {
    GradientReducerTest::SetUp();
    const auto& s = MpiTestEnvironment::session();
    const int gpus = CudaDeviceCount();
    if (gpus == 0) GTEST_SKIP() << "no CUDA device: the NCCL reducer needs one GPU per rank";
    if (gpus < s.local_world_size()) {
      GTEST_SKIP() << "no CUDA device for every rank: " << gpus << " GPU(s) for " << s.local_world_size() << " ranks";
    }
    ASSERT_TRUE(DeviceContext::CreateCuda(s.local_rank(), &gpu_ctx_).ok());
    comm::CommOptions opts;
    opts.device = s.local_rank();
    Status st = comm::CreateCommunicator(comm::Backend::kNccl, opts, &nccl_);
    ASSERT_TRUE(st.ok()) << st.ToString();
    ASSERT_TRUE(Tensor::Empty({kTotal}, DType::kF32, gpu_ctx_->allocator(), &gpu_grads_).ok());
  }

  // Runs one step on both paths with inputs `init(i)`; returns the GPU result on the host.
  std::vector<float> RunBoth(const GradientReducer::Options& opts, float (*init)(int64_t, int)) {
    for (int64_t i = 0; i < kTotal; ++i) grads_.data<float>()[i] = init(i, r_);
    EXPECT_TRUE(gpu_grads_.CopyFrom(grads_, gpu_ctx_->stream()).ok());
    EXPECT_TRUE(gpu_ctx_->Synchronize().ok());  // the CPU reducer overwrites grads_ next
    std::unique_ptr<GradientReducer> cpu, gpu;
    EXPECT_TRUE(GradientReducer::Create(*ctx_, comm_.get(), params_, &grads_, opts, &cpu).ok());
    Status st = GradientReducer::Create(*gpu_ctx_, nccl_.get(), params_, &gpu_grads_, opts, &gpu);
    EXPECT_TRUE(st.ok()) << st.ToString();
    if (!cpu || !gpu) return {};
    for (int i = static_cast<int>(params_.size()) - 1; i >= 0; --i) {
      EXPECT_TRUE(cpu->MarkReady(i).ok());
      EXPECT_TRUE(gpu->MarkReady(i).ok());
    }
    EXPECT_TRUE(cpu->Finalize().ok());
    EXPECT_TRUE(gpu->Finalize().ok());
    Tensor host;
    EXPECT_TRUE(Tensor::Empty({kTotal}, DType::kF32, gpu_ctx_->host_allocator(), &host).ok());
    EXPECT_TRUE(host.CopyFrom(gpu_grads_, gpu_ctx_->stream()).ok());  // ordered after Finalize's waits
    EXPECT_TRUE(gpu_ctx_->Synchronize().ok());
    return std::vector<float>(host.data<float>(), host.data<float>() + kTotal);
  }

  std::unique_ptr<DeviceContext> gpu_ctx_;
  std::unique_ptr<comm::Communicator> nccl_;
  Tensor gpu_grads_;
};

float RankTimesF(int64_t i, int rank) { return static_cast<float>(rank + 1) * F(i); }

TEST_F(GradientReducerGpuTest, F32MatchesCpu) {
  GradientReducer::Options opts;
  opts.bucket_bytes = 512;
  const auto got = RunBoth(opts, &RankTimesF);
  ASSERT_EQ(got.size(), static_cast<size_t>(kTotal));
  int64_t bad = 0;
  for (int64_t i = 0; i < kTotal; ++i) {
    const float want = grads_.data<float>()[i];
    bad += std::fabs(got[i] - want) > 1e-6f * std::fabs(want);
  }
  EXPECT_EQ(bad, 0);
  EXPECT_EQ(CountWrong((n_ + 1) / 2.0f), 0);
}

TEST_F(GradientReducerGpuTest, Bf16MatchesCpu) {
  GradientReducer::Options opts;
  opts.bucket_bytes = 2048;
  opts.bf16_compress = true;
  const auto got = RunBoth(opts, &G);
  ASSERT_EQ(got.size(), static_cast<size_t>(kTotal));
  int64_t bad = 0;
  for (int64_t i = 0; i < kTotal; ++i) {
    const float want = grads_.data<float>()[i];
    bad += std::fabs(got[i] - want) > std::fabs(want) / 128.0f + 3.0f / 512.0f;
  }
  EXPECT_EQ(bad, 0);
}

}  // namespace
}  // namespace dtrain::runtime
