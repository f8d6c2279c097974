// Tests of the mixed-precision (bf16) matmul paths and the epilogue entry point: CUDA bf16 GEMMs against the CPU
// f64 reference on bf16-rounded inputs, f32 accumulation into C (weight gradients), the plan cache, and
// MatmulEpilogue against the separate ops (CPU here; cuBLASLt-fused and unfused paths on the GPU).
#include <gtest/gtest.h>

#include <cmath>
#include <iostream>
#include <memory>
#include <vector>

#include "core/bf16.h"
#include "core/check.h"
#include "core/device_context.h"
#include "kernels/bias.h"
#include "kernels/elementwise.h"
#include "kernels/gelu.h"
#include "kernels/matmul.h"
#include "tests/testing/grad_check.h"

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

// Values as the GPU sees them after a round to bf16.
std::vector<double> RoundBf16(std::vector<double> v) {
  for (double& x : v) x = Bf16BitsToF32(RoundBf16Rne(static_cast<float>(x)));
  return v;
}

// A tensor of `dt` (f32, f64 or bf16) on ctx; bf16 goes through an f32 tensor and Cast.
Status Make(DeviceContext& ctx, DType dt, const std::vector<int64_t>& shape, const std::vector<double>& v,
            Tensor* out) {
  if (dt != DType::kBF16) return MakeTensor(ctx, dt, shape, v, out);
  Tensor f;
  DT_RETURN_IF_ERROR(MakeTensor(ctx, DType::kF32, shape, v, &f));
  DT_RETURN_IF_ERROR(Tensor::Empty(shape, DType::kBF16, ctx.allocator(), out));
  return Cast(ctx, f, out);
}

Status Get(DeviceContext& ctx, const Tensor& t, std::vector<double>* out) {
  if (t.dtype() != DType::kBF16) return Fetch(ctx, t, out);
  Tensor f;
  DT_RETURN_IF_ERROR(Tensor::Empty(t.shape(), DType::kF32, ctx.allocator(), &f));
  DT_RETURN_IF_ERROR(Cast(ctx, t, &f));
  return Fetch(ctx, f, out);
}

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
std::string Name(const Case& c) {
  return "m=" + std::to_string(c.m) + " n=" + std::to_string(c.n) + " k=" + std::to_string(c.k) +
         " ta=" + std::to_string(c.ta) + " tb=" + std::to_string(c.tb);
}

// C = alpha op(A) op(B) + beta C0 on ctx: A and B of ab, C of cdt.
void RunMatmul(DeviceContext& ctx, DType ab, DType cdt, const Case& c, const std::vector<double>& a,
               const std::vector<double>& b, const std::vector<double>& c0, float alpha, float beta,
               std::vector<double>* out) {
  Tensor ta, tb, tc;
  DT_ASSERT_OK(Make(ctx, ab, ShapeA(c), a, &ta));
  DT_ASSERT_OK(Make(ctx, ab, ShapeB(c), b, &tb));
  DT_ASSERT_OK(Make(ctx, cdt, {c.m, c.n}, c0, &tc));
  DT_ASSERT_OK(Matmul(ctx, ta, c.ta, tb, c.tb, &tc, alpha, beta));
  DT_ASSERT_OK(Get(ctx, tc, out));
}

