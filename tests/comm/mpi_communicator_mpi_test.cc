// MpiCommunicator between real processes: `mpiexec -n 2 comm_mpi_communicator_mpi_test`.
// Results are checked against closed forms in the rank r and world size n.
#include <gtest/gtest.h>
#include <mpi.h>

#include <chrono>
#include <cstdint>
#include <thread>
#include <vector>

#include "comm/communicator.h"
#include "comm/mpi_communicator.h"
#include "core/bf16.h"
#include "tests/comm/mpi_test_env.h"

DT_REGISTER_MPI_TEST_ENVIRONMENT();

namespace dtrain::comm {
namespace {

class MpiCommunicatorTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::unique_ptr<Communicator> c;
    Status st = CreateCommunicator(Backend::kMpi, CommOptions{}, &c);
    ASSERT_TRUE(st.ok()) << st.ToString();
    comm_ = std::move(c);
    r_ = comm_->rank();
    n_ = comm_->world_size();
  }

  Tensor Make(DType dtype, int64_t numel) {
    Tensor t;
    Status st = Tensor::Empty({numel}, dtype, &alloc_, &t);
    EXPECT_TRUE(st.ok()) << st.ToString();
    return t;
  }

  CpuAllocator alloc_;
  std::unique_ptr<Communicator> comm_;
  int r_ = 0;
  int n_ = 1;
};

TEST_F(MpiCommunicatorTest, MatchesMpiWorld) {
  int rank = -1;
  int size = -1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  EXPECT_EQ(comm_->rank(), rank);
  EXPECT_EQ(comm_->world_size(), size);
  EXPECT_EQ(comm_->backend(), Backend::kMpi);
  EXPECT_EQ(comm_->device_type(), DeviceType::kCPU);
}

TEST_F(MpiCommunicatorTest, AllReduceSumOfRankGivesTriangularNumber) {
  const double expect = n_ * (n_ - 1) / 2.0;
  Tensor f = Make(DType::kF32, 1000);
  Tensor d = Make(DType::kF64, 7);
  Tensor i = Make(DType::kI32, 5);
  for (int64_t k = 0; k < f.numel(); ++k) f.data<float>()[k] = static_cast<float>(r_);
  for (int64_t k = 0; k < d.numel(); ++k) d.data<double>()[k] = r_;
  for (int64_t k = 0; k < i.numel(); ++k) i.data<int32_t>()[k] = r_;
  ASSERT_TRUE(comm_->AllReduce(&f, ReduceOp::kSum, nullptr).ok());
  ASSERT_TRUE(comm_->AllReduce(&d, ReduceOp::kSum, nullptr).ok());
  ASSERT_TRUE(comm_->AllReduce(&i, ReduceOp::kSum, nullptr).ok());
  for (int64_t k = 0; k < f.numel(); ++k) EXPECT_EQ(f.data<float>()[k], static_cast<float>(expect)) << k;
  for (int64_t k = 0; k < d.numel(); ++k) EXPECT_EQ(d.data<double>()[k], expect) << k;
  for (int64_t k = 0; k < i.numel(); ++k) EXPECT_EQ(i.data<int32_t>()[k], static_cast<int32_t>(expect)) << k;
}

TEST_F(MpiCommunicatorTest, AllReduceAvgOfRankGivesMidpoint) {
  Tensor f = Make(DType::kF32, 33);
  Tensor d = Make(DType::kF64, 33);
  for (int64_t k = 0; k < 33; ++k) {
    f.data<float>()[k] = static_cast<float>(r_ + k);
    d.data<double>()[k] = r_ + k;
  }
  ASSERT_TRUE(comm_->AllReduce(&f, ReduceOp::kAvg, nullptr).ok());
  ASSERT_TRUE(comm_->AllReduce(&d, ReduceOp::kAvg, nullptr).ok());
  for (int64_t k = 0; k < 33; ++k) {
    const double expect = (n_ - 1) / 2.0 + k;
    EXPECT_NEAR(f.data<float>()[k], expect, 1e-6 * (1 + expect)) << k;
    EXPECT_NEAR(d.data<double>()[k], expect, 1e-12 * (1 + expect)) << k;
  }
}

