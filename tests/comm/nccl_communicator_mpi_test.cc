// NcclCommunicator between real processes, one GPU per rank: `mpiexec -n 2 comm_nccl_communicator_mpi_test`.
// Skipped without CUDA devices or with fewer GPUs than ranks on the node (NCCL refuses two ranks on
// one GPU). The same closed forms as mpi_communicator_mpi_test.cc; the CPU-vs-CUDA comparison uses
// MpiCommunicator on the same inputs, with the tolerance stated at each check.
#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "comm/communicator.h"
#include "comm/nccl_communicator.h"
#include "core/bf16.h"
#include "core/device_context.h"
#include "tests/comm/mpi_test_env.h"

DT_REGISTER_MPI_TEST_ENVIRONMENT();

namespace dtrain::comm {
namespace {

using dtrain::testing::MpiTestEnvironment;

class NcclCommunicatorTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto& s = MpiTestEnvironment::session();
    const int gpus = CudaDeviceCount();
    // Same decision on every rank of a node: all ranks see the same GPUs.
    if (gpus == 0) GTEST_SKIP() << "no CUDA device: NCCL tests need one GPU per rank";
    if (gpus < s.local_world_size()) {
      GTEST_SKIP() << "no CUDA device for every rank: " << gpus << " GPU(s) for " << s.local_world_size()
                   << " local ranks";
    }
    Status st = DeviceContext::CreateCuda(s.local_rank(), &ctx_);
    ASSERT_TRUE(st.ok()) << st.ToString();
    CommOptions opts;
    opts.device = s.local_rank();
    st = CreateCommunicator(Backend::kNccl, opts, &comm_);
    ASSERT_TRUE(st.ok()) << st.ToString();
    r_ = comm_->rank();
    n_ = comm_->world_size();
  }

  // Device tensor holding `values` (converted to `dtype`).
  Tensor Upload(const std::vector<float>& values, DType dtype) {
    Tensor host, dev;
    EXPECT_TRUE(Tensor::Empty({static_cast<int64_t>(values.size())}, dtype, ctx_->host_allocator(), &host).ok());
    for (size_t k = 0; k < values.size(); ++k) {
      if (dtype == DType::kBF16) {
        static_cast<uint16_t*>(host.data())[k] = RoundBf16Rne(values[k]);
      } else if (dtype == DType::kI32) {
        host.data<int32_t>()[k] = static_cast<int32_t>(values[k]);
      } else {
        host.data<float>()[k] = values[k];
      }
    }
    EXPECT_TRUE(Tensor::Empty(host.shape(), dtype, ctx_->allocator(), &dev).ok());
    EXPECT_TRUE(dev.CopyFrom(host, ctx_->stream()).ok());
    return dev;
  }

  // Waits for the compute stream, then returns the tensor's values as floats.
  std::vector<float> Download(const Tensor& dev) {
    Tensor host;
    EXPECT_TRUE(Tensor::Empty(dev.shape(), dev.dtype(), ctx_->host_allocator(), &host).ok());
    EXPECT_TRUE(host.CopyFrom(dev, ctx_->stream()).ok());
    EXPECT_TRUE(ctx_->Synchronize().ok());
    std::vector<float> out(host.numel());
    for (int64_t k = 0; k < host.numel(); ++k) {
      if (dev.dtype() == DType::kBF16) {
        out[k] = Bf16BitsToF32(static_cast<uint16_t*>(host.data())[k]);
      } else if (dev.dtype() == DType::kI32) {
        out[k] = static_cast<float>(host.data<int32_t>()[k]);
      } else {
        out[k] = host.data<float>()[k];
      }
    }
    return out;
  }

  std::unique_ptr<DeviceContext> ctx_;
  std::unique_ptr<Communicator> comm_;
  int r_ = 0;
  int n_ = 1;
};

TEST_F(NcclCommunicatorTest, AllReduceSumAvgMaxOfRank) {
  std::vector<float> v(1000);
  for (int k = 0; k < 1000; ++k) v[k] = static_cast<float>(r_);
  Tensor sum = Upload(v, DType::kF32);
  Tensor isum = Upload(v, DType::kI32);
  Tensor avg = Upload(v, DType::kF32);
  for (int k = 0; k < 1000; ++k) v[k] = static_cast<float>(r_ * (k % 3) - k);
  Tensor mx = Upload(v, DType::kF32);
  ASSERT_TRUE(comm_->AllReduce(&sum, ReduceOp::kSum, ctx_->stream()).ok());
  ASSERT_TRUE(comm_->AllReduce(&isum, ReduceOp::kSum, ctx_->stream()).ok());
  ASSERT_TRUE(comm_->AllReduce(&avg, ReduceOp::kAvg, ctx_->stream()).ok());
  ASSERT_TRUE(comm_->AllReduce(&mx, ReduceOp::kMax, ctx_->stream()).ok());
  const auto s = Download(sum), is = Download(isum), a = Download(avg), m = Download(mx);
  for (int k = 0; k < 1000; ++k) {
    EXPECT_EQ(s[k], n_ * (n_ - 1) / 2.0f) << k;
    EXPECT_EQ(is[k], n_ * (n_ - 1) / 2.0f) << k;
    EXPECT_NEAR(a[k], (n_ - 1) / 2.0, 1e-6) << k;  // ncclAvg: one division, f32 rounding
    EXPECT_EQ(m[k], static_cast<float>((n_ - 1) * (k % 3) - k)) << k;
  }
}