// The separate-op reference of every epilogue, in f64 on the CPU: returns c and (kBiasGelu) aux, and the updated
// bias for kDGeluBGrad. aux_in is the saved pre-activation (kDGelu*) or the residual (kBiasResidual).
void Reference(DeviceContext& cpu, const Case& c, Epilogue e, const std::vector<double>& a,
               const std::vector<double>& b, std::vector<double>* bias, const std::vector<double>& aux_in,
               std::vector<double>* out, std::vector<double>* aux_out) {
  Tensor ta, tb, tc, tbias, taux;
  DT_ASSERT_OK(MakeTensor(cpu, DType::kF64, ShapeA(c), a, &ta));
  DT_ASSERT_OK(MakeTensor(cpu, DType::kF64, ShapeB(c), b, &tb));
  DT_ASSERT_OK(MakeTensor(cpu, DType::kF64, {c.m, c.n}, std::vector<double>(c.m * c.n, 0.0), &tc));
  DT_ASSERT_OK(MakeTensor(cpu, DType::kF64, {c.n}, *bias, &tbias));
  DT_ASSERT_OK(MakeTensor(cpu, DType::kF64, {c.m, c.n}, aux_in, &taux));
  DT_ASSERT_OK(Matmul(cpu, ta, c.ta, tb, c.tb, &tc));
  switch (e) {
    case Epilogue::kBias:
      DT_ASSERT_OK(BiasAdd(cpu, tbias, &tc));
      break;
    case Epilogue::kBiasResidual:
      DT_ASSERT_OK(BiasAdd(cpu, tbias, &tc));
      DT_ASSERT_OK(Add(cpu, tc, taux, &tc));
      break;
    case Epilogue::kBiasGelu: {
      DT_ASSERT_OK(BiasAdd(cpu, tbias, &tc));
      DT_ASSERT_OK(Fetch(cpu, tc, aux_out));
      DT_ASSERT_OK(taux.CopyFrom(tc));
      DT_ASSERT_OK(GeluForward(cpu, taux, &tc));
      break;
    }
    case Epilogue::kDGelu:
    case Epilogue::kDGeluBGrad: {
      Tensor dpre;
      DT_ASSERT_OK(Tensor::Empty({c.m, c.n}, DType::kF64, cpu.allocator(), &dpre));
      DT_ASSERT_OK(GeluBackward(cpu, taux, tc, &dpre));
      DT_ASSERT_OK(tc.CopyFrom(dpre));
      if (e == Epilogue::kDGeluBGrad) {
        DT_ASSERT_OK(BiasGrad(cpu, tc, &tbias, /*accumulate=*/true));
        DT_ASSERT_OK(Fetch(cpu, tbias, bias));
      }
      break;
    }
  }
  DT_ASSERT_OK(Fetch(cpu, tc, out));
}

// MatmulEpilogue on ctx in dtype dt with a bias of bias_dt; inputs as given (already rounded for bf16).
void RunEpilogue(DeviceContext& ctx, DType dt, DType bias_dt, const Case& c, Epilogue e, const std::vector<double>& a,
                 const std::vector<double>& b, std::vector<double>* bias, const std::vector<double>& aux_in,
                 std::vector<double>* out, std::vector<double>* aux_out) {
  Tensor ta, tb, tc, tbias, taux;
  DT_ASSERT_OK(Make(ctx, dt, ShapeA(c), a, &ta));
  DT_ASSERT_OK(Make(ctx, dt, ShapeB(c), b, &tb));
  DT_ASSERT_OK(Make(ctx, dt, {c.m, c.n}, std::vector<double>(c.m * c.n, NAN), &tc));  // never read
  DT_ASSERT_OK(Make(ctx, bias_dt, {c.n}, *bias, &tbias));
  DT_ASSERT_OK(Make(ctx, dt, {c.m, c.n}, aux_in, &taux));
  DT_ASSERT_OK(MatmulEpilogue(ctx, ta, c.ta, tb, c.tb, tbias, e, &tc, &taux));
  DT_ASSERT_OK(Get(ctx, tc, out));
  DT_ASSERT_OK(Get(ctx, taux, aux_out));
  DT_ASSERT_OK(Get(ctx, tbias, bias));
}

const Epilogue kAllEpilogues[] = {Epilogue::kBias, Epilogue::kBiasGelu, Epilogue::kDGelu, Epilogue::kDGeluBGrad,
                                  Epilogue::kBiasResidual};

