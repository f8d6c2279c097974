// Tests of models/ops/conv2d: closed forms, the im2col reference against the defining 7-loop sum, f64 gradient
// checks of backward data/filter, accumulate semantics, shape errors, and CPU-vs-cuDNN agreement with a
// documented tolerance (plus bitwise reproducibility and plan caching on the GPU).
#include <gtest/gtest.h>

#include <cmath>
#include <memory>
#include <vector>

#include "core/device_context.h"
#include "models/ops/conv2d.h"
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

}  // namespace
}  // namespace dtrain::ops