TEST_F(MpiCommunicatorTest, AllReduceMax) {
  // Element k on rank r is r * (k % 3) - k: the maximum is (n-1) * (k % 3) - k.
  Tensor f = Make(DType::kF32, 100);
  Tensor i = Make(DType::kI32, 100);
  for (int k = 0; k < 100; ++k) {
    f.data<float>()[k] = static_cast<float>(r_ * (k % 3) - k);
    i.data<int32_t>()[k] = r_ * (k % 3) - k;
  }
  ASSERT_TRUE(comm_->AllReduce(&f, ReduceOp::kMax, nullptr).ok());
  ASSERT_TRUE(comm_->AllReduce(&i, ReduceOp::kMax, nullptr).ok());
  for (int k = 0; k < 100; ++k) {
    EXPECT_EQ(f.data<float>()[k], static_cast<float>((n_ - 1) * (k % 3) - k)) << k;
    EXPECT_EQ(i.data<int32_t>()[k], (n_ - 1) * (k % 3) - k) << k;
  }
}

TEST_F(MpiCommunicatorTest, Bf16SumMaxAndAvg) {
  // Values r + 0.5 * (k % 4) are exact in bf16, and so are their sums for small n.
  Tensor s = Make(DType::kBF16, 64);
  Tensor m = Make(DType::kBF16, 64);
  Tensor a = Make(DType::kBF16, 64);
  auto* sp = static_cast<uint16_t*>(s.data());
  auto* mp = static_cast<uint16_t*>(m.data());
  auto* ap = static_cast<uint16_t*>(a.data());
  for (int k = 0; k < 64; ++k) sp[k] = mp[k] = ap[k] = RoundBf16Rne(r_ + 0.5f * (k % 4));
  ASSERT_TRUE(comm_->AllReduce(&s, ReduceOp::kSum, nullptr).ok());
  ASSERT_TRUE(comm_->AllReduce(&m, ReduceOp::kMax, nullptr).ok());
  ASSERT_TRUE(comm_->AllReduce(&a, ReduceOp::kAvg, nullptr).ok());
  for (int k = 0; k < 64; ++k) {
    EXPECT_EQ(Bf16BitsToF32(sp[k]), n_ * (n_ - 1) / 2.0f + n_ * 0.5f * (k % 4)) << k;
    EXPECT_EQ(Bf16BitsToF32(mp[k]), (n_ - 1) + 0.5f * (k % 4)) << k;
    EXPECT_NEAR(Bf16BitsToF32(ap[k]), (n_ - 1) / 2.0f + 0.5f * (k % 4), 1.0 / 128) << k;
  }
}

TEST_F(MpiCommunicatorTest, BroadcastFromRootOne) {
  if (n_ < 2) GTEST_SKIP() << "needs 2 ranks, have " << n_;
  Tensor t = Make(DType::kF32, 257);
  for (int k = 0; k < 257; ++k) t.data<float>()[k] = static_cast<float>(r_ * 1000 + k);
  ASSERT_TRUE(comm_->Broadcast(&t, 1, nullptr).ok());
  for (int k = 0; k < 257; ++k) EXPECT_EQ(t.data<float>()[k], static_cast<float>(1000 + k)) << k;
}

TEST_F(MpiCommunicatorTest, AllGatherIsRankOrdered) {
  Tensor in = Make(DType::kI32, 3);
  Tensor out = Make(DType::kI32, 3 * n_);
  for (int j = 0; j < 3; ++j) in.data<int32_t>()[j] = r_ * 10 + j;
  ASSERT_TRUE(comm_->AllGather(in, &out, nullptr).ok());
  for (int q = 0; q < n_; ++q) {
    for (int j = 0; j < 3; ++j) EXPECT_EQ(out.data<int32_t>()[q * 3 + j], q * 10 + j) << q << "," << j;
  }
}

