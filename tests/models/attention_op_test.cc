// Tests of models/ops/attention: closed forms (T = 1 gives v; equal keys give the mean of v over the causal prefix),
// finite-difference gradients of the CPU f64 reference, CPU f32 vs f64, shape errors, and CUDA f32 / bf16 against
// the CPU reference.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <memory>
#include <vector>

#include "models/ops/attention.h"
#include "runtime/core/device_context.h"
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

struct Shape {
  int64_t b, t, nh, hs;
  int64_t c() const { return nh * hs; }
  int64_t qkv_numel() const { return b * t * 3 * c(); }
  int64_t out_numel() const { return b * t * c(); }
};

// ---- bf16 host conversion (round to nearest even), for the CUDA bf16 tests --------------------------------------

uint16_t ToBf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  u += 0x7fffu + ((u >> 16) & 1u);
  return static_cast<uint16_t>(u >> 16);
}
double FromBf16(uint16_t h) {
  const uint32_t u = static_cast<uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
std::vector<double> RoundBf16(std::vector<double> v) {
  for (double& e : v) e = FromBf16(ToBf16(static_cast<float>(e)));
  return v;
}

// Tensors of `dt` on ctx's device; bf16 goes through a host buffer of bit patterns.
Status Make(DeviceContext& ctx, DType dt, const std::vector<int64_t>& shape, const std::vector<double>& v, Tensor* t) {
  if (dt != DType::kBF16) return MakeTensor(ctx, dt, shape, v, t);
  std::vector<uint16_t> host(v.size());
  for (size_t i = 0; i < v.size(); ++i) host[i] = ToBf16(static_cast<float>(v[i]));
  Status st = Tensor::Empty(shape, dt, ctx.allocator(), t);
  if (st.ok()) st = t->CopyFrom(Tensor::Wrap(host.data(), shape, dt, DeviceType::kCPU), ctx.stream());
  return st.ok() ? ctx.Synchronize() : st;
}
Status Get(DeviceContext& ctx, const Tensor& t, std::vector<double>* out) {
  if (t.dtype() != DType::kBF16) return Fetch(ctx, t, out);
  std::vector<uint16_t> host(static_cast<size_t>(t.numel()));
  Tensor view = Tensor::Wrap(host.data(), t.shape(), t.dtype(), DeviceType::kCPU);
  Status st = view.CopyFrom(t, ctx.stream());
  if (st.ok()) st = ctx.Synchronize();
  out->resize(host.size());
  for (size_t i = 0; i < host.size(); ++i) (*out)[i] = FromBf16(host[i]);
  return st;
}

struct Result {
  std::vector<double> out, lse, dqkv;
};

// Forward, then (when dout is not empty) backward with the saved out/lse. Outputs are poisoned with NaN first.
void RunAttention(DeviceContext& ctx, DType dt, const Shape& s, const std::vector<double>& qkv,
                  const std::vector<double>& dout, Result* r) {
  const DType lse_dt = dt == DType::kF64 ? DType::kF64 : DType::kF32;
  Tensor tqkv, tout, tlse, tdout, tdqkv;
  DT_ASSERT_OK(Make(ctx, dt, {s.b, s.t, 3 * s.c()}, qkv, &tqkv));
  DT_ASSERT_OK(Make(ctx, dt, {s.b, s.t, s.c()}, std::vector<double>(s.out_numel(), NAN), &tout));
  DT_ASSERT_OK(Make(ctx, lse_dt, {s.b, s.nh, s.t}, std::vector<double>(s.b * s.nh * s.t, NAN), &tlse));
  DT_ASSERT_OK(AttentionForward(ctx, tqkv, s.nh, &tout, &tlse));
  DT_ASSERT_OK(Get(ctx, tout, &r->out));
  DT_ASSERT_OK(Get(ctx, tlse, &r->lse));
  if (dout.empty()) return;
  DT_ASSERT_OK(Make(ctx, dt, {s.b, s.t, s.c()}, dout, &tdout));
  DT_ASSERT_OK(Make(ctx, dt, {s.b, s.t, 3 * s.c()}, std::vector<double>(s.qkv_numel(), NAN), &tdqkv));
  DT_ASSERT_OK(AttentionBackward(ctx, tqkv, tout, tlse, tdout, s.nh, &tdqkv));
  DT_ASSERT_OK(Get(ctx, tdqkv, &r->dqkv));
}

// Index of element d of head h's q (part 0), k (1) or v (2) in row (b, t) of qkv.
int64_t QkvAt(const Shape& s, int64_t b, int64_t t, int part, int64_t h, int64_t d) {
  return (b * s.t + t) * 3 * s.c() + part * s.c() + h * s.hs + d;
}

TEST(AttentionCpu, SingleTokenReturnsV) {
  auto cpu = Cpu();
  const Shape s{3, 1, 2, 4};
  const auto qkv = RandomVector(s.qkv_numel(), 1);
  Result r;
  ASSERT_NO_FATAL_FAILURE(RunAttention(*cpu, DType::kF64, s, qkv, {}, &r));
  for (int64_t b = 0; b < s.b; ++b) {
    for (int64_t h = 0; h < s.nh; ++h) {
      double qk = 0;
      for (int64_t d = 0; d < s.hs; ++d) {
        EXPECT_DOUBLE_EQ(r.out[b * s.c() + h * s.hs + d], qkv[QkvAt(s, b, 0, 2, h, d)]);
        qk += qkv[QkvAt(s, b, 0, 0, h, d)] * qkv[QkvAt(s, b, 0, 1, h, d)];
      }
      EXPECT_NEAR(r.lse[b * s.nh + h], qk / 2.0, 1e-15);  // one key: lse = its score, 1/sqrt(4) = 1/2
    }
  }
}

// All keys equal: every visible score is the same, so out_i = mean_{j<=i} v_j and lse_i = s + log(i + 1).
TEST(AttentionCpu, EqualKeysAverageTheCausalPrefix) {
  auto cpu = Cpu();
  const Shape s{2, 6, 2, 3};
  auto qkv = RandomVector(s.qkv_numel(), 2);
  const auto key = RandomVector(s.c(), 3);
  for (int64_t b = 0; b < s.b; ++b) {
    for (int64_t t = 0; t < s.t; ++t) {
      for (int64_t h = 0; h < s.nh; ++h) {
        for (int64_t d = 0; d < s.hs; ++d) qkv[QkvAt(s, b, t, 1, h, d)] = key[h * s.hs + d];
      }
    }
  }
  for (DType dt : {DType::kF64, DType::kF32}) {
    const double tol = dt == DType::kF64 ? 1e-13 : 1e-6;
    Result r;
    ASSERT_NO_FATAL_FAILURE(RunAttention(*cpu, dt, s, qkv, {}, &r));
    for (int64_t b = 0; b < s.b; ++b) {
      for (int64_t i = 0; i < s.t; ++i) {
        for (int64_t h = 0; h < s.nh; ++h) {
          double qk = 0;
          for (int64_t d = 0; d < s.hs; ++d) qk += qkv[QkvAt(s, b, i, 0, h, d)] * key[h * s.hs + d];
          EXPECT_NEAR(r.lse[(b * s.nh + h) * s.t + i], qk / std::sqrt(3.0) + std::log(i + 1.0), tol);
          for (int64_t d = 0; d < s.hs; ++d) {
            double mean = 0;
            for (int64_t j = 0; j <= i; ++j) mean += qkv[QkvAt(s, b, j, 2, h, d)] / (i + 1);
            EXPECT_NEAR(r.out[(b * s.t + i) * s.c() + h * s.hs + d], mean, tol) << DTypeName(dt);
          }
        }
      }
    }
  }
}

// loss = sum(W .* out(qkv)); backward with dout = W must be its gradient.
TEST(AttentionCpu, GradientMatchesFiniteDifferences) {
  auto cpu = Cpu();
  const Shape s{2, 5, 2, 3};
  const auto qkv = RandomVector(s.qkv_numel(), 4, -1.5, 1.5), w = RandomVector(s.out_numel(), 5);
  Result r;
  ASSERT_NO_FATAL_FAILURE(RunAttention(*cpu, DType::kF64, s, qkv, w, &r));
  const auto check = testing::CheckGradient(
      [&](const std::vector<double>& x) {
        Result fr;
        RunAttention(*cpu, DType::kF64, s, x, {}, &fr);
        return testing::Dot(w, fr.out);
      },
      qkv, r.dqkv);
  EXPECT_LT(check.max_rel_error, 1e-6) << check.ToString();
}

TEST(AttentionCpu, F32MatchesF64) {
  auto cpu = Cpu();
  const Shape s{2, 37, 3, 16};
  const auto qkv = RandomVector(s.qkv_numel(), 6, -2, 2), dout = RandomVector(s.out_numel(), 7);
  Result r64, r32;
  ASSERT_NO_FATAL_FAILURE(RunAttention(*cpu, DType::kF64, s, qkv, dout, &r64));
  ASSERT_NO_FATAL_FAILURE(RunAttention(*cpu, DType::kF32, s, qkv, dout, &r32));
  // f32 inputs (rounded) with double accumulation: only input/output rounding, ~1e-7 relative.
  EXPECT_LE(testing::MaxAbsDiff(r32.out, r64.out), 1e-6 * testing::Scale(r64.out));
  EXPECT_LE(testing::MaxAbsDiff(r32.lse, r64.lse), 1e-6 * testing::Scale(r64.lse));
  EXPECT_LE(testing::MaxAbsDiff(r32.dqkv, r64.dqkv), 1e-5 * testing::Scale(r64.dqkv));
}

TEST(Attention, RejectsMismatchedShapes) {
  auto cpu = Cpu();
  Tensor qkv, out, lse, out_bad, lse_bad;
  DT_ASSERT_OK(MakeTensor(*cpu, DType::kF32, {2, 4, 12}, RandomVector(96, 1), &qkv));
  DT_ASSERT_OK(MakeTensor(*cpu, DType::kF32, {2, 4, 4}, std::vector<double>(32, 0), &out));
  DT_ASSERT_OK(MakeTensor(*cpu, DType::kF32, {2, 2, 4}, std::vector<double>(16, 0), &lse));
  DT_ASSERT_OK(MakeTensor(*cpu, DType::kF32, {2, 4, 5}, std::vector<double>(40, 0), &out_bad));
  DT_ASSERT_OK(MakeTensor(*cpu, DType::kF32, {2, 4, 2}, std::vector<double>(16, 0), &lse_bad));
  DT_ASSERT_OK(AttentionForward(*cpu, qkv, 2, &out, &lse));
  const Status st = AttentionForward(*cpu, qkv, 2, &out_bad, &lse);
  EXPECT_EQ(st.code(), Status::Code::kInvalidArgument);
  EXPECT_NE(st.message().find("f32[2,4,5]"), std::string::npos) << st.ToString();
  EXPECT_EQ(AttentionForward(*cpu, qkv, 3, &out, &lse).code(), Status::Code::kInvalidArgument);  // C=4, NH=3
  EXPECT_EQ(AttentionForward(*cpu, qkv, 2, &out, &lse_bad).code(), Status::Code::kInvalidArgument);
  Tensor dqkv = qkv;
  EXPECT_EQ(AttentionBackward(*cpu, qkv, out, lse, qkv, 2, &dqkv).code(), Status::Code::kInvalidArgument);
}

// Shapes for the GPU: a partial last tile, T = 1, an odd head size, and hs = 128 (> 48 KiB of shared memory).
const Shape kGpuShapes[] = {{2, 100, 3, 64}, {3, 1, 2, 64}, {1, 70, 2, 7}, {1, 65, 2, 128}, {2, 256, 4, 32}};

// CUDA f32 vs the CPU f64 reference on the same (f32-representable) inputs. fp32 accumulation over hs and T
// terms: out and lse max abs err <= 1e-5 * scale, dqkv (sums over up to T query rows) <= 5e-5 * scale.
TEST(AttentionCuda, F32MatchesCpuReference) {
  DT_SKIP_WITHOUT_CUDA();
  auto cpu = Cpu();
  std::unique_ptr<DeviceContext> gpu;
  DT_ASSERT_OK(DeviceContext::CreateCuda(0, &gpu));
  for (const Shape& s : kGpuShapes) {
    std::vector<double> qkv = RandomVector(s.qkv_numel(), s.t + s.hs, -2, 2), dout = RandomVector(s.out_numel(), 9);
    for (double& e : qkv) e = static_cast<float>(e);
    for (double& e : dout) e = static_cast<float>(e);
    Result want, got;
    ASSERT_NO_FATAL_FAILURE(RunAttention(*cpu, DType::kF64, s, qkv, dout, &want));
    ASSERT_NO_FATAL_FAILURE(RunAttention(*gpu, DType::kF32, s, qkv, dout, &got));
    const std::string where =
        std::to_string(s.b) + "x" + std::to_string(s.t) + " nh " + std::to_string(s.nh) + " hs " + std::to_string(s.hs);
    EXPECT_LE(testing::MaxAbsDiff(got.out, want.out), 1e-5 * testing::Scale(want.out)) << where;
    EXPECT_LE(testing::MaxAbsDiff(got.lse, want.lse), 1e-5 * testing::Scale(want.lse)) << where;
    EXPECT_LE(testing::MaxAbsDiff(got.dqkv, want.dqkv), 5e-5 * testing::Scale(want.dqkv)) << where;
  }
}

// CUDA bf16 (fp32 accumulation and lse) vs the CPU f64 reference on the same bf16-rounded inputs. The GPU rounds
// out and dqkv to bf16 (2^-9 relative) and its backward reads the bf16 out: out max abs err <= 1e-2 * scale, lse
// (fp32) <= 1e-5 * scale, dqkv <= 2e-2 * scale.
TEST(AttentionCuda, Bf16MatchesCpuReference) {
  DT_SKIP_WITHOUT_CUDA();
  auto cpu = Cpu();
  std::unique_ptr<DeviceContext> gpu;
  DT_ASSERT_OK(DeviceContext::CreateCuda(0, &gpu));
  for (const Shape& s : kGpuShapes) {
    const auto qkv = RoundBf16(RandomVector(s.qkv_numel(), s.t + s.hs, -2, 2));
    const auto dout = RoundBf16(RandomVector(s.out_numel(), 9));
    Result want, got;
    ASSERT_NO_FATAL_FAILURE(RunAttention(*cpu, DType::kF64, s, qkv, dout, &want));
    ASSERT_NO_FATAL_FAILURE(RunAttention(*gpu, DType::kBF16, s, qkv, dout, &got));
    const std::string where =
        std::to_string(s.b) + "x" + std::to_string(s.t) + " nh " + std::to_string(s.nh) + " hs " + std::to_string(s.hs);
    EXPECT_LE(testing::MaxAbsDiff(got.out, want.out), 1e-2 * testing::Scale(want.out)) << where;
    EXPECT_LE(testing::MaxAbsDiff(got.lse, want.lse), 1e-5 * testing::Scale(want.lse)) << where;
    EXPECT_LE(testing::MaxAbsDiff(got.dqkv, want.dqkv), 2e-2 * testing::Scale(want.dqkv)) << where;
  }
}

// The cuBLAS bf16 path at a GPT-2-like head size with several 64-wide GEMM tiles of T: bf16 P and dS (2^-9 relative)
// feed sums over up to T = 256 terms of mixed sign, so the Bf16MatchesCpuReference tolerances apply unchanged. lse
// comes from fp32 scores (bf16 inputs are exact products, fp32 accumulation over hs = 64), hence <= 1e-5 * scale.
TEST(AttentionCuda, Bf16GemmPathMatchesCpuReferenceT256) {
  DT_SKIP_WITHOUT_CUDA();
  auto cpu = Cpu();
  std::unique_ptr<DeviceContext> gpu;
  DT_ASSERT_OK(DeviceContext::CreateCuda(0, &gpu));
  const Shape s{2, 256, 4, 64};
  const auto qkv = RoundBf16(RandomVector(s.qkv_numel(), 11, -2, 2));
  const auto dout = RoundBf16(RandomVector(s.out_numel(), 12));
  Result want, got;
  ASSERT_NO_FATAL_FAILURE(RunAttention(*cpu, DType::kF64, s, qkv, dout, &want));
  ASSERT_NO_FATAL_FAILURE(RunAttention(*gpu, DType::kBF16, s, qkv, dout, &got));
  EXPECT_LE(testing::MaxAbsDiff(got.out, want.out), 1e-2 * testing::Scale(want.out));
  EXPECT_LE(testing::MaxAbsDiff(got.lse, want.lse), 1e-5 * testing::Scale(want.lse));
  EXPECT_LE(testing::MaxAbsDiff(got.dqkv, want.dqkv), 2e-2 * testing::Scale(want.dqkv));
  // Causality: the first query row sees only key 0, so out_0 = v_0 (bf16-rounded) and lse_0 = s_00 per (b, h).
  for (int64_t b = 0; b < s.b; ++b) {
    for (int64_t h = 0; h < s.nh; ++h) {
      for (int64_t d = 0; d < s.hs; ++d) {
        EXPECT_NEAR(got.out[b * s.t * s.c() + h * s.hs + d], qkv[QkvAt(s, b, 0, 2, h, d)], 1e-6);
      }
    }
  }
  // A second call reuses cached workspace blocks: same results bit for bit (deterministic GEMMs and kernels).
  Result again;
  ASSERT_NO_FATAL_FAILURE(RunAttention(*gpu, DType::kBF16, s, qkv, dout, &again));
  EXPECT_EQ(again.out, got.out);
  EXPECT_EQ(again.dqkv, got.dqkv);
}

}  // namespace
}  // namespace dtrain::ops