TEST_F(NcclCommunicatorTest, Bf16AllReduceMatchesMpiBf16) {
  // Values r + 0.5 (k % 4) and their sums are exact in bf16: NCCL and MPI must agree exactly.
  std::vector<float> v(512);
  for (int k = 0; k < 512; ++k) v[k] = r_ + 0.5f * (k % 4);
  Tensor t = Upload(v, DType::kBF16);
  ASSERT_TRUE(comm_->AllReduce(&t, ReduceOp::kSum, ctx_->stream()).ok());
  const auto got = Download(t);
  std::unique_ptr<Communicator> mpi;
  ASSERT_TRUE(CreateCommunicator(Backend::kMpi, CommOptions{}, &mpi).ok());
  CpuAllocator alloc;
  Tensor ref;
  ASSERT_TRUE(Tensor::Empty({512}, DType::kBF16, &alloc, &ref).ok());
  for (int k = 0; k < 512; ++k) static_cast<uint16_t*>(ref.data())[k] = RoundBf16Rne(v[k]);
  ASSERT_TRUE(mpi->AllReduce(&ref, ReduceOp::kSum, nullptr).ok());
  for (int k = 0; k < 512; ++k) {
    EXPECT_EQ(got[k], Bf16BitsToF32(static_cast<uint16_t*>(ref.data())[k])) << k;
    EXPECT_EQ(got[k], n_ * (n_ - 1) / 2.0f + n_ * 0.5f * (k % 4)) << k;
  }
}

TEST_F(NcclCommunicatorTest, BroadcastFromRootOne) {
  if (n_ < 2) GTEST_SKIP() << "needs 2 ranks, have " << n_;
  std::vector<float> v(257);
  for (int k = 0; k < 257; ++k) v[k] = static_cast<float>(r_ * 1000 + k);
  Tensor t = Upload(v, DType::kF32);
  ASSERT_TRUE(comm_->Broadcast(&t, 1, ctx_->stream()).ok());
  const auto got = Download(t);
  for (int k = 0; k < 257; ++k) EXPECT_EQ(got[k], static_cast<float>(1000 + k)) << k;
}

TEST_F(NcclCommunicatorTest, AllGatherIsRankOrdered) {
  std::vector<float> v = {r_ * 10.0f, r_ * 10.0f + 1, r_ * 10.0f + 2};
  Tensor in = Upload(v, DType::kF32);
  Tensor out;
  ASSERT_TRUE(Tensor::Empty({3 * n_}, DType::kF32, ctx_->allocator(), &out).ok());
  ASSERT_TRUE(comm_->AllGather(in, &out, ctx_->stream()).ok());
  const auto got = Download(out);
  for (int q = 0; q < n_; ++q) {
    for (int j = 0; j < 3; ++j) EXPECT_EQ(got[q * 3 + j], q * 10.0f + j) << q << "," << j;
  }
}

TEST_F(NcclCommunicatorTest, ReduceScatterClosedForm) {
  const int m = 5;
  std::vector<float> v(m * n_);
  for (int k = 0; k < m * n_; ++k) v[k] = static_cast<float>(r_ + k);
  Tensor in = Upload(v, DType::kF32);
  Tensor out;
  ASSERT_TRUE(Tensor::Empty({m}, DType::kF32, ctx_->allocator(), &out).ok());
  ASSERT_TRUE(comm_->ReduceScatter(in, &out, ReduceOp::kSum, ctx_->stream()).ok());
  const auto got = Download(out);
  for (int j = 0; j < m; ++j) EXPECT_EQ(got[j], static_cast<float>(n_ * (n_ - 1) / 2 + n_ * (r_ * m + j))) << j;
}

