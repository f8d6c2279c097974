// Tests of kernels/matmul: hand-computed products, finite-difference gradients (f64), shape errors, and
// CPU-vs-CUDA agreement (cuBLASLt, fp32 compute with TF32 off).
#include <gtest/gtest.h>

#include <cmath>
#include <memory>
#include <vector>

#include "core/device_context.h"
#include "kernels/matmul.h"
#include "tests/testing/grad_check.h"

namespace dtrain::ops {
namespace {

using testing::Fetch;
using testing::MakeTensor;
using testing::RandomVector;

struct Case {
  int64_t m, n, k;
  bool ta, tb;
};
std::vector<int64_t> ShapeA(const Case& c) {
  return c.ta ? std::vector<int64_t>{c.k, c.m} : std::vector<int64_t>{c.m, c.k};
}
std::vector<int64_t> ShapeB(const Case& c) {
  return c.tb ? std::vector<int64_t>{c.n, c.k} : std::vector<int64_t>{c.k, c.n};
}

// C = alpha * op(A) op(B) + beta * C0 by the textbook triple loop, in double.
std::vector<double> Naive(const Case& c, const std::vector<double>& a, const std::vector<double>& b,
                          const std::vector<double>& c0, double alpha, double beta) {
  std::vector<double> out(c.m * c.n);
  for (int64_t i = 0; i < c.m; ++i) {
    for (int64_t j = 0; j < c.n; ++j) {
      double s = 0;
      for (int64_t kk = 0; kk < c.k; ++kk) {
        s += (c.ta ? a[kk * c.m + i] : a[i * c.k + kk]) * (c.tb ? b[j * c.k + kk] : b[kk * c.n + j]);
      }
      out[i * c.n + j] = alpha * s + (beta == 0 ? 0 : beta * c0[i * c.n + j]);
    }
  }
  return out;
}

// Runs the Tensor-level Matmul on ctx in dtype dt (inputs copied to ctx's device), returns C.
void RunMatmul(DeviceContext& ctx, DType dt, const Case& c, const std::vector<double>& a, const std::vector<double>& b,
               const std::vector<double>& c0, float alpha, float beta, std::vector<double>* out) {
  Tensor ta, tb, tc;
  DT_ASSERT_OK(MakeTensor(ctx, dt, ShapeA(c), a, &ta));
  DT_ASSERT_OK(MakeTensor(ctx, dt, ShapeB(c), b, &tb));
  DT_ASSERT_OK(MakeTensor(ctx, dt, {c.m, c.n}, c0, &tc));
  DT_ASSERT_OK(Matmul(ctx, ta, c.ta, tb, c.tb, &tc, alpha, beta));
  DT_ASSERT_OK(Fetch(ctx, tc, out));
}

// Row-major transpose of an r x s matrix.
std::vector<double> Transpose(const std::vector<double>& x, int64_t r, int64_t s) {
  std::vector<double> t(x.size());
  for (int64_t i = 0; i < r; ++i) {
    for (int64_t j = 0; j < s; ++j) t[j * r + i] = x[i * s + j];
  }
  return t;
}

std::unique_ptr<DeviceContext> Cpu() {
  std::unique_ptr<DeviceContext> ctx;
  EXPECT_TRUE(DeviceContext::CreateCpu(&ctx).ok());
  return ctx;
}

const Case kAllTrans[] = {
    {0, 0, 0, false, false}, {0, 0, 0, true, false}, {0, 0, 0, false, true}, {0, 0, 0, true, true}};

TEST(MatmulCpu, HandComputed2x3x2InEveryTransposeLayout) {
  auto cpu = Cpu();
  const std::vector<double> a = {1, 2, 3, 4, 5, 6};     // [2,3]
  const std::vector<double> b = {7, 8, 9, 10, 11, 12};  // [3,2]
  const std::vector<double> want = {58, 64, 139, 154};  // [2,2]
  for (Case c : kAllTrans) {
    c.m = 2, c.n = 2, c.k = 3;
    const auto as = c.ta ? Transpose(a, 2, 3) : a;
    const auto bs = c.tb ? Transpose(b, 3, 2) : b;
    for (DType dt : {DType::kF32, DType::kF64}) {
      std::vector<double> got;
      ASSERT_NO_FATAL_FAILURE(RunMatmul(*cpu, dt, c, as, bs, std::vector<double>(4, NAN), 1.f, 0.f, &got));
      EXPECT_EQ(got, want) << "trans_a=" << c.ta << " trans_b=" << c.tb << " " << DTypeName(dt);
    }
  }
}

TEST(MatmulCpu, AlphaScalesAndBetaOneAccumulates) {
  auto cpu = Cpu();
  const Case c = {2, 2, 3, false, false};
  std::vector<double> got;
  ASSERT_NO_FATAL_FAILURE(
      RunMatmul(*cpu, DType::kF64, c, {1, 2, 3, 4, 5, 6}, {7, 8, 9, 10, 11, 12}, {1, 2, 3, 4}, 2.f, 1.f, &got));
  EXPECT_EQ(got, (std::vector<double>{117, 130, 281, 312}));  // 2 * AB + C0
  // beta = 0.5 scales the old C.
  ASSERT_NO_FATAL_FAILURE(
      RunMatmul(*cpu, DType::kF64, c, {1, 2, 3, 4, 5, 6}, {7, 8, 9, 10, 11, 12}, {2, 4, 6, 8}, 1.f, 0.5f, &got));
  EXPECT_EQ(got, (std::vector<double>{59, 66, 142, 158}));
}

TEST(MatmulCpu, MatchesNaiveOnOddSizesAndKBlocks) {
  auto cpu = Cpu();
  for (Case c : kAllTrans) {
    c.m = 5, c.n = 37, c.k = 300;  // n not a multiple of the 16-wide inner loop; k spans 3 k-blocks of 128
    const auto a = RandomVector(c.m * c.k, 1), b = RandomVector(c.k * c.n, 2), c0 = RandomVector(c.m * c.n, 3);
    const auto want = Naive(c, a, b, c0, 0.5, 1.0);
    std::vector<double> got64, got32;
    ASSERT_NO_FATAL_FAILURE(RunMatmul(*cpu, DType::kF64, c, a, b, c0, 0.5f, 1.f, &got64));
    ASSERT_NO_FATAL_FAILURE(RunMatmul(*cpu, DType::kF32, c, a, b, c0, 0.5f, 1.f, &got32));
    EXPECT_LE(testing::MaxAbsDiff(got64, want), 1e-12 * testing::Scale(want)) << c.ta << c.tb;
    // f32: inputs rounded to float, sums accumulated in float over K = 300: ~1e-7 expected.
    EXPECT_LE(testing::RelFrobenius(got32, want), 1e-6) << c.ta << c.tb;
  }
}

// loss = sum(W .* op(A) op(B)); dop(A) = W op(B)^T and dop(B) = op(A)^T W, computed with Matmul itself in the
// transpose layouts backward passes use, then checked against central differences.
TEST(MatmulGrad, FiniteDifferencesInEveryTransposeLayout) {
  auto cpu = Cpu();
  for (Case c : kAllTrans) {
    c.m = 3, c.n = 4, c.k = 5;
    const auto a = RandomVector(c.m * c.k, 10), b = RandomVector(c.k * c.n, 11), w = RandomVector(c.m * c.n, 12);
    Tensor ta, tb, tw, da, db;
    DT_ASSERT_OK(MakeTensor(*cpu, DType::kF64, ShapeA(c), a, &ta));
    DT_ASSERT_OK(MakeTensor(*cpu, DType::kF64, ShapeB(c), b, &tb));
    DT_ASSERT_OK(MakeTensor(*cpu, DType::kF64, {c.m, c.n}, w, &tw));
    DT_ASSERT_OK(Tensor::Empty(ShapeA(c), DType::kF64, cpu->allocator(), &da));
    DT_ASSERT_OK(Tensor::Empty(ShapeB(c), DType::kF64, cpu->allocator(), &db));
    // dA = W op(B)^T, or (its transpose) op(B) W^T when A is stored transposed; likewise for B.
    DT_ASSERT_OK(c.ta ? Matmul(*cpu, tb, c.tb, tw, true, &da) : Matmul(*cpu, tw, false, tb, !c.tb, &da));
    DT_ASSERT_OK(c.tb ? Matmul(*cpu, tw, true, ta, c.ta, &db) : Matmul(*cpu, ta, !c.ta, tw, false, &db));
    std::vector<double> ga, gb;
    DT_ASSERT_OK(Fetch(*cpu, da, &ga));
    DT_ASSERT_OK(Fetch(*cpu, db, &gb));
    auto loss = [&](const std::vector<double>& av, const std::vector<double>& bv) {
      return testing::Dot(w, Naive(c, av, bv, {}, 1.0, 0.0));
    };
    const auto ra = testing::CheckGradient([&](const std::vector<double>& x) { return loss(x, b); }, a, ga);
    const auto rb = testing::CheckGradient([&](const std::vector<double>& x) { return loss(a, x); }, b, gb);
    EXPECT_LT(ra.max_rel_error, 1e-6) << "dA, trans " << c.ta << c.tb << ": " << ra.ToString();
    EXPECT_LT(rb.max_rel_error, 1e-6) << "dB, trans " << c.ta << c.tb << ": " << rb.ToString();
    // Negative control: the checker flags a gradient that is 1% off.
    std::vector<double> wrong = ga;
    for (double& g : wrong) g *= 1.01;
    EXPECT_GT(testing::CheckGradient([&](const std::vector<double>& x) { return loss(x, b); }, a, wrong).max_rel_error,
              5e-3);
  }
}

TEST(Matmul, RejectsMismatchedShapesNamingThem) {
  auto cpu = Cpu();
  Tensor a, b, c, c64, bad;
  DT_ASSERT_OK(MakeTensor(*cpu, DType::kF32, {2, 3}, std::vector<double>(6, 1.0), &a));
  DT_ASSERT_OK(MakeTensor(*cpu, DType::kF32, {4, 2}, std::vector<double>(8, 1.0), &b));
  DT_ASSERT_OK(MakeTensor(*cpu, DType::kF32, {2, 2}, std::vector<double>(4, 0.0), &c));
  DT_ASSERT_OK(MakeTensor(*cpu, DType::kF64, {2, 2}, std::vector<double>(4, 0.0), &c64));
  Status st = Matmul(*cpu, a, false, b, false, &c);  // inner dims 3 vs 4
  EXPECT_EQ(st.code(), Status::Code::kInvalidArgument);
  EXPECT_NE(st.message().find("f32[2,3]"), std::string::npos) << st.ToString();
  EXPECT_NE(st.message().find("f32[4,2]"), std::string::npos) << st.ToString();
  // a^T [3,2] @ b^T [2,4] = [3,4] does not fit c [2,2].
  EXPECT_EQ(Matmul(*cpu, a, true, b, true, &c).code(), Status::Code::kInvalidArgument);
  Tensor b32;
  DT_ASSERT_OK(MakeTensor(*cpu, DType::kF32, {3, 2}, std::vector<double>(6, 1.0), &b32));
  DT_ASSERT_OK(Matmul(*cpu, a, false, b32, false, &c));
  EXPECT_EQ(Matmul(*cpu, a, false, b32, false, &c64).code(), Status::Code::kInvalidArgument);  // dtype mismatch
  DT_ASSERT_OK(a.Reshape({6}, &bad));
  EXPECT_EQ(Matmul(*cpu, bad, false, b32, false, &c).code(), Status::Code::kInvalidArgument);  // not 2-D
  const Tensor on_gpu = Tensor::Wrap(a.data(), {2, 3}, DType::kF32, DeviceType::kCUDA);
  EXPECT_EQ(Matmul(*cpu, on_gpu, false, b32, false, &c).code(), Status::Code::kInvalidArgument);
  EXPECT_EQ(Matmul(*cpu, a, false, b32, false, nullptr).code(), Status::Code::kInvalidArgument);
}

// GPU (cuBLASLt, fp32 compute, TF32 off) vs the CPU f64 reference on the same f32-representable inputs.
// Tolerance: relative Frobenius error <= 1e-5 (fp32 accumulation over K <= 784 gives ~1e-6).
TEST(MatmulCuda, MatchesCpuReference) {
  DT_SKIP_WITHOUT_CUDA();
  auto cpu = Cpu();
  std::unique_ptr<DeviceContext> gpu;
  DT_ASSERT_OK(DeviceContext::CreateCuda(0, &gpu));
  const Case cases[] = {{64, 256, 784, false, true}, {256, 784, 64, true, false}, {64, 784, 256, false, false},
                        {33, 17, 129, true, true},   {1, 10, 128, false, true},   {7, 1, 3, false, false}};
  uint64_t seed = 100;
  for (const Case& c : cases) {
    for (const float beta : {0.f, 1.f}) {
      // Inputs rounded to f32 first, so the f64 reference sees exactly what the GPU sees.
      auto round = [](std::vector<double> v) {
        for (double& e : v) e = static_cast<float>(e);
        return v;
      };
      const auto a = round(RandomVector(c.m * c.k, ++seed)), b = round(RandomVector(c.k * c.n, ++seed));
      // beta = 0 must not read C: poison it with NaN. beta = 1 accumulates into random C.
      const auto c0 = beta == 0.f ? std::vector<double>(c.m * c.n, NAN) : round(RandomVector(c.m * c.n, ++seed));
      std::vector<double> want, got;
      ASSERT_NO_FATAL_FAILURE(RunMatmul(*cpu, DType::kF64, c, a, b, c0, 0.5f, beta, &want));
      ASSERT_NO_FATAL_FAILURE(RunMatmul(*gpu, DType::kF32, c, a, b, c0, 0.5f, beta, &got));
      EXPECT_LE(testing::RelFrobenius(got, want), 1e-5)
          << "m=" << c.m << " n=" << c.n << " k=" << c.k << " ta=" << c.ta << " tb=" << c.tb << " beta=" << beta;
    }
  }
}

// Parameter views sit at arbitrary 4-byte offsets of the flat buffer: cuBLASLt must be told the real alignment.
TEST(MatmulCuda, MisalignedViewsAndEmptyK) {
  DT_SKIP_WITHOUT_CUDA();
  auto cpu = Cpu();
  std::unique_ptr<DeviceContext> gpu;
  DT_ASSERT_OK(DeviceContext::CreateCuda(0, &gpu));
  const Case c = {31, 45, 67, false, true};
  const auto a = RandomVector(c.m * c.k, 7), b = RandomVector(c.k * c.n, 8);
  std::vector<double> flat(1 + a.size() + b.size() + c.m * c.n, NAN);
  std::copy(a.begin(), a.end(), flat.begin() + 1);
  std::copy(b.begin(), b.end(), flat.begin() + 1 + a.size());
  Tensor buf, ta, tb, tc;
  DT_ASSERT_OK(MakeTensor(*gpu, DType::kF32, {static_cast<int64_t>(flat.size())}, flat, &buf));
  DT_ASSERT_OK(buf.View(1, ShapeA(c), &ta));
  DT_ASSERT_OK(buf.View(1 + c.m * c.k, ShapeB(c), &tb));
  DT_ASSERT_OK(buf.View(1 + c.m * c.k + c.k * c.n, {c.m, c.n}, &tc));
  DT_ASSERT_OK(Matmul(*gpu, ta, c.ta, tb, c.tb, &tc));
  std::vector<double> got, want;
  DT_ASSERT_OK(Fetch(*gpu, tc, &got));
  ASSERT_NO_FATAL_FAILURE(RunMatmul(*cpu, DType::kF64, c, a, b, std::vector<double>(c.m * c.n, 0), 1.f, 0.f, &want));
  EXPECT_LE(testing::RelFrobenius(got, want), 1e-5);

  // K = 0: C = beta * C (cuBLASLt rejects k = 0; the launcher scales C itself).
  Tensor e_a, e_b, e_c;
  DT_ASSERT_OK(Tensor::Empty({3, 0}, DType::kF32, gpu->allocator(), &e_a));
  DT_ASSERT_OK(Tensor::Empty({0, 2}, DType::kF32, gpu->allocator(), &e_b));
  DT_ASSERT_OK(MakeTensor(*gpu, DType::kF32, {3, 2}, {1, 2, 3, 4, 5, 6}, &e_c));
  DT_ASSERT_OK(Matmul(*gpu, e_a, false, e_b, false, &e_c, 1.f, 0.5f));
  DT_ASSERT_OK(Fetch(*gpu, e_c, &got));
  EXPECT_EQ(got, (std::vector<double>{0.5, 1, 1.5, 2, 2.5, 3}));
}

}  // namespace
}  // namespace dtrain::ops