// The CPU MatmulEpilogue (f32 and f64) is the separate ops composed: equal to the f64 reference.
TEST(MatmulEpilogueCpu, MatchesSeparateOps) {
  auto cpu = Cpu();
  const Case c = {7, 13, 9, false, true};
  const auto a = RandomVector(c.m * c.k, 1), b = RandomVector(c.k * c.n, 2), bias0 = RandomVector(c.n, 3);
  const auto pre = RandomVector(c.m * c.n, 4, -3, 3);
  for (Epilogue e : kAllEpilogues) {
    std::vector<double> want_bias = bias0, want, want_aux, got_aux, got;
    ASSERT_NO_FATAL_FAILURE(Reference(*cpu, c, e, a, b, &want_bias, pre, &want, &want_aux));
    for (DType dt : {DType::kF64, DType::kF32}) {
      std::vector<double> got_bias = bias0;
      ASSERT_NO_FATAL_FAILURE(RunEpilogue(*cpu, dt, dt, c, e, a, b, &got_bias, pre, &got, &got_aux));
      const double tol = dt == DType::kF64 ? 1e-12 : 1e-5;
      EXPECT_LE(testing::MaxAbsDiff(got, want), tol * testing::Scale(want)) << EpilogueName(e) << DTypeName(dt);
      EXPECT_LE(testing::MaxAbsDiff(got_bias, want_bias), tol * testing::Scale(want_bias)) << EpilogueName(e);
      if (e == Epilogue::kBiasGelu) {
        EXPECT_LE(testing::MaxAbsDiff(got_aux, want_aux), tol * testing::Scale(want_aux));
      }
    }
  }
}

TEST(MatmulEpilogue, RejectsBadBiasAndAux) {
  auto cpu = Cpu();
  Tensor a, b, c, bias_bad, aux_bad, bias;
  DT_ASSERT_OK(MakeTensor(*cpu, DType::kF32, {2, 3}, std::vector<double>(6, 1.0), &a));
  DT_ASSERT_OK(MakeTensor(*cpu, DType::kF32, {3, 4}, std::vector<double>(12, 1.0), &b));
  DT_ASSERT_OK(MakeTensor(*cpu, DType::kF32, {2, 4}, std::vector<double>(8, 0.0), &c));
  DT_ASSERT_OK(MakeTensor(*cpu, DType::kF32, {3}, std::vector<double>(3, 0.0), &bias_bad));
  DT_ASSERT_OK(MakeTensor(*cpu, DType::kF32, {4}, std::vector<double>(4, 0.0), &bias));
  DT_ASSERT_OK(MakeTensor(*cpu, DType::kF32, {2, 3}, std::vector<double>(6, 0.0), &aux_bad));
  Status st = MatmulEpilogue(*cpu, a, false, b, false, bias_bad, Epilogue::kBias, &c, nullptr);
  EXPECT_EQ(st.code(), Status::Code::kInvalidArgument);
  EXPECT_NE(st.message().find("f32[3]"), std::string::npos) << st.ToString();
  EXPECT_EQ(MatmulEpilogue(*cpu, a, false, b, false, bias, Epilogue::kBiasGelu, &c, nullptr).code(),
            Status::Code::kInvalidArgument);
  EXPECT_EQ(MatmulEpilogue(*cpu, a, false, b, false, bias, Epilogue::kDGelu, &c, &aux_bad).code(),
            Status::Code::kInvalidArgument);
}

