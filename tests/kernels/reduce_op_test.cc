// Tests of kernels/reduce: SumSquares and Scale on closed forms (CPU), and CPU-vs-CUDA agreement.
#include <gtest/gtest.h>

#include <cmath>
#include <memory>
#include <random>
#include <vector>

#include "core/device_context.h"
#include "core/tensor.h"
#include "kernels/bf16_round.h"
#include "kernels/reduce.h"

namespace dtrain::ops {
namespace {

std::unique_ptr<DeviceContext> CpuContext() {
  std::unique_ptr<DeviceContext> ctx;
  EXPECT_TRUE(DeviceContext::CreateCpu(&ctx).ok());
  return ctx;
}

template <typename T>
Tensor HostTensor(std::vector<T>& v) {
  return Tensor::Wrap(v.data(), {static_cast<int64_t>(v.size())}, DTypeOf<T>::value, DeviceType::kCPU);
}

TEST(SumSquaresCpu, SumOfFirstNSquares) {
  // sum_{i=1..n} i^2 = n(n+1)(2n+1)/6, exact in f64 for n = 1000.
  const int64_t n = 1000;
  std::vector<float> xf(n);
  std::vector<double> xd(n);
  for (int64_t i = 0; i < n; ++i) xf[i] = xd[i] = static_cast<double>(i + 1);
  const double expected = n * (n + 1) * (2 * n + 1) / 6.0;  // 333833500
  EXPECT_EQ(SumSquaresCpu(xd.data(), n), expected);
  EXPECT_EQ(SumSquaresCpu(xf.data(), n), expected);  // f64 accumulation of exact squares
  EXPECT_EQ(SumSquaresCpu(xf.data(), 0), 0.0);
}

TEST(SumSquares, CpuTensorF32AndF64) {
  auto ctx = CpuContext();
  std::vector<float> xf = {3.0f, -4.0f};
  Tensor out;
  ASSERT_TRUE(SumSquares(*ctx, HostTensor(xf), &out).ok());
  ASSERT_EQ(out.numel(), 1);
  EXPECT_EQ(out.dtype(), DType::kF32);
  EXPECT_EQ(out.data<float>()[0], 25.0f);

  // A preallocated out is reused.
  void* before = out.data();
  std::vector<float> ones(7, 1.0f);
  ASSERT_TRUE(SumSquares(*ctx, HostTensor(ones), &out).ok());
  EXPECT_EQ(out.data(), before);
  EXPECT_EQ(out.data<float>()[0], 7.0f);

  std::vector<double> xd = {0.5, 0.25, -2.0};
  Tensor outd;
  ASSERT_TRUE(SumSquares(*ctx, HostTensor(xd), &outd).ok());
  EXPECT_EQ(outd.dtype(), DType::kF64);
  EXPECT_EQ(outd.data<double>()[0], 0.25 + 0.0625 + 4.0);
}

// bf16 x (bf16 gradients): widened exactly, summed in f64, an f32 out.
TEST(SumSquares, Bf16IntoAnF32Out) {
  auto ctx = CpuContext();
  std::vector<uint16_t> x = {RoundBf16Rne(3.0f), RoundBf16Rne(-4.0f), RoundBf16Rne(0.5f)};
  Tensor tx = Tensor::Wrap(x.data(), {3}, DType::kBF16, DeviceType::kCPU), out;
  ASSERT_TRUE(SumSquares(*ctx, tx, &out).ok());
  EXPECT_EQ(out.dtype(), DType::kF32);
  EXPECT_EQ(out.data<float>()[0], 25.25f);
  ASSERT_TRUE(SumSquares(*ctx, tx, &out, /*accumulate=*/true).ok());
  EXPECT_EQ(out.data<float>()[0], 50.5f);
  std::vector<uint16_t> bad(1);
  Tensor bf16_out = Tensor::Wrap(bad.data(), {1}, DType::kBF16, DeviceType::kCPU);
  EXPECT_EQ(SumSquares(*ctx, tx, &bf16_out).code(), Status::Code::kInvalidArgument);
}

TEST(SumSquares, AccumulatesOverDisjointPieces) {
  // 1..100 in three pieces: the accumulated sum is the closed form n(n+1)(2n+1)/6 = 338350 (every
  // partial sum is an integer below 2^24: exact in f32 and f64).
  auto ctx = CpuContext();
  const int64_t n = 100;
  std::vector<float> xf(n);
  std::vector<double> xd(n);
  for (int64_t i = 0; i < n; ++i) xf[i] = xd[i] = static_cast<double>(i + 1);
  Tensor tf = HostTensor(xf), td = HostTensor(xd);
  Tensor outf, outd;
  const int64_t cuts[] = {0, 1, 61, n};
  for (int k = 0; k < 3; ++k) {
    Tensor pf, pd;
    ASSERT_TRUE(tf.View(cuts[k], {cuts[k + 1] - cuts[k]}, &pf).ok());
    ASSERT_TRUE(td.View(cuts[k], {cuts[k + 1] - cuts[k]}, &pd).ok());
    ASSERT_TRUE(SumSquares(*ctx, pf, &outf, /*accumulate=*/k > 0).ok());
    ASSERT_TRUE(SumSquares(*ctx, pd, &outd, /*accumulate=*/k > 0).ok());
  }
  EXPECT_EQ(outf.data<float>()[0], 338350.0f);
  EXPECT_EQ(outd.data<double>()[0], 338350.0);
  // An empty piece adds nothing; accumulating needs an existing out.
  Tensor empty;
  ASSERT_TRUE(tf.View(0, {0}, &empty).ok());
  ASSERT_TRUE(SumSquares(*ctx, empty, &outf, true).ok());
  EXPECT_EQ(outf.data<float>()[0], 338350.0f);
  Tensor undefined;
  EXPECT_EQ(SumSquares(*ctx, tf, &undefined, true).code(), Status::Code::kInvalidArgument);
}

TEST(SumSquares, RejectsBadArguments) {
  auto ctx = CpuContext();
  std::vector<float> x = {1.0f, 2.0f};
  std::vector<double> wrong_dtype(1);
  Tensor out = HostTensor(wrong_dtype);
  EXPECT_EQ(SumSquares(*ctx, HostTensor(x), &out).code(), Status::Code::kInvalidArgument);
  std::vector<float> two(2);
  Tensor out2 = HostTensor(two);
  EXPECT_EQ(SumSquares(*ctx, HostTensor(x), &out2).code(), Status::Code::kInvalidArgument);
  std::vector<int32_t> xi = {1, 2};
  Tensor out3;
  EXPECT_EQ(SumSquares(*ctx, HostTensor(xi), &out3).code(), Status::Code::kInvalidArgument);
  EXPECT_EQ(SumSquares(*ctx, HostTensor(x), nullptr).code(), Status::Code::kInvalidArgument);
  Tensor on_gpu = Tensor::Wrap(x.data(), {2}, DType::kF32, DeviceType::kCUDA);
  Tensor out4;
  EXPECT_EQ(SumSquares(*ctx, on_gpu, &out4).code(), Status::Code::kInvalidArgument);
}

TEST(Scale, CpuScalesInPlace) {
  auto ctx = CpuContext();
  std::vector<float> xf = {1.0f, -2.0f, 3.0f};
  Tensor tf = HostTensor(xf);
  ASSERT_TRUE(Scale(*ctx, &tf, 0.5f).ok());
  EXPECT_EQ(xf, (std::vector<float>{0.5f, -1.0f, 1.5f}));
  std::vector<double> xd = {4.0, -8.0};
  Tensor td = HostTensor(xd);
  ASSERT_TRUE(Scale(*ctx, &td, 0.25f).ok());
  EXPECT_EQ(xd, (std::vector<double>{1.0, -2.0}));
}

TEST(Reduce, ClipByScalingGivesTheTargetNorm) {
  // Global-norm clipping built from the two ops: norm 5 scaled to 1.
  auto ctx = CpuContext();
  std::vector<float> g = {3.0f, 4.0f, 0.0f};
  Tensor t = HostTensor(g);
  Tensor ss;
  ASSERT_TRUE(SumSquares(*ctx, t, &ss).ok());
  ASSERT_TRUE(Scale(*ctx, &t, 1.0f / std::sqrt(ss.data<float>()[0])).ok());
  ASSERT_TRUE(SumSquares(*ctx, t, &ss).ok());
  EXPECT_NEAR(ss.data<float>()[0], 1.0f, 1e-6f);
}

// ---- CUDA vs CPU -------------------------------------------------------------------------------

class ReduceCudaTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (CudaDeviceCount() == 0) GTEST_SKIP() << "no CUDA device: CPU-vs-CUDA reduction checks need a GPU";
    ASSERT_TRUE(DeviceContext::CreateCuda(0, &gpu_).ok());
    cpu_ = CpuContext();
  }
  Tensor ToDevice(std::vector<float>& host) {
    Tensor d;
    EXPECT_TRUE(Tensor::Empty({static_cast<int64_t>(host.size())}, DType::kF32, gpu_->allocator(), &d).ok());
    EXPECT_TRUE(d.CopyFrom(HostTensor(host), gpu_->stream()).ok());
    return d;
  }
  std::vector<float> ToHost(const Tensor& d) {
    std::vector<float> host(d.numel());
    Tensor h = HostTensor(host);
    EXPECT_TRUE(h.CopyFrom(d, gpu_->stream()).ok());
    EXPECT_TRUE(gpu_->Synchronize().ok());
    return host;
  }
  std::unique_ptr<DeviceContext> gpu_, cpu_;
};