TEST_F(MpiCommunicatorTest, ReduceScatterClosedForm) {
  // in[k] = r + k on every rank q; rank r receives sum_q (q + r*m + j) = n(n-1)/2 + n (r m + j).
  const int m = 5;
  Tensor in = Make(DType::kF32, m * n_);
  Tensor out = Make(DType::kF32, m);
  for (int k = 0; k < m * n_; ++k) in.data<float>()[k] = static_cast<float>(r_ + k);
  ASSERT_TRUE(comm_->ReduceScatter(in, &out, ReduceOp::kSum, nullptr).ok());
  for (int j = 0; j < m; ++j) {
    EXPECT_EQ(out.data<float>()[j], static_cast<float>(n_ * (n_ - 1) / 2 + n_ * (r_ * m + j))) << j;
  }
  ASSERT_TRUE(comm_->ReduceScatter(in, &out, ReduceOp::kAvg, nullptr).ok());
  for (int j = 0; j < m; ++j) {
    const double expect = (n_ - 1) / 2.0 + r_ * m + j;
    EXPECT_NEAR(out.data<float>()[j], expect, 1e-6 * (1 + expect)) << j;
  }
}

// In place (NCCL's convention): out is in's slice r. The same closed form as above lands in that slice,
// for sum and avg, and for bf16 (exact small integers).
TEST_F(MpiCommunicatorTest, ReduceScatterInPlaceLandsInOwnSlice) {
  const int m = 5;
  for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kAvg}) {
    Tensor buf = Make(DType::kF32, m * n_);
    for (int k = 0; k < m * n_; ++k) buf.data<float>()[k] = static_cast<float>(r_ + k);
    Tensor mine;
    ASSERT_TRUE(buf.View(r_ * m, {m}, &mine).ok());
    Status st = comm_->ReduceScatter(buf, &mine, op, nullptr);
    ASSERT_TRUE(st.ok()) << st.ToString();
    for (int j = 0; j < m; ++j) {
      const double sum = n_ * (n_ - 1) / 2.0 + n_ * (r_ * m + j);
      const double expect = op == ReduceOp::kSum ? sum : sum / n_;
      EXPECT_NEAR(buf.data<float>()[r_ * m + j], expect, 1e-6 * (1 + expect)) << ReduceOpName(op) << " " << j;
    }
  }
  Tensor b16 = Make(DType::kBF16, m * n_);
  auto* p = static_cast<uint16_t*>(b16.data());
  for (int k = 0; k < m * n_; ++k) p[k] = RoundBf16Rne(static_cast<float>(r_ + k));
  Tensor mine16;
  ASSERT_TRUE(b16.View(r_ * m, {m}, &mine16).ok());
  ASSERT_TRUE(comm_->ReduceScatter(b16, &mine16, ReduceOp::kSum, nullptr).ok());
  for (int j = 0; j < m; ++j) {
    EXPECT_EQ(Bf16BitsToF32(p[r_ * m + j]), static_cast<float>(n_ * (n_ - 1) / 2 + n_ * (r_ * m + j))) << j;
  }
}

// In place: in is out's slice r; every rank ends with all slices in rank order.
TEST_F(MpiCommunicatorTest, AllGatherInPlaceIsRankOrdered) {
  const int m = 3;
  Tensor out = Make(DType::kF32, m * n_);
  for (int k = 0; k < m * n_; ++k) out.data<float>()[k] = -1.0f;  // other slices: overwritten
  for (int j = 0; j < m; ++j) out.data<float>()[r_ * m + j] = static_cast<float>(r_ * 10 + j);
  Tensor mine;
  ASSERT_TRUE(out.View(r_ * m, {m}, &mine).ok());
  Status st = comm_->AllGather(mine, &out, nullptr);
  ASSERT_TRUE(st.ok()) << st.ToString();
  for (int q = 0; q < n_; ++q) {
    for (int j = 0; j < m; ++j) EXPECT_EQ(out.data<float>()[q * m + j], q * 10.0f + j) << q << "," << j;
  }
}

// Overlap other than slice `rank` is refused before MPI is called (so ranks stay in step).
TEST_F(MpiCommunicatorTest, RejectsOverlapOtherThanOwnSlice) {
  const int m = 4;
  Tensor buf = Make(DType::kF32, m * n_ + 1);
  Tensor whole, shifted;
  ASSERT_TRUE(buf.View(0, {m * n_}, &whole).ok());
  ASSERT_TRUE(buf.View(r_ * m + 1, {m}, &shifted).ok());  // straddles slice r by one element
  EXPECT_EQ(comm_->ReduceScatter(whole, &shifted, ReduceOp::kSum, nullptr).code(), Status::Code::kInvalidArgument);
  EXPECT_EQ(comm_->AllGather(shifted, &whole, nullptr).code(), Status::Code::kInvalidArgument);
}