// bf16 A, B on the GPU vs the f64 CPU reference on the same bf16-rounded inputs.
// Tolerances (relative Frobenius): C in bf16: 1e-2 (one bf16 rounding of the output, 2^-9 relative, plus fp32
// accumulation); C in f32: 1e-5 (products of bf16 values are exact in fp32; only the fp32 accumulation differs).
TEST(MatmulBf16Cuda, MatchesCpuOnRoundedInputs) {
  DT_SKIP_WITHOUT_CUDA();
  auto cpu = Cpu();
  std::unique_ptr<DeviceContext> gpu;
  DT_ASSERT_OK(DeviceContext::CreateCuda(0, &gpu));
  const Case cases[] = {{64, 256, 768, false, true},
                        {256, 768, 64, true, false},
                        {33, 17, 129, true, true},
                        {7, 50, 31, false, false},
                        {1, 10, 128, false, true}};
  uint64_t seed = 300;
  for (const Case& c : cases) {
    const auto a = RoundBf16(RandomVector(c.m * c.k, ++seed)), b = RoundBf16(RandomVector(c.k * c.n, ++seed));
    const auto c0 = RoundBf16(RandomVector(c.m * c.n, ++seed));
    std::vector<double> want, got;
    // bf16 C, beta = 0 (C poisoned with NaN: never read).
    ASSERT_NO_FATAL_FAILURE(RunMatmul(*cpu, DType::kF64, DType::kF64, c, a, b, c0, 1.f, 0.f, &want));
    ASSERT_NO_FATAL_FAILURE(
        RunMatmul(*gpu, DType::kBF16, DType::kBF16, c, a, b, std::vector<double>(c.m * c.n, NAN), 1.f, 0.f, &got));
    EXPECT_LE(testing::RelFrobenius(got, want), 1e-2) << Name(c) << " bf16 C";
    // f32 C, beta = 1: the weight-gradient accumulation.
    ASSERT_NO_FATAL_FAILURE(RunMatmul(*cpu, DType::kF64, DType::kF64, c, a, b, c0, 0.5f, 1.f, &want));
    ASSERT_NO_FATAL_FAILURE(RunMatmul(*gpu, DType::kBF16, DType::kF32, c, a, b, c0, 0.5f, 1.f, &got));
    EXPECT_LE(testing::RelFrobenius(got, want), 1e-5) << Name(c) << " f32 C, beta 1";
  }
}

// The cached plan gives the same bits on every call, and a view at a 2-byte offset (a different alignment, so a
// different plan) still agrees with the aligned one to fp32 accumulation order.
TEST(MatmulBf16Cuda, PlanCacheIsStableAcrossCallsAndAlignments) {
  DT_SKIP_WITHOUT_CUDA();
  std::unique_ptr<DeviceContext> gpu;
  DT_ASSERT_OK(DeviceContext::CreateCuda(0, &gpu));
  const Case c = {48, 64, 96, false, true};
  const auto a = RoundBf16(RandomVector(c.m * c.k, 1)), b = RoundBf16(RandomVector(c.k * c.n, 2));
  std::vector<double> first, again, shifted;
  for (int i = 0; i < 3; ++i) {
    ASSERT_NO_FATAL_FAILURE(RunMatmul(*gpu, DType::kBF16, DType::kF32, c, a, b, std::vector<double>(c.m * c.n, 0.0),
                                      1.f, 0.f, i == 0 ? &first : &again));
  }
  EXPECT_EQ(first, again);
  std::vector<double> flat(1 + a.size(), 0.0);
  std::copy(a.begin(), a.end(), flat.begin() + 1);
  Tensor buf, ta, tb, tc;
  DT_ASSERT_OK(Make(*gpu, DType::kBF16, {static_cast<int64_t>(flat.size())}, flat, &buf));
  DT_ASSERT_OK(buf.View(1, ShapeA(c), &ta));
  DT_ASSERT_OK(Make(*gpu, DType::kBF16, ShapeB(c), b, &tb));
  DT_ASSERT_OK(Tensor::Empty({c.m, c.n}, DType::kF32, gpu->allocator(), &tc));
  DT_ASSERT_OK(Matmul(*gpu, ta, c.ta, tb, c.tb, &tc));
  DT_ASSERT_OK(Get(*gpu, tc, &shifted));
  EXPECT_LE(testing::RelFrobenius(shifted, first), 1e-6);
}

