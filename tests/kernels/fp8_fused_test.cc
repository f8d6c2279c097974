// Tests of the FP8 quantization fused into other passes (issue 35): the amax that the producers of an FP8 GEMM's
// operand compute while they write it (GPT-2's GELU backward, layer norm forward and backward; Llama's RMSNorm forward
// and backward, SwiGLU forward and backward) equals kernels/fp8.h's Fp8Amax of what they wrote, bit for bit, and
// leaves what they write unchanged; Fp8Quantize's one-kernel scale + cast gives the bytes and scales of the separate
// passes, trusts a ready amax, and adds the bias gradient from its own loads (within f32 summation-order error of
// kernels/bias.h's BiasGrad).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "core/device_context.h"
#include "kernels/bias.h"
#include "kernels/fp8.h"
#include "kernels/gelu.h"
#include "kernels/layernorm.h"
#include "kernels/rmsnorm.h"
#include "kernels/swiglu.h"
#include "tests/testing/grad_check.h"

namespace dtrain::ops {
namespace {

using testing::Fetch;
using testing::MakeTensor;
using testing::MakeTensorAt;
using testing::RandomVector;

std::unique_ptr<DeviceContext> Cpu() {
  std::unique_ptr<DeviceContext> ctx;
  EXPECT_TRUE(DeviceContext::CreateCpu(&ctx).ok());
  return ctx;
}

uint32_t Bits(float v) {
  uint32_t b;
  std::memcpy(&b, &v, 4);
  return b;
}

std::vector<uint8_t> BytesOf(DeviceContext& ctx, const Tensor& t) {
  std::vector<uint8_t> host(static_cast<size_t>(t.numel()));
  EXPECT_TRUE(Tensor::Wrap(host.data(), t.shape(), DType::kU8, DeviceType::kCPU).CopyFrom(t, ctx.stream()).ok());
  EXPECT_TRUE(ctx.Synchronize().ok());
  return host;
}

float ScalarOf(DeviceContext& ctx, const Tensor& t) {
  std::vector<double> v;
  EXPECT_TRUE(Fetch(ctx, t, &v).ok());
  return v.empty() ? NAN : static_cast<float>(v[0]);
}

// amax (written by a producer) against Fp8Amax of the tensor it wrote: the same bits.
void ExpectAmaxOf(DeviceContext& ctx, const Tensor& amax, const Tensor& y, const std::string& where) {
  Tensor want;
  DT_ASSERT_OK(MakeTensor(ctx, DType::kF32, {1}, {-1.0}, &want));
  DT_ASSERT_OK(Fp8Amax(ctx, y, &want));
  const float got = ScalarOf(ctx, amax), ref = ScalarOf(ctx, want);
  EXPECT_GT(ref, 0.f) << where;
  EXPECT_EQ(Bits(got), Bits(ref)) << where << ": " << got << " vs " << ref;
}

// Each producer on `ctx` in `dt`: GELU backward (aligned and one element off), layer norm forward (the cached,
// uncached and scalar kernels) and backward (the fused and the dx kernel, accumulating onto a residual gradient).
void CheckProducers(DeviceContext& ctx, DType dt) {
  const std::string name = std::string(DeviceName(ctx.type())) + " " + DTypeName(dt);
  Tensor amax;
  DT_ASSERT_OK(MakeTensor(ctx, DType::kF32, {1}, {123.0}, &amax));  // overwritten, not max-ed with
  for (int64_t offset : {0, 1}) {
    const int64_t n = 100003;
    Tensor x, dy, dx;
    DT_ASSERT_OK(MakeTensorAt(ctx, dt, {n}, RandomVector(n, 1, -6, 6), offset, &x));
    DT_ASSERT_OK(MakeTensorAt(ctx, dt, {n}, RandomVector(n, 2, -3, 3), offset, &dy));
    DT_ASSERT_OK(MakeTensorAt(ctx, dt, {n}, std::vector<double>(n, 0.0), offset, &dx));
    DT_ASSERT_OK(GeluBackward(ctx, x, dy, &dx, &amax));
    ExpectAmaxOf(ctx, amax, dx, name + " GeluBackward offset " + std::to_string(offset));
  }
  for (const auto& [rows, c] : {std::pair<int64_t, int64_t>{257, 768}, {64, 1600}, {40, 33}}) {
    const std::string shape = " [" + std::to_string(rows) + "," + std::to_string(c) + "]";
    Tensor x, gamma, beta, y, mean, rstd, dy, dx, dgamma, dbeta;
    DT_ASSERT_OK(MakeTensor(ctx, dt, {rows, c}, RandomVector(rows * c, c, -2, 2), &x));
    DT_ASSERT_OK(MakeTensor(ctx, DType::kF32, {c}, RandomVector(c, 3, 0.5, 1.5), &gamma));
    DT_ASSERT_OK(MakeTensor(ctx, DType::kF32, {c}, RandomVector(c, 4), &beta));
    DT_ASSERT_OK(MakeTensor(ctx, dt, {rows, c}, std::vector<double>(rows * c, 0.0), &y));
    DT_ASSERT_OK(MakeTensor(ctx, DType::kF32, {rows}, std::vector<double>(rows, 0.0), &mean));
    DT_ASSERT_OK(MakeTensor(ctx, DType::kF32, {rows}, std::vector<double>(rows, 0.0), &rstd));
    DT_ASSERT_OK(LayerNormForward(ctx, x, gamma, beta, 1e-5f, &y, &mean, &rstd, &amax));
    ExpectAmaxOf(ctx, amax, y, name + " LayerNormForward" + shape);
    DT_ASSERT_OK(MakeTensor(ctx, dt, {rows, c}, RandomVector(rows * c, 5), &dy));
    DT_ASSERT_OK(MakeTensor(ctx, dt, {rows, c}, RandomVector(rows * c, 6, -4, 4), &dx));  // the residual gradient
    DT_ASSERT_OK(MakeTensor(ctx, DType::kF32, {c}, std::vector<double>(c, 0.0), &dgamma));
    DT_ASSERT_OK(MakeTensor(ctx, DType::kF32, {c}, std::vector<double>(c, 0.0), &dbeta));
    DT_ASSERT_OK(LayerNormBackward(ctx, x, gamma, mean, rstd, dy, &dx, &dgamma, &dbeta, /*accumulate_dx=*/true, &amax));
    ExpectAmaxOf(ctx, amax, dx, name + " LayerNormBackward" + shape);
  }
}

// a and b (one shape and dtype) hold the same values bit for bit (fetched as their exact widening to double).
void ExpectSameBits(DeviceContext& ctx, const Tensor& a, const Tensor& b, const std::string& where) {
  std::vector<double> va, vb;
  DT_ASSERT_OK(Fetch(ctx, a, &va));
  DT_ASSERT_OK(Fetch(ctx, b, &vb));
  ASSERT_EQ(va.size(), vb.size()) << where;
  EXPECT_EQ(std::memcmp(va.data(), vb.data(), va.size() * sizeof(double)), 0) << where << ": the output changed";
}

Tensor Zeros(DeviceContext& ctx, DType dt, const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  Tensor t;
  EXPECT_TRUE(MakeTensor(ctx, dt, shape, std::vector<double>(static_cast<size_t>(n), 0.0), &t).ok());
  return t;
}

// RMSNorm forward and backward on `ctx` in `dt` (bf16_weight: a bf16 weight beside bf16 x, the *Bf16W launchers), each
// run without and with amax: the amax is Fp8Amax of the output and the output is the same. Shapes: the register-held
// kernels (C <= 2048: 2048 and 768 columns 128-bit, 33 scalar; the backward's one-pass kernel over several 64-row
// blocks) and the others (4096 128-bit, 4099 scalar); the backward sets dx and accumulates onto a residual gradient.
void CheckRmsNorm(DeviceContext& ctx, DType dt, bool bf16_weight) {
  const std::string name =
      std::string(DeviceName(ctx.type())) + " " + DTypeName(dt) + (bf16_weight ? " bf16 weight" : "");
  Tensor amax;
  DT_ASSERT_OK(MakeTensor(ctx, DType::kF32, {1}, {123.0}, &amax));  // overwritten, not max-ed with
  for (const auto& [rows, c] : {std::pair<int64_t, int64_t>{257, 2048}, {70, 768}, {40, 33}, {24, 4096}, {9, 4099}}) {
    const std::string shape = " [" + std::to_string(rows) + "," + std::to_string(c) + "]";
    Tensor x, w, dy;
    DT_ASSERT_OK(MakeTensor(ctx, dt, {rows, c}, RandomVector(rows * c, c, -2, 2), &x));
    DT_ASSERT_OK(MakeTensor(ctx, bf16_weight ? DType::kBF16 : DType::kF32, {c}, RandomVector(c, 3, 0.5, 1.5), &w));
    DT_ASSERT_OK(MakeTensor(ctx, dt, {rows, c}, RandomVector(rows * c, 5), &dy));
    Tensor y_ref = Zeros(ctx, dt, {rows, c}), y = Zeros(ctx, dt, {rows, c}), rstd = Zeros(ctx, DType::kF32, {rows});
    DT_ASSERT_OK(RmsNormForward(ctx, x, w, 1e-5f, &y_ref, &rstd));
    DT_ASSERT_OK(RmsNormForward(ctx, x, w, 1e-5f, &y, &rstd, &amax));
    ExpectSameBits(ctx, y, y_ref, name + " RmsNormForward" + shape);
    ExpectAmaxOf(ctx, amax, y, name + " RmsNormForward" + shape);
    for (bool accumulate : {false, true}) {
      const std::string where = name + " RmsNormBackward" + shape + (accumulate ? " accumulate_dx" : "");
      Tensor dx_ref, dx;  // the residual gradient that accumulate_dx adds to
      DT_ASSERT_OK(MakeTensor(ctx, dt, {rows, c}, RandomVector(rows * c, 6, -4, 4), &dx_ref));
      DT_ASSERT_OK(MakeTensor(ctx, dt, {rows, c}, RandomVector(rows * c, 6, -4, 4), &dx));
      Tensor dw_ref = Zeros(ctx, DType::kF32, {c}), dw = Zeros(ctx, DType::kF32, {c});
      DT_ASSERT_OK(RmsNormBackward(ctx, x, w, rstd, dy, &dx_ref, &dw_ref, accumulate));
      DT_ASSERT_OK(RmsNormBackward(ctx, x, w, rstd, dy, &dx, &dw, accumulate, &amax));
      ExpectSameBits(ctx, dx, dx_ref, where);
      ExpectSameBits(ctx, dw, dw_ref, where + " dweight");
      ExpectAmaxOf(ctx, amax, dx, where);
    }
  }
}

// SwiGLU forward and backward on `ctx` in `dt`, each run without and with amax (as CheckRmsNorm). F: 128-bit (8, 1000,
// 1024) and scalar (1001) columns, lanes past F, and more rows than the amax grid's row blocks (2100 x 8, 600 x 1001).
void CheckSwiGlu(DeviceContext& ctx, DType dt) {
  const std::string name = std::string(DeviceName(ctx.type())) + " " + DTypeName(dt);
  Tensor amax;
  DT_ASSERT_OK(MakeTensor(ctx, DType::kF32, {1}, {123.0}, &amax));
  for (const auto& [rows, f] :
       {std::pair<int64_t, int64_t>{65, 1024}, {33, 1000}, {2100, 8}, {40, 1001}, {600, 1001}}) {
    const std::string shape = " [" + std::to_string(rows) + ", F " + std::to_string(f) + "]";
    Tensor h, dout;
    DT_ASSERT_OK(MakeTensor(ctx, dt, {rows, 2 * f}, RandomVector(rows * 2 * f, f, -5, 5), &h));
    DT_ASSERT_OK(MakeTensor(ctx, dt, {rows, f}, RandomVector(rows * f, 8, -2, 2), &dout));
    Tensor out_ref = Zeros(ctx, dt, {rows, f}), out = Zeros(ctx, dt, {rows, f});
    DT_ASSERT_OK(SwiGluForward(ctx, h, &out_ref));
    DT_ASSERT_OK(SwiGluForward(ctx, h, &out, &amax));
    ExpectSameBits(ctx, out, out_ref, name + " SwiGluForward" + shape);
    ExpectAmaxOf(ctx, amax, out, name + " SwiGluForward" + shape);
    Tensor dh_ref = Zeros(ctx, dt, {rows, 2 * f}), dh = Zeros(ctx, dt, {rows, 2 * f});
    DT_ASSERT_OK(SwiGluBackward(ctx, h, dout, &dh_ref));
    DT_ASSERT_OK(SwiGluBackward(ctx, h, dout, &dh, &amax));
    ExpectSameBits(ctx, dh, dh_ref, name + " SwiGluBackward" + shape);
    ExpectAmaxOf(ctx, amax, dh, name + " SwiGluBackward" + shape);
  }
}

TEST(Fp8FusedCpu, ProducersReportTheAmaxOfWhatTheyWrote) { CheckProducers(*Cpu(), DType::kF32); }
TEST(Fp8FusedCpu, RmsNormReportsTheAmaxOfWhatItWrote) { CheckRmsNorm(*Cpu(), DType::kF32, /*bf16_weight=*/false); }
TEST(Fp8FusedCpu, SwiGluReportsTheAmaxOfWhatItWrote) { CheckSwiGlu(*Cpu(), DType::kF32); }

// Fp8Quantize with dbias adds the column sums of x; with amax_ready it takes the amax it finds (here a larger one
// than x's: the scale follows it, proving the amax pass was skipped).
TEST(Fp8FusedCpu, QuantizeAddsTheBiasGradientAndTrustsAReadyAmax) {
  auto cpu = Cpu();
  const int64_t rows = 5, cols = 3;
  const std::vector<double> xv = {0.5, -1, 2, 3, 4, -5, 6, 7, 8, -9, 10, 11, 1.5, -2.5, 3.5};
  Tensor x, dbias, storage, q, q_t;
  DT_ASSERT_OK(MakeTensor(*cpu, DType::kF32, {rows, cols}, xv, &x));
  DT_ASSERT_OK(MakeTensor(*cpu, DType::kF32, {cols}, {1, 2, 3}, &dbias));
  DT_ASSERT_OK(Tensor::Empty({rows, cols}, DType::kU8, cpu->allocator(), &q));
  DT_ASSERT_OK(Tensor::Empty({cols, rows}, DType::kU8, cpu->allocator(), &q_t));
  std::vector<Fp8Scales> s;
  DT_ASSERT_OK(Fp8ScaleSlots(*cpu, 1, &storage, &s));
  Fp8QuantizeOptions opts;
  opts.dbias = &dbias;
  DT_ASSERT_OK(Fp8Quantize(*cpu, x, Fp8Format::kE4M3, &s[0], &q, &q_t, opts));
  std::vector<double> db;
  DT_ASSERT_OK(Fetch(*cpu, dbias, &db));
  EXPECT_EQ(db, (std::vector<double>{1 + 0.5 + 3 + 6 - 9 + 1.5, 2 - 1 + 4 + 7 + 10 - 2.5, 3 + 2 - 5 + 8 + 11 + 3.5}));
  EXPECT_EQ(ScalarOf(*cpu, s[0].amax), 11.f);
  EXPECT_EQ(ScalarOf(*cpu, s[0].scale), Fp8ScaleFromAmax(11.f, Fp8Format::kE4M3).scale);
  s[0].amax.data<float>()[0] = 100.f;
  Fp8QuantizeOptions ready;
  ready.amax_ready = true;
  DT_ASSERT_OK(Fp8Quantize(*cpu, x, Fp8Format::kE4M3, &s[0], &q, &q_t, ready));
  EXPECT_EQ(ScalarOf(*cpu, s[0].amax), 100.f);
  EXPECT_EQ(ScalarOf(*cpu, s[0].scale), Fp8ScaleFromAmax(100.f, Fp8Format::kE4M3).scale);
  EXPECT_EQ(q.data<uint8_t>()[3], FloatToFp8(3.f * ScalarOf(*cpu, s[0].scale), Fp8Format::kE4M3));
}

#if DT_HAVE_CUDA
TEST(Fp8FusedCuda, ProducersReportTheAmaxOfWhatTheyWrote) {
  DT_SKIP_WITHOUT_CUDA();
  std::unique_ptr<DeviceContext> gpu;
  DT_ASSERT_OK(DeviceContext::CreateCuda(0, &gpu));
  CheckProducers(*gpu, DType::kBF16);  // the fused kernels
  CheckProducers(*gpu, DType::kF32);   // f32: the separate pass behind the same entry points
}

TEST(Fp8FusedCuda, RmsNormReportsTheAmaxOfWhatItWrote) {
  DT_SKIP_WITHOUT_CUDA();
  std::unique_ptr<DeviceContext> gpu;
  DT_ASSERT_OK(DeviceContext::CreateCuda(0, &gpu));
  CheckRmsNorm(*gpu, DType::kBF16, /*bf16_weight=*/false);  // the fused kernels
  CheckRmsNorm(*gpu, DType::kBF16, /*bf16_weight=*/true);   // the *Bf16W launchers
  CheckRmsNorm(*gpu, DType::kF32, /*bf16_weight=*/false);   // f32: the separate pass
}

TEST(Fp8FusedCuda, SwiGluReportsTheAmaxOfWhatItWrote) {
  DT_SKIP_WITHOUT_CUDA();
  std::unique_ptr<DeviceContext> gpu;
  DT_ASSERT_OK(DeviceContext::CreateCuda(0, &gpu));
  CheckSwiGlu(*gpu, DType::kBF16);
  CheckSwiGlu(*gpu, DType::kF32);
}

// The fused path against the separate passes (Fp8Amax, Fp8Scale, CastToFp8, BiasGrad): the same bytes, the same
// scale bits; the bias gradient within f32 summation-order error. Shapes: 128-bit tiles, ragged tiles, cols % 8 != 0.
TEST(Fp8FusedCuda, QuantizeEqualsTheSeparatePasses) {
  DT_SKIP_WITHOUT_CUDA();
  std::unique_ptr<DeviceContext> gpu;
  DT_ASSERT_OK(DeviceContext::CreateCuda(0, &gpu));
  for (DType dt : {DType::kBF16, DType::kF32}) {
    for (Fp8Format f : {Fp8Format::kE4M3, Fp8Format::kE5M2}) {
      for (const auto& [rows, cols] : {std::pair<int64_t, int64_t>{256, 768}, {130, 64}, {100, 3}, {37, 52}}) {
        const std::string where = std::string(DTypeName(dt)) + " " + Fp8FormatName(f) + " [" + std::to_string(rows) +
                                  "," + std::to_string(cols) + "]";
        const auto base = RandomVector(cols, 7);
        Tensor x, db_sep, db_fused, storage, q1, q1_t, q2, q2_t;
        DT_ASSERT_OK(MakeTensor(*gpu, dt, {rows, cols}, RandomVector(rows * cols, rows + cols, -3, 3), &x));
        DT_ASSERT_OK(MakeTensor(*gpu, DType::kF32, {cols}, base, &db_sep));
        DT_ASSERT_OK(MakeTensor(*gpu, DType::kF32, {cols}, base, &db_fused));
        for (Tensor* t : {&q1, &q2}) DT_ASSERT_OK(Tensor::Empty({rows, cols}, DType::kU8, gpu->allocator(), t));
        for (Tensor* t : {&q1_t, &q2_t}) DT_ASSERT_OK(Tensor::Empty({cols, rows}, DType::kU8, gpu->allocator(), t));
        std::vector<Fp8Scales> s;
        DT_ASSERT_OK(Fp8ScaleSlots(*gpu, 3, &storage, &s));
        DT_ASSERT_OK(Fp8Amax(*gpu, x, &s[0].amax));
        DT_ASSERT_OK(Fp8Scale(*gpu, s[0].amax, f, &s[0].scale, &s[0].scale_inv));
        DT_ASSERT_OK(CastToFp8(*gpu, x, s[0].scale, f, &q1, &q1_t));
        DT_ASSERT_OK(BiasGrad(*gpu, x, &db_sep, /*accumulate=*/true));
        Fp8QuantizeOptions opts;
        opts.dbias = &db_fused;
        DT_ASSERT_OK(Fp8Quantize(*gpu, x, f, &s[1], &q2, &q2_t, opts));
        EXPECT_EQ(BytesOf(*gpu, q1), BytesOf(*gpu, q2)) << where << ": out";
        EXPECT_EQ(BytesOf(*gpu, q1_t), BytesOf(*gpu, q2_t)) << where << ": out_t";
        for (auto [t1, t2] : {std::pair<Tensor*, Tensor*>{&s[0].amax, &s[1].amax},
                              {&s[0].scale, &s[1].scale},
                              {&s[0].scale_inv, &s[1].scale_inv}}) {
          EXPECT_EQ(Bits(ScalarOf(*gpu, *t1)), Bits(ScalarOf(*gpu, *t2))) << where;
        }
        std::vector<double> a, b;
        DT_ASSERT_OK(Fetch(*gpu, db_sep, &a));
        DT_ASSERT_OK(Fetch(*gpu, db_fused, &b));
        EXPECT_LE(testing::MaxAbsDiff(b, a), 1e-5 * static_cast<double>(rows) * 3) << where << ": dbias";
        // A ready amax (the producer's) gives the same bytes as computing it.
        DT_ASSERT_OK(Fp8Amax(*gpu, x, &s[2].amax));
        Fp8QuantizeOptions ready;
        ready.amax_ready = true;
        DT_ASSERT_OK(Fp8Quantize(*gpu, x, f, &s[2], &q2, &q2_t, ready));
        EXPECT_EQ(BytesOf(*gpu, q1_t), BytesOf(*gpu, q2_t)) << where << ": out_t from a ready amax";
        EXPECT_EQ(Bits(ScalarOf(*gpu, s[0].scale_inv)), Bits(ScalarOf(*gpu, s[2].scale_inv))) << where;
      }
    }
  }
}
#endif  // DT_HAVE_CUDA

}  // namespace
}  // namespace dtrain::ops