// Tolerance: 1e-6 relative. Both sides accumulate in f64; the only f32 rounding is the final
// conversion, so CPU and GPU differ by at most ~1 ulp of the result.
TEST_F(ReduceCudaTest, SumSquaresMatchesCpuOnRandomData) {
  std::mt19937 rng(7);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  for (int64_t n :
       {int64_t{0}, int64_t{1}, int64_t{255}, int64_t{1000}, int64_t{(1 << 20) + 17}, int64_t{3 * (1 << 20)}}) {
    std::vector<float> x(n);
    for (auto& v : x) v = dist(rng);
    const double ref = SumSquaresCpu(x.data(), n);
    Tensor dx = ToDevice(x);
    Tensor out;
    ASSERT_TRUE(SumSquares(*gpu_, dx, &out).ok());
    ASSERT_EQ(out.device(), DeviceType::kCUDA);
    const float got = ToHost(out)[0];
    EXPECT_NEAR(got, ref, 1e-6 * ref + 1e-30) << "n=" << n;
    // Deterministic: a second run gives the same bits.
    Tensor out2;
    ASSERT_TRUE(SumSquares(*gpu_, dx, &out2).ok());
    EXPECT_EQ(ToHost(out2)[0], got) << "n=" << n;
  }
}

// Accumulating over pieces on the GPU: the f64 sum of the per-piece results, within 1e-6 relative
// (each piece and each accumulation round to f32 once: a few ulps over 4 pieces).
TEST_F(ReduceCudaTest, SumSquaresAccumulatesLikeCpu) {
  std::mt19937 rng(5);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<float> x((1 << 20) + 333);
  for (auto& v : x) v = dist(rng);
  const int64_t n = static_cast<int64_t>(x.size());
  const double ref = SumSquaresCpu(x.data(), n);
  Tensor dx = ToDevice(x);
  Tensor out;
  const int64_t cuts[] = {0, 7, 4096, 700001, n};
  for (int k = 0; k < 4; ++k) {
    Tensor piece;
    ASSERT_TRUE(dx.View(cuts[k], {cuts[k + 1] - cuts[k]}, &piece).ok());
    ASSERT_TRUE(SumSquares(*gpu_, piece, &out, /*accumulate=*/k > 0).ok());
  }
  EXPECT_NEAR(ToHost(out)[0], ref, 1e-6 * ref);
}