// Every epilogue on the GPU vs the separate-op f64 reference, f32 and bf16, with N a multiple of 8 (cuBLASLt
// fuses) and N odd (the unfused fallback). Tolerances: f32 max abs 1e-4 * scale (cuBLASLt's GELU vs tanhf, fp32
// accumulation); bf16 relative Frobenius 1e-2 on c, aux and the f32 bias gradient (each dpre is rounded to bf16
// once when fused, twice unfused: 2^-9 relative each).
TEST(MatmulEpilogueCuda, MatchesSeparateOps) {
  DT_SKIP_WITHOUT_CUDA();
  auto cpu = Cpu();
  std::unique_ptr<DeviceContext> gpu;
  DT_ASSERT_OK(DeviceContext::CreateCuda(0, &gpu));
  const Case cases[] = {{64, 96, 128, false, true}, {37, 45, 29, false, true}, {32, 64, 48, true, false}};
  uint64_t seed = 500;
  for (const Case& c : cases) {
    for (DType dt : {DType::kF32, DType::kBF16}) {
      auto round = [&](std::vector<double> v) { return dt == DType::kBF16 ? RoundBf16(std::move(v)) : v; };
      const auto a = round(RandomVector(c.m * c.k, ++seed)), b = round(RandomVector(c.k * c.n, ++seed));
      const auto bias0 = RoundBf16(RandomVector(c.n, ++seed));
      const auto pre = round(RandomVector(c.m * c.n, ++seed, -3, 3));
      for (Epilogue e : kAllEpilogues) {
        // bf16: the bias in f32 and (not for a bias gradient) in bf16, as GPT-2 passes it.
        for (DType bias_dt : {DType::kF32, dt}) {
          if (bias_dt != DType::kF32 && (dt == DType::kF32 || e == Epilogue::kDGeluBGrad)) continue;
          std::vector<double> want_bias = bias0, got_bias = bias0, want, want_aux, got, got_aux;
          ASSERT_NO_FATAL_FAILURE(Reference(*cpu, c, e, a, b, &want_bias, pre, &want, &want_aux));
          ASSERT_NO_FATAL_FAILURE(RunEpilogue(*gpu, dt, bias_dt, c, e, a, b, &got_bias, pre, &got, &got_aux));
          const std::string what =
              Name(c) + " " + EpilogueName(e) + " " + DTypeName(dt) + " bias " + DTypeName(bias_dt);
          if (dt == DType::kF32) {
            EXPECT_LE(testing::MaxAbsDiff(got, want), 1e-4 * testing::Scale(want)) << what;
            EXPECT_LE(testing::MaxAbsDiff(got_bias, want_bias), 1e-4 * testing::Scale(want_bias)) << what;
          } else {
            EXPECT_LE(testing::RelFrobenius(got, want), 1e-2) << what;
            EXPECT_LE(testing::RelFrobenius(got_bias, want_bias), 1e-2) << what;
          }
          if (e == Epilogue::kBiasGelu) {
            EXPECT_LE(testing::RelFrobenius(got_aux, want_aux), 1e-2) << what;
          }
        }
      }
    }
  }
}

// GPT-2 124M's forward GEMMs in bf16 (B*T = 16384 rows, C = 768) are fused when the bias is bf16 (what the model
// passes in bf16 runs): no call may fall back to the unfused kernels. Whether an f32 bias fuses is printed.
TEST(MatmulEpilogueCuda, FusesGpt2ShapesWithBf16Bias) {
  DT_SKIP_WITHOUT_CUDA();
  std::unique_ptr<DeviceContext> gpu;
  DT_ASSERT_OK(DeviceContext::CreateCuda(0, &gpu));
  struct Shape {
    int64_t n, k;
    Epilogue e;
  };
  const int64_t m = 16384;
  const Shape shapes[] = {{3 * 768, 768, Epilogue::kBias},
                          {768, 768, Epilogue::kBiasResidual},
                          {4 * 768, 768, Epilogue::kBiasGelu},
                          {768, 4 * 768, Epilogue::kBiasResidual}};
  for (DType bias_dt : {DType::kBF16, DType::kF32}) {
    const int64_t before = UnfusedEpilogueCount();
    for (const Shape& s : shapes) {
      Tensor a, w, bias, c, aux;
      DT_ASSERT_OK(Tensor::Empty({m, s.k}, DType::kBF16, gpu->allocator(), &a));
      DT_ASSERT_OK(Tensor::Empty({s.n, s.k}, DType::kBF16, gpu->allocator(), &w));
      DT_ASSERT_OK(Tensor::Empty({s.n}, bias_dt, gpu->allocator(), &bias));
      DT_ASSERT_OK(Tensor::Empty({m, s.n}, DType::kBF16, gpu->allocator(), &c));
      DT_ASSERT_OK(Tensor::Empty({m, s.n}, DType::kBF16, gpu->allocator(), &aux));
      for (Tensor* t : {&a, &w, &bias, &aux}) DT_ASSERT_OK(t->SetZero(gpu->stream()));
      DT_ASSERT_OK(MatmulEpilogue(*gpu, a, false, w, true, bias, s.e, &c, s.e == Epilogue::kBias ? nullptr : &aux));
    }
    DT_ASSERT_OK(gpu->Synchronize());
    const int64_t unfused = UnfusedEpilogueCount() - before;
    std::cout << "GPT-2 forward epilogues with a " << DTypeName(bias_dt) << " bias: " << unfused << " of 4 unfused\n";
    if (bias_dt == DType::kBF16) {
      EXPECT_EQ(unfused, 0);
    }
  }
}