// In place (ncclReduceScatter with recvbuff == sendbuff + rank * recvcount, ncclAllGather with
// sendbuff == recvbuff + rank * sendcount), grouped as Zero1Optimizer issues them. Integer-valued
// f32: the closed forms are exact.
TEST_F(NcclCommunicatorTest, InPlaceReduceScatterAndAllGather) {
  const int m = 5;
  std::vector<float> v(m * n_);
  for (int k = 0; k < m * n_; ++k) v[k] = static_cast<float>(r_ + k);
  Tensor rs = Upload(v, DType::kF32);
  Tensor rs_mine;
  ASSERT_TRUE(rs.View(r_ * m, {m}, &rs_mine).ok());
  for (int k = 0; k < m * n_; ++k) v[k] = k / m == r_ ? static_cast<float>(r_ * 10 + k % m) : -1.0f;
  Tensor ag = Upload(v, DType::kF32);
  Tensor ag_mine;
  ASSERT_TRUE(ag.View(r_ * m, {m}, &ag_mine).ok());
  ASSERT_TRUE(comm_->GroupStart().ok());
  ASSERT_TRUE(comm_->ReduceScatter(rs, &rs_mine, ReduceOp::kSum, ctx_->stream()).ok());
  ASSERT_TRUE(comm_->AllGather(ag_mine, &ag, ctx_->stream()).ok());
  ASSERT_TRUE(comm_->GroupEnd().ok());
  const auto got_rs = Download(rs), got_ag = Download(ag);
  for (int j = 0; j < m; ++j) {
    EXPECT_EQ(got_rs[r_ * m + j], static_cast<float>(n_ * (n_ - 1) / 2 + n_ * (r_ * m + j))) << j;
  }
  for (int q = 0; q < n_; ++q) {
    for (int j = 0; j < m; ++j) EXPECT_EQ(got_ag[q * m + j], q * 10.0f + j) << q << "," << j;
  }
}

TEST_F(NcclCommunicatorTest, GroupedAllReducesAndLargeTensor) {
  // Two collectives fused in one group, one of them 10M floats.
  constexpr int64_t kN = 10'000'000;
  std::vector<float> big(kN);
  for (int64_t k = 0; k < kN; ++k) big[k] = static_cast<float>(r_ + k % 7);
  Tensor a = Upload(big, DType::kF32);
  Tensor b = Upload(std::vector<float>(64, static_cast<float>(r_ + 1)), DType::kF32);
  ASSERT_TRUE(comm_->GroupStart().ok());
  ASSERT_TRUE(comm_->AllReduce(&a, ReduceOp::kSum, ctx_->stream()).ok());
  ASSERT_TRUE(comm_->AllReduce(&b, ReduceOp::kSum, ctx_->stream()).ok());
  ASSERT_TRUE(comm_->GroupEnd().ok());
  const auto ga = Download(a), gb = Download(b);
  int64_t bad = 0;
  for (int64_t k = 0; k < kN; ++k) bad += ga[k] != static_cast<float>(n_ * (n_ - 1) / 2 + n_ * (k % 7));
  EXPECT_EQ(bad, 0);
  for (float x : gb) EXPECT_EQ(x, n_ * (n_ + 1) / 2.0f);
}

TEST_F(NcclCommunicatorTest, BarrierAsyncErrorAndAbort) {
  ASSERT_TRUE(comm_->Barrier().ok());
  EXPECT_TRUE(comm_->CheckAsyncError().ok());
  Tensor t = Upload(std::vector<float>(4, 1.0f), DType::kF32);
  ASSERT_TRUE(ctx_->Synchronize().ok());
  // Every rank aborts at the same point, so no peer is left waiting.
  ASSERT_TRUE(comm_->Abort().ok());
  ASSERT_TRUE(comm_->Abort().ok());  // idempotent
  EXPECT_EQ(comm_->AllReduce(&t, ReduceOp::kSum, ctx_->stream()).code(), Status::Code::kAborted);
  EXPECT_EQ(comm_->Barrier().code(), Status::Code::kAborted);
  EXPECT_EQ(comm_->CheckAsyncError().code(), Status::Code::kAborted);
}

TEST_F(NcclCommunicatorTest, RejectsHostTensors) {
  float host[4] = {0, 0, 0, 0};
  Tensor cpu = Tensor::Wrap(host, {4}, DType::kF32, DeviceType::kCPU);
  EXPECT_EQ(comm_->AllReduce(&cpu, ReduceOp::kSum, ctx_->stream()).code(), Status::Code::kInvalidArgument);
  Tensor i = Upload(std::vector<float>(4, 1.0f), DType::kI32);
  EXPECT_EQ(comm_->AllReduce(&i, ReduceOp::kAvg, ctx_->stream()).code(), Status::Code::kInvalidArgument);
}

}  // namespace
}  // namespace dtrain::comm