TEST_F(ReduceCudaTest, ScaleMatchesCpu) {
  std::mt19937 rng(11);
  std::uniform_real_distribution<float> dist(-3.0f, 3.0f);
  std::vector<float> x((1 << 18) + 3);
  for (auto& v : x) v = dist(rng);
  Tensor dx = ToDevice(x);
  ASSERT_TRUE(Scale(*gpu_, &dx, 0.37f).ok());
  ScaleCpu(x.data(), static_cast<int64_t>(x.size()), 0.37f);
  EXPECT_EQ(ToHost(dx), x);  // one IEEE multiply per element: exact agreement
}

// bf16 on the GPU: the CPU reference's value (both sum the exactly widened squares in f64), deterministic.
TEST_F(ReduceCudaTest, SumSquaresBf16MatchesCpu) {
  std::mt19937 rng(9);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<uint16_t> x((1 << 20) + 77);
  for (auto& v : x) v = RoundBf16Rne(dist(rng));
  const int64_t n = static_cast<int64_t>(x.size());
  const double ref = SumSquaresCpuBf16(x.data(), n);
  Tensor host = Tensor::Wrap(x.data(), {n}, DType::kBF16, DeviceType::kCPU), dx, out, out2;
  ASSERT_TRUE(Tensor::Empty({n}, DType::kBF16, gpu_->allocator(), &dx).ok());
  ASSERT_TRUE(dx.CopyFrom(host, gpu_->stream()).ok());
  ASSERT_TRUE(SumSquares(*gpu_, dx, &out).ok());
  ASSERT_EQ(out.dtype(), DType::kF32);
  const float got = ToHost(out)[0];
  EXPECT_NEAR(got, ref, 1e-6 * ref);
  ASSERT_TRUE(SumSquares(*gpu_, dx, &out2).ok());
  EXPECT_EQ(ToHost(out2)[0], got);
}

}  // namespace
}  // namespace dtrain::ops