// cuBLASLt's GELU epilogue against our tanh-approximation kernel applied to the aux (pre-activation) it saved: the
// same input, so only the GELU formulas differ. Measured difference printed; the bound 1e-5 (f32) holds only if
// cuBLASLt uses the tanh approximation too (the erf form differs from it by up to ~5e-4 on [-4, 4]).
TEST(MatmulEpilogueCuda, CublasGeluIsTheTanhApproximation) {
  DT_SKIP_WITHOUT_CUDA();
  std::unique_ptr<DeviceContext> gpu;
  DT_ASSERT_OK(DeviceContext::CreateCuda(0, &gpu));
  const Case c = {128, 256, 64, false, true};  // N % 8 == 0 and fresh (aligned) tensors: the fused path
  const auto a = RandomVector(c.m * c.k, 7, -1, 1), b = RandomVector(c.k * c.n, 8, -1, 1);
  Tensor ta, tb, tc, taux, tbias, tref;
  DT_ASSERT_OK(MakeTensor(*gpu, DType::kF32, ShapeA(c), a, &ta));
  DT_ASSERT_OK(MakeTensor(*gpu, DType::kF32, ShapeB(c), b, &tb));
  DT_ASSERT_OK(MakeTensor(*gpu, DType::kF32, {c.n}, RandomVector(c.n, 9, -1, 1), &tbias));
  DT_ASSERT_OK(Tensor::Empty({c.m, c.n}, DType::kF32, gpu->allocator(), &tc));
  DT_ASSERT_OK(Tensor::Empty({c.m, c.n}, DType::kF32, gpu->allocator(), &taux));
  DT_ASSERT_OK(Tensor::Empty({c.m, c.n}, DType::kF32, gpu->allocator(), &tref));
  DT_ASSERT_OK(MatmulEpilogue(*gpu, ta, c.ta, tb, c.tb, tbias, Epilogue::kBiasGelu, &tc, &taux));
  DT_ASSERT_OK(GeluForward(*gpu, taux, &tref));
  std::vector<double> got, want, pre;
  DT_ASSERT_OK(Fetch(*gpu, tc, &got));
  DT_ASSERT_OK(Fetch(*gpu, tref, &want));
  DT_ASSERT_OK(Fetch(*gpu, taux, &pre));
  double lo = 0, hi = 0;
  for (double p : pre) lo = std::min(lo, p), hi = std::max(hi, p);
  const double diff = testing::MaxAbsDiff(got, want);
  std::cout << "cuBLASLt GELU vs tanh-approximation kernel: max abs diff " << diff << " over pre-activations in [" << lo
            << ", " << hi << "]\n";
  RecordProperty("gelu_max_abs_diff", std::to_string(diff));
  EXPECT_LE(diff, 1e-5);
}

}  // namespace
}  // namespace dtrain::ops
