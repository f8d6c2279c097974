// Tests of kernels/swiglu: the forward against the direct double formula (gate | up halves of each row), the
// backward against finite differences (f64) with dh overwritten, leading dims and shape errors, and CUDA f32 / bf16 /
// f16 against the CPU f64 reference (skipped without a GPU).
#include "kernels/swiglu.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "core/check.h"
#include "core/device_context.h"
#include "kernels/elementwise.h"
#include "kernels/half.h"
#include "tests/testing/grad_check.h"
#include "tests/testing/half_round.h"

namespace dtrain::ops {
namespace {

using testing::Fetch;
using testing::MakeTensor;
using testing::RandomVector;

std::unique_ptr<DeviceContext> Cpu() {
  std::unique_ptr<DeviceContext> ctx;
  EXPECT_TRUE(DeviceContext::CreateCpu(&ctx).ok());
  return ctx;
}

Status Make(DeviceContext& ctx, DType dt, const std::vector<int64_t>& shape, const std::vector<double>& v,
            Tensor* out) {
  if (!IsHalfFloat(dt)) return MakeTensor(ctx, dt, shape, v, out);
  Tensor f;
  DT_RETURN_IF_ERROR(MakeTensor(ctx, DType::kF32, shape, v, &f));
  DT_RETURN_IF_ERROR(Tensor::Empty(shape, dt, ctx.allocator(), out));
  return Cast(ctx, f, out);
}

Status Get(DeviceContext& ctx, const Tensor& t, std::vector<double>* out) {
  if (!IsHalfFloat(t.dtype())) return Fetch(ctx, t, out);
  Tensor f;
  DT_RETURN_IF_ERROR(Tensor::Empty(t.shape(), DType::kF32, ctx.allocator(), &f));
  DT_RETURN_IF_ERROR(Cast(ctx, t, &f));
  return Fetch(ctx, f, out);
}

// out[n, f] = SwiGLU(h[n, 2f]) on ctx (out poisoned with NaN first).
void RunForward(DeviceContext& ctx, DType dt, int64_t n, int64_t f, const std::vector<double>& h,
                std::vector<double>* out) {
  Tensor th, to;
  DT_ASSERT_OK(Make(ctx, dt, {n, 2 * f}, h, &th));
  DT_ASSERT_OK(Make(ctx, dt, {n, f}, std::vector<double>(n * f, NAN), &to));
  DT_ASSERT_OK(SwiGluForward(ctx, th, &to));
  DT_ASSERT_OK(Get(ctx, to, out));
}

// dh[n, 2f] on ctx; dh starts as NaN (it is SET, so none may survive).
void RunBackward(DeviceContext& ctx, DType dt, int64_t n, int64_t f, const std::vector<double>& h,
                 const std::vector<double>& dout, std::vector<double>* dh) {
  Tensor th, td, tdh;
  DT_ASSERT_OK(Make(ctx, dt, {n, 2 * f}, h, &th));
  DT_ASSERT_OK(Make(ctx, dt, {n, f}, dout, &td));
  DT_ASSERT_OK(Make(ctx, dt, {n, 2 * f}, std::vector<double>(n * 2 * f, NAN), &tdh));
  DT_ASSERT_OK(SwiGluBackward(ctx, th, td, &tdh));
  DT_ASSERT_OK(Get(ctx, tdh, dh));
}

double Silu(double g) { return g / (1 + std::exp(-g)); }

TEST(SwiGluCpu, MatchesDirectFormula) {
  auto cpu = Cpu();
  const int64_t n = 4, f = 9;
  auto h = RandomVector(n * 2 * f, 1, -6, 6);
  h[0] = -80, h[1] = 80, h[2] = 0;  // saturated sigmoids and the origin
  for (DType dt : {DType::kF64, DType::kF32}) {
    const double tol = dt == DType::kF64 ? 1e-14 : 1e-5;
    std::vector<double> out;
    ASSERT_NO_FATAL_FAILURE(RunForward(*cpu, dt, n, f, h, &out));
    for (int64_t i = 0; i < n; ++i) {
      for (int64_t j = 0; j < f; ++j) {
        const double g = h[i * 2 * f + j], u = h[i * 2 * f + f + j];
        EXPECT_NEAR(out[i * f + j], Silu(g) * u, tol * std::max(1.0, std::fabs(Silu(g) * u)))
            << i << "," << j << " " << DTypeName(dt);
      }
    }
  }
  std::vector<double> out;
  ASSERT_NO_FATAL_FAILURE(RunForward(*cpu, DType::kF64, 1, 1, {2.0, 3.0}, &out));
  EXPECT_DOUBLE_EQ(out[0], 2.0 / (1 + std::exp(-2.0)) * 3.0);
}

// loss = sum(W .* out(h)): dh (gate and up halves) against central differences; dh starts as NaN and is SET.
TEST(SwiGluGrad, FiniteDifferences) {
  auto cpu = Cpu();
  const int64_t n = 3, f = 5;
  const auto h = RandomVector(n * 2 * f, 1, -4, 4), w = RandomVector(n * f, 2);
  std::vector<double> dh;
  ASSERT_NO_FATAL_FAILURE(RunBackward(*cpu, DType::kF64, n, f, h, w, &dh));
  auto loss = [&](const std::vector<double>& hv) {
    std::vector<double> out;
    RunForward(*cpu, DType::kF64, n, f, hv, &out);
    return testing::Dot(w, out);
  };
  const auto r = testing::CheckGradient(loss, h, dh);
  EXPECT_LT(r.max_rel_error, 1e-6) << r.ToString();
  // f32 agrees with f64 to its rounding.
  std::vector<double> dh32;
  ASSERT_NO_FATAL_FAILURE(RunBackward(*cpu, DType::kF32, n, f, h, w, &dh32));
  EXPECT_LE(testing::MaxAbsDiff(dh32, dh), 1e-5 * testing::Scale(dh));
}

TEST(SwiGlu, AcceptsLeadingDimsAndRejectsMismatchedShapes) {
  auto cpu = Cpu();
  Tensor h, out, dh, odd, out_bad, h64;
  DT_ASSERT_OK(MakeTensor(*cpu, DType::kF32, {2, 3, 8}, RandomVector(48, 1), &h));
  DT_ASSERT_OK(MakeTensor(*cpu, DType::kF32, {2, 3, 4}, std::vector<double>(24, 0.0), &out));
  DT_ASSERT_OK(MakeTensor(*cpu, DType::kF32, {2, 3, 8}, std::vector<double>(48, 0.0), &dh));
  DT_ASSERT_OK(MakeTensor(*cpu, DType::kF32, {2, 7}, std::vector<double>(14, 0.0), &odd));
  DT_ASSERT_OK(MakeTensor(*cpu, DType::kF32, {6, 4}, std::vector<double>(24, 0.0), &out_bad));
  DT_ASSERT_OK(MakeTensor(*cpu, DType::kF64, {2, 3, 8}, RandomVector(48, 1), &h64));
  DT_ASSERT_OK(SwiGluForward(*cpu, h, &out));  // h [2,3,2F] -> out [2,3,F]
  DT_ASSERT_OK(SwiGluBackward(*cpu, h, out, &dh));
  const Status st = SwiGluForward(*cpu, h, &out_bad);
  EXPECT_EQ(st.code(), Status::Code::kInvalidArgument);
  EXPECT_NE(st.message().find("f32[2,3,8]"), std::string::npos) << st.ToString();
  EXPECT_NE(st.message().find("f32[6,4]"), std::string::npos) << st.ToString();
  EXPECT_EQ(SwiGluForward(*cpu, odd, &out).code(), Status::Code::kInvalidArgument);      // last dim not 2F
  EXPECT_EQ(SwiGluForward(*cpu, h64, &out).code(), Status::Code::kInvalidArgument);      // dtypes differ
  EXPECT_EQ(SwiGluBackward(*cpu, h, dh, &dh).code(), Status::Code::kInvalidArgument);    // dout not [..., F]
  EXPECT_EQ(SwiGluBackward(*cpu, h, out, &out).code(), Status::Code::kInvalidArgument);  // dh not [..., 2F]
}

// GPU vs the CPU f64 reference on inputs rounded to the GPU's dtype; 16-bit: one final rounding of an fp32 result
// (bf16 2^-9, fp16 2^-11 relative, plus expf's few ulps). F = 2560 (SmolLM2's FFN) and 8192 take the 128-bit path,
// F = 33 the scalar one.
TEST(SwiGluCuda, MatchesCpuReference) {
  DT_SKIP_WITHOUT_CUDA();
  auto cpu = Cpu();
  std::unique_ptr<DeviceContext> gpu;
  DT_ASSERT_OK(DeviceContext::CreateCuda(0, &gpu));
  struct Case {
    DType dt;
    double tol;
    double (*round)(double);
  };
  const Case cases[] = {{DType::kF32, 1e-5, [](double v) { return static_cast<double>(static_cast<float>(v)); }},
                        {DType::kBF16, 8e-3, testing::RoundToBf16},
                        {DType::kF16, 2e-3, testing::RoundToF16}};
  for (const Case& k : cases) {
    for (const auto& [n, f] : {std::pair<int64_t, int64_t>{37, 2560}, {5, 8192}, {17, 33}, {1, 1}}) {
      auto h = RandomVector(n * 2 * f, n + f, -5, 5), dout = RandomVector(n * f, 2);
      for (double& e : h) e = k.round(e);
      for (double& e : dout) e = k.round(e);
      const std::string where = std::string(DTypeName(k.dt)) + " " + std::to_string(n) + "x" + std::to_string(f);
      std::vector<double> want, got;
      ASSERT_NO_FATAL_FAILURE(RunForward(*cpu, DType::kF64, n, f, h, &want));
      ASSERT_NO_FATAL_FAILURE(RunForward(*gpu, k.dt, n, f, h, &got));
      EXPECT_LE(testing::MaxAbsDiff(got, want), k.tol * testing::Scale(want)) << where << " forward";
      ASSERT_NO_FATAL_FAILURE(RunBackward(*cpu, DType::kF64, n, f, h, dout, &want));
      ASSERT_NO_FATAL_FAILURE(RunBackward(*gpu, k.dt, n, f, h, dout, &got));
      EXPECT_LE(testing::MaxAbsDiff(got, want), k.tol * testing::Scale(want)) << where << " backward";
    }
  }
}

}  // namespace
}  // namespace dtrain::ops