TEST_F(MpiCommunicatorTest, BarrierWaitsForTheSlowestRank) {
  if (n_ < 2) GTEST_SKIP() << "needs 2 ranks, have " << n_;
  ASSERT_TRUE(comm_->Barrier().ok());  // line up first
  constexpr double kDelay = 0.3;
  const double t0 = MPI_Wtime();
  if (r_ == n_ - 1) std::this_thread::sleep_for(std::chrono::duration<double>(kDelay));
  ASSERT_TRUE(comm_->Barrier().ok());
  const double waited = MPI_Wtime() - t0;
  EXPECT_GE(waited, kDelay * 0.9) << "rank " << r_ << " left the barrier before the last rank arrived";
}

TEST_F(MpiCommunicatorTest, LargeAllReduce10MFloats) {
  // 40 MB per rank: elements r + (k % 7) sum to n(n-1)/2 + n (k % 7), exact in f32.
  constexpr int64_t kN = 10'000'000;
  Tensor t = Make(DType::kF32, kN);
  float* p = t.data<float>();
  for (int64_t k = 0; k < kN; ++k) p[k] = static_cast<float>(r_ + k % 7);
  ASSERT_TRUE(comm_->AllReduce(&t, ReduceOp::kSum, nullptr).ok());
  int64_t bad = 0;
  for (int64_t k = 0; k < kN; ++k) bad += p[k] != static_cast<float>(n_ * (n_ - 1) / 2 + n_ * (k % 7));
  EXPECT_EQ(bad, 0);
}

TEST_F(MpiCommunicatorTest, RejectsBadArgumentsLocally) {
  // None of these reaches MPI, so ranks stay in step.
  float host[4] = {0, 0, 0, 0};
  Tensor fake_gpu = Tensor::Wrap(host, {4}, DType::kF32, DeviceType::kCUDA);
  EXPECT_EQ(comm_->AllReduce(&fake_gpu, ReduceOp::kSum, nullptr).code(), Status::Code::kInvalidArgument);
  Tensor i = Make(DType::kI32, 4);
  EXPECT_EQ(comm_->AllReduce(&i, ReduceOp::kAvg, nullptr).code(), Status::Code::kInvalidArgument);
  Tensor u8 = Make(DType::kU8, 4);
  EXPECT_EQ(comm_->AllReduce(&u8, ReduceOp::kSum, nullptr).code(), Status::Code::kInvalidArgument);
  Tensor f = Make(DType::kF32, 4);
  EXPECT_EQ(comm_->Broadcast(&f, n_, nullptr).code(), Status::Code::kInvalidArgument);
  EXPECT_EQ(comm_->Broadcast(&f, -1, nullptr).code(), Status::Code::kInvalidArgument);
  Tensor wrong = Make(DType::kF32, 4 * n_ + 1);
  EXPECT_EQ(comm_->AllGather(f, &wrong, nullptr).code(), Status::Code::kInvalidArgument);
  EXPECT_EQ(comm_->ReduceScatter(wrong, &f, ReduceOp::kSum, nullptr).code(), Status::Code::kInvalidArgument);
}

TEST_F(MpiCommunicatorTest, AbortRefusesLaterCalls) {
  Tensor f = Make(DType::kF32, 4);
  ASSERT_TRUE(comm_->Abort().ok());
  ASSERT_TRUE(comm_->Abort().ok());  // idempotent
  EXPECT_EQ(comm_->AllReduce(&f, ReduceOp::kSum, nullptr).code(), Status::Code::kAborted);
  EXPECT_EQ(comm_->Barrier().code(), Status::Code::kAborted);
}

TEST(CommBackendTest, ParseBackend) {
  Backend b = Backend::kMpi;
  ASSERT_TRUE(ParseBackend("nccl", &b).ok());
  EXPECT_EQ(b, Backend::kNccl);
  ASSERT_TRUE(ParseBackend("mpi", &b).ok());
  EXPECT_EQ(b, Backend::kMpi);
  Status st = ParseBackend("gloo", &b);
  EXPECT_EQ(st.code(), Status::Code::kInvalidArgument);
  EXPECT_NE(st.message().find("gloo"), std::string::npos);
  EXPECT_STREQ(ReduceOpName(ReduceOp::kAvg), "avg");
}

}  // namespace
}  // namespace dtrain::comm
