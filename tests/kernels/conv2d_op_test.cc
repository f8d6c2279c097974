// Tests of kernels/conv2d: closed forms, the im2col reference against the defining 7-loop sum, f64 gradient
// checks of backward data/filter, accumulate semantics, shape errors, and CPU-vs-cuDNN agreement with a
// documented tolerance (plus bitwise reproducibility and plan caching on the GPU), for f32 NCHW and for bf16
// channels-last (NHWC) at the CNN's real geometries, batch 128 (train) and 1000 (eval).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/bf16.h"
#include "core/check.h"
#include "core/device_context.h"
#include "kernels/conv2d.h"
#include "tests/testing/grad_check.h"

namespace dtrain::ops {
namespace {

using testing::Fetch;
using testing::FetchBf16Bits;
using testing::MakeTensor;
using testing::RandomVector;

std::unique_ptr<DeviceContext> Cpu() {
  std::unique_ptr<DeviceContext> ctx;
  EXPECT_TRUE(DeviceContext::CreateCpu(&ctx).ok());
  return ctx;
}

std::vector<int64_t> XShape(const Conv2dGeometry& g) { return {g.n, g.c, g.h, g.w}; }
std::vector<int64_t> WShape(const Conv2dGeometry& g) { return {g.k, g.c, g.r, g.s}; }
std::vector<int64_t> YShape(const Conv2dGeometry& g) { return {g.n, g.k, g.out_h(), g.out_w()}; }

// The definition, straight: y[n,k,oy,ox] = sum_{c,r,s} w[k,c,r,s] * x[n,c,oy*st-pad+r,ox*st-pad+s].
std::vector<double> NaiveConv(const Conv2dGeometry& g, const std::vector<double>& x, const std::vector<double>& w) {
  const int64_t oh = g.out_h(), ow = g.out_w();
  std::vector<double> y(g.n * g.k * oh * ow, 0.0);
  for (int64_t n = 0; n < g.n; ++n)
    for (int64_t k = 0; k < g.k; ++k)
      for (int64_t oy = 0; oy < oh; ++oy)
        for (int64_t ox = 0; ox < ow; ++ox) {
          double sum = 0;
          for (int64_t c = 0; c < g.c; ++c)
            for (int64_t r = 0; r < g.r; ++r)
              for (int64_t s = 0; s < g.s; ++s) {
                const int64_t iy = oy * g.stride - g.pad + r, ix = ox * g.stride - g.pad + s;
                if (iy < 0 || iy >= g.h || ix < 0 || ix >= g.w) continue;
                sum += w[((k * g.c + c) * g.r + r) * g.s + s] * x[((n * g.c + c) * g.h + iy) * g.w + ix];
              }
          y[((n * g.k + k) * oh + oy) * ow + ox] = sum;
        }
  return y;
}

// Runs one direction on `ctx` with host vectors; `out_init` is the output's initial content (for accumulate).
enum class Dir { kForward, kData, kFilter };
void RunConv(DeviceContext& ctx, Conv2dCache* cache, Dir dir, DType dt, const Conv2dGeometry& g,
             const std::vector<double>& a, const std::vector<double>& b, const std::vector<double>& out_init,
             bool accumulate, std::vector<double>* out) {
  Tensor ta, tb, to;
  switch (dir) {
    case Dir::kForward:  // a = x, b = w
      DT_ASSERT_OK(MakeTensor(ctx, dt, XShape(g), a, &ta));
      DT_ASSERT_OK(MakeTensor(ctx, dt, WShape(g), b, &tb));
      DT_ASSERT_OK(MakeTensor(ctx, dt, YShape(g), out_init, &to));
      DT_ASSERT_OK(Conv2dForward(ctx, cache, ta, tb, g.stride, g.pad, &to, accumulate));
      break;
    case Dir::kData:  // a = dy, b = w
      DT_ASSERT_OK(MakeTensor(ctx, dt, YShape(g), a, &ta));
      DT_ASSERT_OK(MakeTensor(ctx, dt, WShape(g), b, &tb));
      DT_ASSERT_OK(MakeTensor(ctx, dt, XShape(g), out_init, &to));
      DT_ASSERT_OK(Conv2dBackwardData(ctx, cache, ta, tb, g.stride, g.pad, &to, accumulate));
      break;
    case Dir::kFilter:  // a = x, b = dy
      DT_ASSERT_OK(MakeTensor(ctx, dt, XShape(g), a, &ta));
      DT_ASSERT_OK(MakeTensor(ctx, dt, YShape(g), b, &tb));
      DT_ASSERT_OK(MakeTensor(ctx, dt, WShape(g), out_init, &to));
      DT_ASSERT_OK(Conv2dBackwardFilter(ctx, cache, ta, tb, g.stride, g.pad, &to, accumulate));
      break;
  }
  DT_ASSERT_OK(Fetch(ctx, to, out));
}

int64_t Numel(const std::vector<int64_t>& s) { return Tensor::NumelOf(s); }
std::vector<double> Nan(int64_t n) { return std::vector<double>(n, NAN); }  // poisoned output

// Geometries of the CNN (3x3 pad 1, stride 1/2; 1x1 stride-2 projection) plus odd, non-square corner cases.
std::vector<Conv2dGeometry> Geometries() {
  return {
      {2, 3, 5, 5, 4, 3, 3, 1, 1},  // 3x3 same
      {2, 3, 7, 7, 4, 3, 3, 2, 1},  // 3x3 stride 2, odd size
      {2, 4, 6, 6, 5, 1, 1, 2, 0},  // 1x1 stride-2 projection
      {1, 2, 4, 6, 3, 2, 3, 1, 0},  // non-square input and kernel, no padding
      {3, 1, 5, 4, 2, 3, 3, 2, 2},  // padding larger than needed
  };
}

TEST(Conv2dCpu, ClosedForm) {
  auto cpu = Cpu();
  Conv2dCache cache(cpu->allocator());
  const std::vector<double> x = {1, 2, 3, 4, 5, 6, 7, 8, 9}, w = {1, 1, 1, 1};
  for (DType dt : {DType::kF32, DType::kF64}) {
    std::vector<double> y;
    // 2x2 all-ones kernel over a 3x3 image: sums of the four 2x2 windows.
    ASSERT_NO_FATAL_FAILURE(
        RunConv(*cpu, &cache, Dir::kForward, dt, {1, 1, 3, 3, 1, 2, 2, 1, 0}, x, w, Nan(4), false, &y));
    EXPECT_EQ(y, (std::vector<double>{12, 16, 24, 28}));
    // Padding 1, stride 2: windows over the zero-padded 5x5 image at (0,0), (0,2), (2,0), (2,2).
    ASSERT_NO_FATAL_FAILURE(
        RunConv(*cpu, &cache, Dir::kForward, dt, {1, 1, 3, 3, 1, 2, 2, 2, 1}, x, w, Nan(4), false, &y));
    EXPECT_EQ(y, (std::vector<double>{1, 5, 11, 28}));
  }
}

TEST(Conv2dCpu, MatchesDefinition) {
  auto cpu = Cpu();
  Conv2dCache cache(cpu->allocator());
  uint64_t seed = 10;
  for (const Conv2dGeometry& g : Geometries()) {
    const auto x = RandomVector(Numel(XShape(g)), ++seed), w = RandomVector(Numel(WShape(g)), ++seed);
    std::vector<double> y;
    ASSERT_NO_FATAL_FAILURE(
        RunConv(*cpu, &cache, Dir::kForward, DType::kF64, g, x, w, Nan(Numel(YShape(g))), false, &y));
    EXPECT_LT(testing::MaxAbsDiff(y, NaiveConv(g, x, w)), 1e-12)
        << "geometry k" << g.r << "x" << g.s << " s" << g.stride;
  }
}

// loss = sum(v .* conv(x, w)): backward data must equal d loss/dx, backward filter d loss/dw (dy = v).
TEST(Conv2dGrad, FiniteDifferences) {
  auto cpu = Cpu();
  Conv2dCache cache(cpu->allocator());
  uint64_t seed = 100;
  for (const Conv2dGeometry& g : Geometries()) {
    const auto x = RandomVector(Numel(XShape(g)), ++seed), w = RandomVector(Numel(WShape(g)), ++seed);
    const auto v = RandomVector(Numel(YShape(g)), ++seed);
    std::vector<double> dx, dw;
    ASSERT_NO_FATAL_FAILURE(RunConv(*cpu, &cache, Dir::kData, DType::kF64, g, v, w, Nan(x.size()), false, &dx));
    ASSERT_NO_FATAL_FAILURE(RunConv(*cpu, &cache, Dir::kFilter, DType::kF64, g, x, v, Nan(w.size()), false, &dw));
    auto loss_x = [&](const std::vector<double>& xv) { return testing::Dot(v, NaiveConv(g, xv, w)); };
    auto loss_w = [&](const std::vector<double>& wv) { return testing::Dot(v, NaiveConv(g, x, wv)); };
    const auto rx = testing::CheckGradient(loss_x, x, dx);
    const auto rw = testing::CheckGradient(loss_w, w, dw);
    EXPECT_LT(rx.max_rel_error, 1e-6) << "dx: " << rx.ToString();
    EXPECT_LT(rw.max_rel_error, 1e-6) << "dw: " << rw.ToString();
  }
}

TEST(Conv2dCpu, AccumulateAddsToTheOutput) {
  auto cpu = Cpu();
  Conv2dCache cache(cpu->allocator());
  const Conv2dGeometry g = Geometries()[1];
  const auto x = RandomVector(Numel(XShape(g)), 1), w = RandomVector(Numel(WShape(g)), 2);
  const auto dy = RandomVector(Numel(YShape(g)), 3);
  const struct {
    Dir dir;
    const std::vector<double>&a, &b;
    int64_t n;
  } cases[] = {{Dir::kForward, x, w, Numel(YShape(g))},
               {Dir::kData, dy, w, Numel(XShape(g))},
               {Dir::kFilter, x, dy, Numel(WShape(g))}};
  for (const auto& c : cases) {
    const auto init = RandomVector(c.n, 4);
    std::vector<double> set, acc;
    ASSERT_NO_FATAL_FAILURE(RunConv(*cpu, &cache, c.dir, DType::kF64, g, c.a, c.b, Nan(c.n), false, &set));
    ASSERT_NO_FATAL_FAILURE(RunConv(*cpu, &cache, c.dir, DType::kF64, g, c.a, c.b, init, true, &acc));
    for (int64_t i = 0; i < c.n; ++i)
      EXPECT_NEAR(acc[i], init[i] + set[i], 1e-12) << "dir " << int(c.dir) << " i " << i;
  }
}

TEST(Conv2d, RejectsBadShapesNamingThem) {
  auto cpu = Cpu();
  Conv2dCache cache(cpu->allocator());
  Tensor x, w, wrong_c, y, bad_y, y64;
  DT_ASSERT_OK(MakeTensor(*cpu, DType::kF32, {2, 3, 5, 5}, Nan(150), &x));
  DT_ASSERT_OK(MakeTensor(*cpu, DType::kF32, {4, 3, 3, 3}, Nan(108), &w));
  DT_ASSERT_OK(MakeTensor(*cpu, DType::kF32, {4, 2, 3, 3}, Nan(72), &wrong_c));
  DT_ASSERT_OK(MakeTensor(*cpu, DType::kF32, {2, 4, 5, 5}, Nan(200), &y));
  DT_ASSERT_OK(MakeTensor(*cpu, DType::kF32, {2, 4, 4, 4}, Nan(128), &bad_y));
  DT_ASSERT_OK(MakeTensor(*cpu, DType::kF64, {2, 4, 5, 5}, Nan(200), &y64));
  DT_ASSERT_OK(Conv2dForward(*cpu, &cache, x, w, 1, 1, &y));
  Status st = Conv2dForward(*cpu, &cache, x, w, 1, 1, &bad_y);
  EXPECT_EQ(st.code(), Status::Code::kInvalidArgument);
  EXPECT_NE(st.message().find("f32[2,4,4,4]"), std::string::npos) << st.ToString();
  EXPECT_NE(st.message().find("[2,4,5,5]"), std::string::npos) << st.ToString();
  st = Conv2dForward(*cpu, &cache, x, wrong_c, 1, 1, &y);
  EXPECT_EQ(st.code(), Status::Code::kInvalidArgument);
  EXPECT_NE(st.message().find("f32[4,2,3,3]"), std::string::npos) << st.ToString();
  EXPECT_EQ(Conv2dForward(*cpu, &cache, x, w, 1, 1, &y64).code(), Status::Code::kInvalidArgument);
  EXPECT_EQ(Conv2dForward(*cpu, &cache, x, w, 0, 1, &y).code(), Status::Code::kInvalidArgument);
  EXPECT_EQ(Conv2dBackwardFilter(*cpu, &cache, x, bad_y, 1, 1, &w).code(), Status::Code::kInvalidArgument);
  EXPECT_EQ(Conv2dBackwardData(*cpu, &cache, y, w, 1, 1, nullptr).code(), Status::Code::kInvalidArgument);
}

// cuDNN (FMA math, no TF32) against the f32 CPU reference. Both round in fp32 but sum in different orders; the
// longest sums (backward filter of the 64-image case: N*OH*OW = 50176 terms) drift by ~sqrt(terms) * 2^-24
// ~ 1.3e-5 relative. We allow ||gpu - cpu|| / ||cpu|| <= 1e-4 and max |gpu - cpu| <= 1e-4 * max(1, max |cpu|):
// far below the O(1) errors of a wrong index, and TF32 (2^-11 per product) would exceed it on the large cases.
TEST(Conv2dCuda, MatchesCpu) {
  DT_SKIP_WITHOUT_CUDA();
  auto cpu = Cpu();
  std::unique_ptr<DeviceContext> gpu;
  DT_ASSERT_OK(DeviceContext::CreateCuda(0, &gpu));
  Conv2dCache cpu_cache(cpu->allocator()), gpu_cache(gpu->allocator());
  std::vector<Conv2dGeometry> geos = Geometries();
  geos.push_back({64, 32, 28, 28, 32, 3, 3, 1, 1});  // the CNN's first stage at a real batch
  geos.push_back({64, 32, 28, 28, 64, 1, 1, 2, 0});  // its first projection
  uint64_t seed = 1000;
  for (const Conv2dGeometry& g : geos) {
    const auto x = RandomVector(Numel(XShape(g)), ++seed), w = RandomVector(Numel(WShape(g)), ++seed);
    const auto dy = RandomVector(Numel(YShape(g)), ++seed);
    for (bool accumulate : {false, true}) {
      const struct {
        Dir dir;
        const std::vector<double>&a, &b;
        int64_t n;
      } cases[] = {{Dir::kForward, x, w, Numel(YShape(g))},
                   {Dir::kData, dy, w, Numel(XShape(g))},
                   {Dir::kFilter, x, dy, Numel(WShape(g))}};
      for (const auto& c : cases) {
        const auto init = accumulate ? RandomVector(c.n, ++seed) : Nan(c.n);
        std::vector<double> ref, got;
        ASSERT_NO_FATAL_FAILURE(RunConv(*cpu, &cpu_cache, c.dir, DType::kF32, g, c.a, c.b, init, accumulate, &ref));
        ASSERT_NO_FATAL_FAILURE(RunConv(*gpu, &gpu_cache, c.dir, DType::kF32, g, c.a, c.b, init, accumulate, &got));
        EXPECT_LE(testing::MaxAbsDiff(got, ref), 1e-4 * testing::Scale(ref))
            << "dir " << int(c.dir) << " n" << g.n << " c" << g.c << " k" << g.k << " r" << g.r << " s" << g.stride;
        EXPECT_LE(testing::RelFrobenius(got, ref), 1e-4) << "dir " << int(c.dir);
      }
    }
  }
  EXPECT_EQ(gpu_cache.num_plans(), static_cast<int64_t>(geos.size()));  // one plan per geometry, reused
  EXPECT_EQ(cpu_cache.num_plans(), 0);
}

// Deterministic algorithms only: the same backward twice gives bit-identical gradients.
TEST(Conv2dCuda, BackwardIsBitwiseReproducible) {
  DT_SKIP_WITHOUT_CUDA();
  std::unique_ptr<DeviceContext> gpu;
  DT_ASSERT_OK(DeviceContext::CreateCuda(0, &gpu));
  Conv2dCache cache(gpu->allocator());
  const Conv2dGeometry g{128, 64, 14, 14, 64, 3, 3, 1, 1};
  const auto x = RandomVector(Numel(XShape(g)), 1), w = RandomVector(Numel(WShape(g)), 2);
  const auto dy = RandomVector(Numel(YShape(g)), 3);
  std::vector<double> dw1, dw2, dx1, dx2;
  ASSERT_NO_FATAL_FAILURE(RunConv(*gpu, &cache, Dir::kFilter, DType::kF32, g, x, dy, Nan(w.size()), false, &dw1));
  ASSERT_NO_FATAL_FAILURE(RunConv(*gpu, &cache, Dir::kFilter, DType::kF32, g, x, dy, Nan(w.size()), false, &dw2));
  ASSERT_NO_FATAL_FAILURE(RunConv(*gpu, &cache, Dir::kData, DType::kF32, g, dy, w, Nan(x.size()), false, &dx1));
  ASSERT_NO_FATAL_FAILURE(RunConv(*gpu, &cache, Dir::kData, DType::kF32, g, dy, w, Nan(x.size()), false, &dx2));
  EXPECT_EQ(dw1, dw2);
  EXPECT_EQ(dx1, dx2);
  EXPECT_EQ(cache.num_plans(), 1);
}

// ---- bf16, channels last (NHWC) --------------------------------------------------------------------------------

// The CNN's convolutions at its training batch: the stem (C = 1), the 3x3 convs of each stage, the stride-2 3x3
// and 1x1 (projection) convs between stages.
std::vector<Conv2dGeometry> CnnGeometries() {
  return {
      {128, 1, 28, 28, 32, 3, 3, 1, 1},    // stem, C = 1
      {128, 32, 28, 28, 32, 3, 3, 1, 1},   // stage 1
      {128, 32, 28, 28, 64, 3, 3, 2, 1},   // 28 -> 14
      {128, 32, 28, 28, 64, 1, 1, 2, 0},   // projection 28 -> 14
      {128, 64, 14, 14, 64, 3, 3, 1, 1},   // stage 2
      {128, 64, 14, 14, 128, 3, 3, 2, 1},  // 14 -> 7
      {128, 64, 14, 14, 128, 1, 1, 2, 0},  // projection 14 -> 7
      {128, 128, 7, 7, 128, 3, 3, 1, 1},   // stage 3
  };
}

// A 4-D tensor by its NCHW sizes (x: N,C,H,W; w: K,C,R,S; y: N,K,OH,OW); its NHWC shape is [d0,d2,d3,d1].
struct Dims4 {
  int64_t d0, d1, d2, d3;
  std::vector<int64_t> nhwc() const { return {d0, d2, d3, d1}; }
  int64_t numel() const { return d0 * d1 * d2 * d3; }
};
Dims4 XDims(const Conv2dGeometry& g) { return {g.n, g.c, g.h, g.w}; }
Dims4 WDims(const Conv2dGeometry& g) { return {g.k, g.c, g.r, g.s}; }
Dims4 YDims(const Conv2dGeometry& g) { return {g.n, g.k, g.out_h(), g.out_w()}; }

// Host permutations, written out independently of kernels/layout.
std::vector<double> ToNhwc(const Dims4& d, const std::vector<double>& v) {
  std::vector<double> out(v.size());
  for (int64_t a = 0; a < d.d0; ++a)
    for (int64_t b = 0; b < d.d1; ++b)
      for (int64_t c = 0; c < d.d2; ++c)
        for (int64_t e = 0; e < d.d3; ++e)
          out[((a * d.d2 + c) * d.d3 + e) * d.d1 + b] = v[((a * d.d1 + b) * d.d2 + c) * d.d3 + e];
  return out;
}
std::vector<double> ToNchw(const Dims4& d, const std::vector<double>& v) {
  std::vector<double> out(v.size());
  for (int64_t a = 0; a < d.d0; ++a)
    for (int64_t b = 0; b < d.d1; ++b)
      for (int64_t c = 0; c < d.d2; ++c)
        for (int64_t e = 0; e < d.d3; ++e)
          out[((a * d.d1 + b) * d.d2 + c) * d.d3 + e] = v[((a * d.d2 + c) * d.d3 + e) * d.d1 + b];
  return out;
}

double RoundBf16(double x) { return Bf16BitsToF32(RoundBf16Rne(static_cast<float>(x))); }
std::vector<double> RandomBf16(int64_t n, uint64_t seed) {
  std::vector<double> v = RandomVector(n, seed);
  for (double& x : v) x = RoundBf16(x);
  return v;
}

// Dims of the inputs a, b and the output of a direction (forward: x, w -> y; data: dy, w -> dx; filter: x, dy -> dw).
struct DirDims {
  Dims4 a, b, out;
};
DirDims DimsOf(Dir dir, const Conv2dGeometry& g) {
  switch (dir) {
    case Dir::kForward:
      return {XDims(g), WDims(g), YDims(g)};
    case Dir::kData:
      return {YDims(g), WDims(g), XDims(g)};
    case Dir::kFilter:
      break;
  }
  return {XDims(g), YDims(g), WDims(g)};
}

// Runs one direction in bf16 NHWC on the GPU. a, b, init: bf16-exact values in NCHW order (the test's reference
// order); `init` is the output's initial content (NaN poison when null). Returns the output in NCHW order and its
// raw NHWC bits.
void RunConvBf16(DeviceContext& gpu, Conv2dCache* cache, Dir dir, const Conv2dGeometry& g, const std::vector<double>& a,
                 const std::vector<double>& b, const std::vector<double>* init, bool accumulate,
                 std::vector<double>* out_nchw, std::vector<uint16_t>* out_bits = nullptr) {
  const DirDims d = DimsOf(dir, g);
  Tensor ta, tb, to;
  DT_ASSERT_OK(MakeTensor(gpu, DType::kBF16, d.a.nhwc(), ToNhwc(d.a, a), &ta));
  DT_ASSERT_OK(MakeTensor(gpu, DType::kBF16, d.b.nhwc(), ToNhwc(d.b, b), &tb));
  if (init != nullptr) {
    DT_ASSERT_OK(MakeTensor(gpu, DType::kBF16, d.out.nhwc(), ToNhwc(d.out, *init), &to));
  } else {
    DT_ASSERT_OK(MakeTensor(gpu, DType::kBF16, d.out.nhwc(), std::vector<double>(d.out.numel(), NAN), &to));
  }
  switch (dir) {
    case Dir::kForward:
      DT_ASSERT_OK(Conv2dForward(gpu, cache, ta, tb, g.stride, g.pad, &to, accumulate));
      break;
    case Dir::kData:
      DT_ASSERT_OK(Conv2dBackwardData(gpu, cache, ta, tb, g.stride, g.pad, &to, accumulate));
      break;
    case Dir::kFilter:
      DT_ASSERT_OK(Conv2dBackwardFilter(gpu, cache, ta, tb, g.stride, g.pad, &to, accumulate));
      break;
  }
  std::vector<uint16_t> bits;
  DT_ASSERT_OK(FetchBf16Bits(gpu, to, &bits));
  std::vector<double> nhwc(bits.size());
  for (size_t i = 0; i < bits.size(); ++i) nhwc[i] = Bf16BitsToF32(bits[i]);
  *out_nchw = ToNchw(d.out, nhwc);
  if (out_bits != nullptr) *out_bits = std::move(bits);
}

// The f64 CPU reference (NCHW, overwrite).
std::vector<double> RefConv(Dir dir, const Conv2dGeometry& g, const std::vector<double>& a,
                            const std::vector<double>& b) {
  std::vector<double> out(static_cast<size_t>(DimsOf(dir, g).out.numel()));
  switch (dir) {
    case Dir::kForward:
      Conv2dForwardCpu<double>(out.data(), a.data(), b.data(), g, false);
      break;
    case Dir::kData:
      Conv2dBackwardDataCpu<double>(out.data(), a.data(), b.data(), g, false);
      break;
    case Dir::kFilter:
      Conv2dBackwardFilterCpu<double>(out.data(), a.data(), b.data(), g, false);
      break;
  }
  return out;
}

std::string Describe(Dir dir, const Conv2dGeometry& g, bool accumulate) {
  const char* names[] = {"forward", "backward data", "backward filter"};
  return std::string(names[static_cast<int>(dir)]) + (accumulate ? " (accumulate)" : "") + " n" + std::to_string(g.n) +
         " c" + std::to_string(g.c) + " " + std::to_string(g.h) + "x" + std::to_string(g.w) + " k" +
         std::to_string(g.k) + " " + std::to_string(g.r) + "x" + std::to_string(g.s) + " stride " +
         std::to_string(g.stride) + " pad " + std::to_string(g.pad);
}

// Tolerances of bf16 against the f64 reference on the same bf16 inputs. Products of bf16 values are exact in fp32
// and cuDNN sums them in fp32 (relative error ~ terms * 2^-24, at most 1e-3 for the longest sum here, 100352 terms
// of backward filter, and far less in practice); the output is then rounded once to bf16 (8 significant bits:
// |error| <= 2^-8 |y|, ~2^-8/sqrt(3) ~ 2e-3 rms relative). With accumulate there may be a second rounding (the
// conv result, then its sum with the old output). So:
//   relative Frobenius ||gpu - ref|| / ||ref|| <= 1e-2 (expected ~1.5e-3),
//   max |gpu - ref| <= 2^-6 * max(1, max |ref|) (four half-ulps of the largest value),
// both orders of magnitude below the O(1) error of a wrong index or layout, and of fp32 inputs mistaken for bf16.
constexpr double kBf16RelFro = 1e-2;
constexpr double kBf16MaxAbs = 1.0 / 64;

void ExpectBf16Close(const std::vector<double>& got, const std::vector<double>& ref, const std::string& what) {
  EXPECT_LE(testing::RelFrobenius(got, ref), kBf16RelFro) << what;
  EXPECT_LE(testing::MaxAbsDiff(got, ref), kBf16MaxAbs * testing::Scale(ref)) << what;
}

// Every direction, overwrite (NaN-poisoned output) and accumulate, at the small odd geometries (channel counts that
// are not multiples of 8) and the CNN's real ones, against the f64 reference.
TEST(Conv2dCuda, Bf16NhwcMatchesCpuF64) {
  DT_SKIP_WITHOUT_CUDA();
  std::unique_ptr<DeviceContext> gpu;
  DT_ASSERT_OK(DeviceContext::CreateCuda(0, &gpu));
  Conv2dCache cache(gpu->allocator());
  std::vector<Conv2dGeometry> geos = Geometries();
  for (const Conv2dGeometry& g : CnnGeometries()) geos.push_back(g);
  uint64_t seed = 5000;
  for (const Conv2dGeometry& g : geos) {
    const auto x = RandomBf16(XDims(g).numel(), ++seed), w = RandomBf16(WDims(g).numel(), ++seed);
    const auto dy = RandomBf16(YDims(g).numel(), ++seed);
    for (Dir dir : {Dir::kForward, Dir::kData, Dir::kFilter}) {
      const std::vector<double>& a = dir == Dir::kData ? dy : x;
      const std::vector<double>& b = dir == Dir::kForward || dir == Dir::kData ? w : dy;
      const std::vector<double> ref = RefConv(dir, g, a, b);
      std::vector<double> got;
      ASSERT_NO_FATAL_FAILURE(RunConvBf16(*gpu, &cache, dir, g, a, b, nullptr, false, &got));
      ExpectBf16Close(got, ref, Describe(dir, g, false));

      const auto init = RandomBf16(static_cast<int64_t>(ref.size()), ++seed);
      std::vector<double> want(ref.size());
      for (size_t i = 0; i < ref.size(); ++i) want[i] = init[i] + ref[i];
      ASSERT_NO_FATAL_FAILURE(RunConvBf16(*gpu, &cache, dir, g, a, b, &init, true, &got));
      ExpectBf16Close(got, want, Describe(dir, g, true));
    }
  }
  EXPECT_EQ(cache.num_plans(), static_cast<int64_t>(geos.size()));  // one plan per geometry, reused
}

// The eval batch (1000 images) plans its own algorithms; images are independent in the forward, so the first and
// last 8 images are checked against the reference on just those images.
TEST(Conv2dCuda, Bf16EvalBatchForward) {
  DT_SKIP_WITHOUT_CUDA();
  std::unique_ptr<DeviceContext> gpu;
  DT_ASSERT_OK(DeviceContext::CreateCuda(0, &gpu));
  Conv2dCache cache(gpu->allocator());
  uint64_t seed = 7000;
  for (Conv2dGeometry g : {CnnGeometries()[0], CnnGeometries()[3], CnnGeometries()[7]}) {
    g.n = 1000;
    const auto x = RandomBf16(XDims(g).numel(), ++seed), w = RandomBf16(WDims(g).numel(), ++seed);
    std::vector<double> got;
    ASSERT_NO_FATAL_FAILURE(RunConvBf16(*gpu, &cache, Dir::kForward, g, x, w, nullptr, false, &got));
    Conv2dGeometry g8 = g;
    g8.n = 8;
    const int64_t x_img = g.c * g.h * g.w, y_img = g.k * g.out_h() * g.out_w();
    for (int64_t first : {int64_t{0}, g.n - 8}) {
      const std::vector<double> xs(x.begin() + first * x_img, x.begin() + (first + 8) * x_img);
      const std::vector<double> ref = RefConv(Dir::kForward, g8, xs, w);
      const std::vector<double> part(got.begin() + first * y_img, got.begin() + (first + 8) * y_img);
      ExpectBf16Close(part, ref, Describe(Dir::kForward, g, false) + ", images from " + std::to_string(first));
    }
  }
  EXPECT_EQ(cache.num_plans(), 3);
}

// Deterministic engines: each direction, run twice with two caches (the graph API's heuristics choose the same plan
// again, non-deterministic engines deselected), gives bit-identical bf16 results at every CNN geometry, with and
// without accumulate.
TEST(Conv2dCuda, Bf16IsBitwiseReproducible) {
  DT_SKIP_WITHOUT_CUDA();
  std::unique_ptr<DeviceContext> gpu;
  DT_ASSERT_OK(DeviceContext::CreateCuda(0, &gpu));
  Conv2dCache cache1(gpu->allocator()), cache2(gpu->allocator());
  uint64_t seed = 9000;
  for (const Conv2dGeometry& g : CnnGeometries()) {
    const auto x = RandomBf16(XDims(g).numel(), ++seed), w = RandomBf16(WDims(g).numel(), ++seed);
    const auto dy = RandomBf16(YDims(g).numel(), ++seed);
    for (Dir dir : {Dir::kForward, Dir::kData, Dir::kFilter}) {
      const std::vector<double>& a = dir == Dir::kData ? dy : x;
      const std::vector<double>& b = dir == Dir::kForward || dir == Dir::kData ? w : dy;
      const auto init = RandomBf16(DimsOf(dir, g).out.numel(), ++seed);
      for (bool accumulate : {false, true}) {
        const std::vector<double>* in = accumulate ? &init : nullptr;
        std::vector<double> v1, v2;
        std::vector<uint16_t> bits1, bits2;
        ASSERT_NO_FATAL_FAILURE(RunConvBf16(*gpu, &cache1, dir, g, a, b, in, accumulate, &v1, &bits1));
        ASSERT_NO_FATAL_FAILURE(RunConvBf16(*gpu, &cache2, dir, g, a, b, in, accumulate, &v2, &bits2));
        EXPECT_TRUE(bits1 == bits2) << Describe(dir, g, accumulate) << ": not bitwise reproducible";
      }
    }
  }
  EXPECT_EQ(cache1.num_plans(), static_cast<int64_t>(CnnGeometries().size()));
}

// The plan key includes the dtype: one geometry in f32 (NCHW) and bf16 (NHWC) through one cache gives two plans,
// each with its own descriptors, and both still agree with the reference.
TEST(Conv2dCuda, F32AndBf16OfOneGeometryArePlannedApart) {
  DT_SKIP_WITHOUT_CUDA();
  auto cpu = Cpu();
  std::unique_ptr<DeviceContext> gpu;
  DT_ASSERT_OK(DeviceContext::CreateCuda(0, &gpu));
  Conv2dCache cache(gpu->allocator()), cpu_cache(cpu->allocator());
  const Conv2dGeometry g{16, 32, 14, 14, 64, 3, 3, 2, 1};
  const auto x = RandomBf16(XDims(g).numel(), 1), w = RandomBf16(WDims(g).numel(), 2);
  std::vector<double> f32, bf16, ref;
  ASSERT_NO_FATAL_FAILURE(
      RunConv(*gpu, &cache, Dir::kForward, DType::kF32, g, x, w, Nan(YDims(g).numel()), false, &f32));
  EXPECT_EQ(cache.num_plans(), 1);
  ASSERT_NO_FATAL_FAILURE(RunConvBf16(*gpu, &cache, Dir::kForward, g, x, w, nullptr, false, &bf16));
  EXPECT_EQ(cache.num_plans(), 2);
  ASSERT_NO_FATAL_FAILURE(
      RunConv(*gpu, &cache, Dir::kForward, DType::kF32, g, x, w, Nan(YDims(g).numel()), false, &f32));
  EXPECT_EQ(cache.num_plans(), 2);
  ref = RefConv(Dir::kForward, g, x, w);
  EXPECT_LE(testing::RelFrobenius(f32, ref), 1e-5);  // fp32 FMA on bf16-exact inputs
  ExpectBf16Close(bf16, ref, "bf16");
}

// bf16 shapes are read as NHWC. The shape checks come before the device/dtype support check, so this runs on the
// CPU (where bf16 itself is then refused).
TEST(Conv2d, Bf16ShapesAreNhwc) {
  auto cpu = Cpu();
  Conv2dCache cache(cpu->allocator());
  const auto make = [&](const std::vector<int64_t>& shape, Tensor* t) {
    return Tensor::Empty(shape, DType::kBF16, cpu->allocator(), t);
  };
  Tensor x, w, y, y_nchw, w_kcrs, y_f32;
  DT_ASSERT_OK(make({2, 5, 5, 3}, &x));       // N,H,W,C
  DT_ASSERT_OK(make({4, 3, 3, 3}, &w));       // K,R,S,C
  DT_ASSERT_OK(make({2, 3, 3, 4}, &y));       // N,OH,OW,K for stride 2 pad 1
  DT_ASSERT_OK(make({2, 4, 3, 3}, &y_nchw));  // the NCHW shape of y
  DT_ASSERT_OK(make({4, 3, 3, 2}, &w_kcrs));  // C = 2 in the last dim: does not match x's C = 3
  DT_ASSERT_OK(Tensor::Empty({2, 3, 3, 4}, DType::kF32, cpu->allocator(), &y_f32));
  // Right shapes: only the device is wrong.
  Status st = Conv2dForward(*cpu, &cache, x, w, 2, 1, &y);
  EXPECT_EQ(st.code(), Status::Code::kInvalidArgument);
  EXPECT_NE(st.message().find("CPU supports f32/f64"), std::string::npos) << st.ToString();
  st = Conv2dBackwardData(*cpu, &cache, y, w, 2, 1, &x);
  EXPECT_NE(st.message().find("CPU supports f32/f64"), std::string::npos) << st.ToString();
  st = Conv2dBackwardFilter(*cpu, &cache, x, y, 2, 1, &w);
  EXPECT_NE(st.message().find("CPU supports f32/f64"), std::string::npos) << st.ToString();
  // NCHW y: named, with the NHWC shape it should have.
  st = Conv2dForward(*cpu, &cache, x, w, 2, 1, &y_nchw);
  EXPECT_EQ(st.code(), Status::Code::kInvalidArgument);
  EXPECT_NE(st.message().find("bf16[2,4,3,3]"), std::string::npos) << st.ToString();
  EXPECT_NE(st.message().find("should be [2,3,3,4]"), std::string::npos) << st.ToString();
  EXPECT_NE(st.message().find("NHWC"), std::string::npos) << st.ToString();
  st = Conv2dBackwardData(*cpu, &cache, y_nchw, w, 2, 1, &x);
  EXPECT_NE(st.message().find("bf16[2,4,3,3]"), std::string::npos) << st.ToString();
  // Filter channels are its last dim.
  st = Conv2dForward(*cpu, &cache, x, w_kcrs, 2, 1, &y);
  EXPECT_EQ(st.code(), Status::Code::kInvalidArgument);
  EXPECT_NE(st.message().find("bf16[4,3,3,2]"), std::string::npos) << st.ToString();
  // Mixed dtypes.
  st = Conv2dForward(*cpu, &cache, x, w, 2, 1, &y_f32);
  EXPECT_EQ(st.code(), Status::Code::kInvalidArgument);
  EXPECT_NE(st.message().find("dtypes differ"), std::string::npos) << st.ToString();
}

TEST(Conv2dCuda, Bf16RejectsNchwShapes) {
  DT_SKIP_WITHOUT_CUDA();
  std::unique_ptr<DeviceContext> gpu;
  DT_ASSERT_OK(DeviceContext::CreateCuda(0, &gpu));
  Conv2dCache cache(gpu->allocator());
  const Conv2dGeometry g{2, 3, 5, 5, 4, 3, 3, 1, 1};
  Tensor x, w, y, y_nchw;
  DT_ASSERT_OK(MakeTensor(*gpu, DType::kBF16, {2, 5, 5, 3}, RandomBf16(150, 1), &x));
  DT_ASSERT_OK(MakeTensor(*gpu, DType::kBF16, {4, 3, 3, 3}, RandomBf16(108, 2), &w));
  DT_ASSERT_OK(MakeTensor(*gpu, DType::kBF16, {2, 5, 5, 4}, std::vector<double>(200, 0.0), &y));
  DT_ASSERT_OK(MakeTensor(*gpu, DType::kBF16, {2, 4, 5, 5}, std::vector<double>(200, 0.0), &y_nchw));
  DT_ASSERT_OK(Conv2dForward(*gpu, &cache, x, w, g.stride, g.pad, &y));
  const Status st = Conv2dForward(*gpu, &cache, x, w, g.stride, g.pad, &y_nchw);
  EXPECT_EQ(st.code(), Status::Code::kInvalidArgument);
  EXPECT_NE(st.message().find("bf16[2,4,5,5]"), std::string::npos) << st.ToString();
  EXPECT_NE(st.message().find("[2,5,5,4]"), std::string::npos) << st.ToString();
  EXPECT_EQ(cache.num_plans(), 1);  // the failed call planned nothing
}

}  // namespace
}  // namespace dtrain::ops
