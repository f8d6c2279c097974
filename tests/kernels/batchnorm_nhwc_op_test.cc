// Tests of kernels/batchnorm_nhwc (channels-last BatchNorm fused with residual add and ReLU). CPU: closed forms,
// agreement with the NCHW op (batchnorm.h) on a transposed map, f64 gradient checks of x, gamma, beta and the
// residual (dg) with and without ReLU, accumulate/overwrite semantics, in-place use, shape and dtype errors. CUDA
// (bf16 activations, f32 per-channel): against the CPU f64 reference run on the same bf16-rounded inputs, for the
// CNN's shapes (training batch 128, eval batch 1000), odd channel counts (scalar path), more than 2048 channels (two
// column slabs) and misaligned pointers; running statistics, accumulate semantics, in-place use, bitwise
// reproducibility and dtype errors. CUDA tests skip without a GPU.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "core/check.h"
#include "core/device_context.h"
#include "kernels/batchnorm.h"
#include "kernels/batchnorm_nhwc.h"
#include "tests/testing/grad_check.h"
#include "tests/testing/half_round.h"

namespace dtrain::ops {
namespace {

using testing::Fetch;
using testing::MakeTensor;
using testing::RandomVector;
using Shape = std::vector<int64_t>;
using Vec = std::vector<double>;

// Where a run happens: the context, the dtype of the [..., C] tensors and of the per-channel ones, and whether the
// [..., C] tensors start one element (2 bytes) into their allocation (misaligned: the CUDA scalar path).
struct Dev {
  DeviceContext* ctx;
  DType act, par;
  bool misalign = false;
};

// A tensor of `dt` on ctx holding v (bf16: rounded to nearest even). `misalign`: the tensor starts one element into
// its allocation (not 16-byte aligned: the CUDA scalar path).
Status Make(DeviceContext& ctx, DType dt, const Shape& shape, const Vec& v, Tensor* out, bool misalign = false) {
  return misalign ? testing::MakeTensorAt(ctx, dt, shape, v, 1, out) : MakeTensor(ctx, dt, shape, v, out);
}

Vec Bf16(Vec v) {
  for (double& x : v) x = testing::RoundToBf16(x);
  return v;
}
Vec F32(Vec v) {
  for (double& x : v) x = static_cast<float>(x);
  return v;
}

// Host copy of one BN layer's per-channel state (f32-representable values, so every device starts equal).
struct HostBn {
  Vec gamma, beta, running_mean, running_var, save_mean, save_inv_std;
};

HostBn Fresh(int64_t c, uint64_t seed) {
  HostBn h;
  h.gamma = F32(RandomVector(c, seed, 0.5, 1.5));
  h.beta = F32(RandomVector(c, seed + 1));
  h.running_mean = F32(RandomVector(c, seed + 2));
  h.running_var = F32(RandomVector(c, seed + 3, 0.5, 2.0));
  return h;
}

void ToDevice(const Dev& d, const HostBn& h, BatchNormTensors* t) {
  const int64_t c = static_cast<int64_t>(h.gamma.size());
  const Vec nan(c, NAN);
  DT_ASSERT_OK(Make(*d.ctx, d.par, {c}, h.gamma, &t->gamma));
  DT_ASSERT_OK(Make(*d.ctx, d.par, {c}, h.beta, &t->beta));
  DT_ASSERT_OK(Make(*d.ctx, d.par, {c}, h.running_mean, &t->running_mean));
  DT_ASSERT_OK(Make(*d.ctx, d.par, {c}, h.running_var, &t->running_var));
  DT_ASSERT_OK(Make(*d.ctx, d.par, {c}, h.save_mean.empty() ? nan : h.save_mean, &t->save_mean));
  DT_ASSERT_OK(Make(*d.ctx, d.par, {c}, h.save_inv_std.empty() ? nan : h.save_inv_std, &t->save_inv_std));
}

void ToHost(const Dev& d, const BatchNormTensors& t, HostBn* h) {
  DT_ASSERT_OK(Fetch(*d.ctx, t.running_mean, &h->running_mean));
  DT_ASSERT_OK(Fetch(*d.ctx, t.running_var, &h->running_var));
  DT_ASSERT_OK(Fetch(*d.ctx, t.save_mean, &h->save_mean));
  DT_ASSERT_OK(Fetch(*d.ctx, t.save_inv_std, &h->save_inv_std));
}

// Training forward: y = act(BN(x) + residual) (residual when non-null); bn updated in place.
void Train(const Dev& d, const Shape& shape, const Vec& x, const Vec* residual, bool relu, HostBn* bn, Vec* y) {
  BatchNormTensors t;
  ASSERT_NO_FATAL_FAILURE(ToDevice(d, *bn, &t));
  Tensor tx, tr, ty;
  DT_ASSERT_OK(Make(*d.ctx, d.act, shape, x, &tx, d.misalign));
  if (residual != nullptr) DT_ASSERT_OK(Make(*d.ctx, d.act, shape, *residual, &tr, d.misalign));
  DT_ASSERT_OK(Make(*d.ctx, d.act, shape, Vec(x.size(), NAN), &ty, d.misalign));
  DT_ASSERT_OK(BatchNormNhwcForwardTraining(*d.ctx, tx, &t, residual ? &tr : nullptr, relu, &ty));
  DT_ASSERT_OK(Fetch(*d.ctx, ty, y));
  ASSERT_NO_FATAL_FAILURE(ToHost(d, t, bn));
}

void Eval(const Dev& d, const Shape& shape, const Vec& x, const Vec* residual, bool relu, const HostBn& bn, Vec* y) {
  BatchNormTensors t;
  ASSERT_NO_FATAL_FAILURE(ToDevice(d, bn, &t));
  Tensor tx, tr, ty;
  DT_ASSERT_OK(Make(*d.ctx, d.act, shape, x, &tx, d.misalign));
  if (residual != nullptr) DT_ASSERT_OK(Make(*d.ctx, d.act, shape, *residual, &tr, d.misalign));
  DT_ASSERT_OK(Make(*d.ctx, d.act, shape, Vec(x.size(), NAN), &ty, d.misalign));
  DT_ASSERT_OK(BatchNormNhwcForwardEval(*d.ctx, tx, t, residual ? &tr : nullptr, relu, &ty));
  DT_ASSERT_OK(Fetch(*d.ctx, ty, y));
}

struct Grads {
  Vec dx, dg, dgamma, dbeta;
};

// Backward with bn's saved statistics; out (the forward's y) given iff relu; dg requested iff want_dg;
// dgamma/dbeta start at dparam_init. dx and dg start as NaN (they must be overwritten).
void Backward(const Dev& d, const Shape& shape, const Vec& x, const Vec& dout, const Vec* out, const HostBn& bn,
              const Vec& dparam_init, bool accumulate, bool want_dg, Grads* g) {
  BatchNormTensors t;
  ASSERT_NO_FATAL_FAILURE(ToDevice(d, bn, &t));
  const int64_t c = static_cast<int64_t>(bn.gamma.size());
  Tensor tx, tdout, tout, tdx, tdg, tdgamma, tdbeta;
  DT_ASSERT_OK(Make(*d.ctx, d.act, shape, x, &tx, d.misalign));
  DT_ASSERT_OK(Make(*d.ctx, d.act, shape, dout, &tdout, d.misalign));
  if (out != nullptr) DT_ASSERT_OK(Make(*d.ctx, d.act, shape, *out, &tout, d.misalign));
  DT_ASSERT_OK(Make(*d.ctx, d.act, shape, Vec(x.size(), NAN), &tdx, d.misalign));
  DT_ASSERT_OK(Make(*d.ctx, d.act, shape, Vec(x.size(), NAN), &tdg, d.misalign));
  DT_ASSERT_OK(Make(*d.ctx, d.par, {c}, dparam_init, &tdgamma));
  DT_ASSERT_OK(Make(*d.ctx, d.par, {c}, dparam_init, &tdbeta));
  DT_ASSERT_OK(BatchNormNhwcBackward(*d.ctx, tx, tdout, out ? &tout : nullptr, t, &tdx, want_dg ? &tdg : nullptr,
                                     &tdgamma, &tdbeta, accumulate));
  DT_ASSERT_OK(Fetch(*d.ctx, tdx, &g->dx));
  if (want_dg) DT_ASSERT_OK(Fetch(*d.ctx, tdg, &g->dg));
  DT_ASSERT_OK(Fetch(*d.ctx, tdgamma, &g->dgamma));
  DT_ASSERT_OK(Fetch(*d.ctx, tdbeta, &g->dbeta));
}

std::unique_ptr<DeviceContext> Cpu() {
  std::unique_ptr<DeviceContext> ctx;
  EXPECT_TRUE(DeviceContext::CreateCpu(&ctx).ok());
  return ctx;
}

// [n, h, w, c] -> [n, c, h, w]
Vec ToNchw(const Vec& v, int64_t n, int64_t hw, int64_t c) {
  Vec out(v.size());
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t p = 0; p < hw; ++p) {
      for (int64_t ch = 0; ch < c; ++ch) out[(i * c + ch) * hw + p] = v[(i * hw + p) * c + ch];
    }
  }
  return out;
}

// Element-wise |got - want| <= rel * |want| + abs, reporting the first few failures.
void ExpectClose(const Vec& got, const Vec& want, double rel, double abs, const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  int bad = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    const double tol = rel * std::fabs(want[i]) + abs;
    if (!(std::fabs(got[i] - want[i]) <= tol) && ++bad <= 5) {
      ADD_FAILURE() << what << "[" << i << "]: got " << got[i] << ", want " << want[i] << " (tol " << tol << ")";
    }
  }
  EXPECT_EQ(bad, 0) << what << ": " << bad << " of " << got.size() << " values out of tolerance";
}

// ---- CPU reference ---------------------------------------------------------------------------------------------

TEST(BatchNormNhwcCpu, ClosedForm) {
  auto cpu = Cpu();
  // [1, 2, 2, 2]: channel 0 = {1, 2, 3, 4} (mean 2.5, biased var 1.25, unbiased 5/3), channel 1 = {-1, 1, -1, 1}
  // (mean 0, var 1, unbiased 4/3), interleaved channels-last.
  const Shape shape = {1, 2, 2, 2};
  const Vec x = {1, -1, 2, 1, 3, -1, 4, 1}, res = {0.5, 0, -3, 0.25, 0, 2, 1, -1};
  const double eps = kBatchNormEps, mom = kBatchNormMomentum;  // the f32 constants, exactly
  const double is0 = 1.0 / std::sqrt(1.25 + eps), is1 = 1.0 / std::sqrt(1.0 + eps);
  for (DType dt : {DType::kF32, DType::kF64}) {
    const Dev d{cpu.get(), dt, dt};
    const double tol = dt == DType::kF32 ? 2e-6 : 1e-14;
    for (const bool relu : {false, true}) {
      for (const bool with_res : {false, true}) {
        HostBn bn{{2.0, 0.5}, {0.5, -0.25}, {1.0, 0.0}, {3.0, 2.0}, {}, {}};
        Vec y;
        ASSERT_NO_FATAL_FAILURE(Train(d, shape, x, with_res ? &res : nullptr, relu, &bn, &y));
        for (int k = 0; k < 8; ++k) {
          const int ch = k % 2;
          double want = ch == 0 ? 2.0 * (x[k] - 2.5) * is0 + 0.5 : 0.5 * x[k] * is1 - 0.25;
          if (with_res) want += res[k];
          if (relu) want = std::max(want, 0.0);
          EXPECT_NEAR(y[k], want, tol) << k << " relu " << relu << " res " << with_res;
        }
        EXPECT_NEAR(bn.save_mean[0], 2.5, tol);
        EXPECT_NEAR(bn.save_mean[1], 0.0, tol);
        EXPECT_NEAR(bn.save_inv_std[0], is0, tol);
        EXPECT_NEAR(bn.save_inv_std[1], is1, tol);
        EXPECT_NEAR(bn.running_mean[0], (1 - mom) * 1.0 + mom * 2.5, tol);
        EXPECT_NEAR(bn.running_mean[1], 0.0, tol);
        EXPECT_NEAR(bn.running_var[0], (1 - mom) * 3.0 + mom * 5.0 / 3.0, tol);
        EXPECT_NEAR(bn.running_var[1], (1 - mom) * 2.0 + mom * 4.0 / 3.0, tol);
        // Eval normalizes with the running statistics instead.
        ASSERT_NO_FATAL_FAILURE(Eval(d, shape, x, with_res ? &res : nullptr, relu, bn, &y));
        for (int k = 0; k < 8; ++k) {
          const int ch = k % 2;
          const double gamma = ch == 0 ? 2.0 : 0.5, beta = ch == 0 ? 0.5 : -0.25;
          double want = gamma * (x[k] - bn.running_mean[ch]) / std::sqrt(bn.running_var[ch] + eps) + beta;
          if (with_res) want += res[k];
          if (relu) want = std::max(want, 0.0);
          EXPECT_NEAR(y[k], want, tol) << k;
        }
      }
    }
  }
}

// Without residual and ReLU the op is batchnorm.h's on the transposed map: same statistics, outputs and gradients.
TEST(BatchNormNhwcCpu, MatchesNchwBatchNorm) {
  auto cpu = Cpu();
  const int64_t n = 3, h = 4, w = 5, c = 6, hw = h * w, numel = n * hw * c;
  const auto x = RandomVector(numel, 11, -2, 3), dy = RandomVector(numel, 12);
  const Dev d{cpu.get(), DType::kF64, DType::kF64};
  HostBn nhwc = Fresh(c, 13);
  Vec y;
  ASSERT_NO_FATAL_FAILURE(Train(d, {n, h, w, c}, x, nullptr, false, &nhwc, &y));
  Grads g;
  ASSERT_NO_FATAL_FAILURE(Backward(d, {n, h, w, c}, x, dy, nullptr, nhwc, Vec(c, 0.5), true, true, &g));
  EXPECT_EQ(g.dg, dy);  // no ReLU: the residual's gradient is dout

  // The NCHW op on the transposed map.
  const HostBn init = Fresh(c, 13);
  BatchNormTensors t;
  ASSERT_NO_FATAL_FAILURE(ToDevice(d, init, &t));
  Tensor tx, ty, tdy, tdx, tdg, tdb;
  DT_ASSERT_OK(MakeTensor(*cpu, DType::kF64, {n, c, h, w}, ToNchw(x, n, hw, c), &tx));
  DT_ASSERT_OK(MakeTensor(*cpu, DType::kF64, {n, c, h, w}, Vec(numel, NAN), &ty));
  DT_ASSERT_OK(MakeTensor(*cpu, DType::kF64, {n, c, h, w}, ToNchw(dy, n, hw, c), &tdy));
  DT_ASSERT_OK(MakeTensor(*cpu, DType::kF64, {n, c, h, w}, Vec(numel, NAN), &tdx));
  DT_ASSERT_OK(MakeTensor(*cpu, DType::kF64, {c}, Vec(c, 0.5), &tdg));
  DT_ASSERT_OK(MakeTensor(*cpu, DType::kF64, {c}, Vec(c, 0.5), &tdb));
  DT_ASSERT_OK(BatchNormForwardTraining(*cpu, tx, &t, &ty, false));
  DT_ASSERT_OK(BatchNormBackward(*cpu, tx, tdy, t, &tdx, &tdg, &tdb, true));
  HostBn nchw;
  ASSERT_NO_FATAL_FAILURE(ToHost(d, t, &nchw));
  Vec y_ref, dx_ref, dgamma_ref, dbeta_ref;
  DT_ASSERT_OK(Fetch(*cpu, ty, &y_ref));
  DT_ASSERT_OK(Fetch(*cpu, tdx, &dx_ref));
  DT_ASSERT_OK(Fetch(*cpu, tdg, &dgamma_ref));
  DT_ASSERT_OK(Fetch(*cpu, tdb, &dbeta_ref));
  ExpectClose(ToNchw(y, n, hw, c), y_ref, 0, 1e-13, "y");
  ExpectClose(ToNchw(g.dx, n, hw, c), dx_ref, 0, 1e-13, "dx");
  ExpectClose(g.dgamma, dgamma_ref, 0, 1e-12, "dgamma");
  ExpectClose(g.dbeta, dbeta_ref, 0, 1e-12, "dbeta");
  ExpectClose(nhwc.save_mean, nchw.save_mean, 0, 1e-14, "save_mean");
  ExpectClose(nhwc.save_inv_std, nchw.save_inv_std, 0, 1e-14, "save_inv_std");
  ExpectClose(nhwc.running_mean, nchw.running_mean, 0, 1e-14, "running_mean");
  ExpectClose(nhwc.running_var, nchw.running_var, 0, 1e-14, "running_var");
}

// loss = sum(v .* act(BN(x; gamma, beta) + residual)) in training mode, against central differences in x, gamma,
// beta and the residual (whose gradient is dg), with and without ReLU and residual.
TEST(BatchNormNhwcGrad, FiniteDifferences) {
  auto cpu = Cpu();
  const Dev d{cpu.get(), DType::kF64, DType::kF64};
  for (const Shape& shape : {Shape{2, 3, 2, 4}, Shape{5, 3}, Shape{1, 3, 3, 2}}) {
    for (const bool relu : {false, true}) {
      for (const bool with_res : {false, true}) {
        const int64_t n = Tensor::NumelOf(shape), c = shape.back();
        const auto x = RandomVector(n, 7, -2, 2), v = RandomVector(n, 8), res = RandomVector(n, 9);
        const HostBn base = Fresh(c, 10);
        // ReLU's kink must stay well clear of the differences' h = 1e-5.
        {
          HostBn bn = base;
          Vec pre;
          ASSERT_NO_FATAL_FAILURE(Train(d, shape, x, with_res ? &res : nullptr, false, &bn, &pre));
          double min_abs = INFINITY;
          for (double p : pre) min_abs = std::min(min_abs, std::fabs(p));
          ASSERT_GT(min_abs, 1e-3) << "pick another seed: a pre-activation sits on ReLU's kink";
        }
        auto loss = [&](const Vec& xv, const Vec& gm, const Vec& bt, const Vec& rs) {
          HostBn bn = base;
          bn.gamma = gm;
          bn.beta = bt;
          Vec y;
          Train(d, shape, xv, with_res ? &rs : nullptr, relu, &bn, &y);
          return testing::Dot(v, y);
        };
        HostBn saved = base;
        Vec y;
        ASSERT_NO_FATAL_FAILURE(Train(d, shape, x, with_res ? &res : nullptr, relu, &saved, &y));
        Grads g;
        ASSERT_NO_FATAL_FAILURE(
            Backward(d, shape, x, v, relu ? &y : nullptr, saved, Vec(c, 0.0), true, /*want_dg=*/true, &g));
        const std::string what =
            "relu " + std::to_string(relu) + " residual " + std::to_string(with_res) + " c " + std::to_string(c);
        const auto rx =
            testing::CheckGradient([&](const Vec& xv) { return loss(xv, base.gamma, base.beta, res); }, x, g.dx);
        const auto rg =
            testing::CheckGradient([&](const Vec& gm) { return loss(x, gm, base.beta, res); }, base.gamma, g.dgamma);
        const auto rb =
            testing::CheckGradient([&](const Vec& bt) { return loss(x, base.gamma, bt, res); }, base.beta, g.dbeta);
        const auto rr = testing::CheckGradient([&](const Vec& rs) { return loss(x, base.gamma, base.beta, rs); }, res,
                                               with_res ? g.dg : Vec(n, 0.0));
        EXPECT_LT(rx.max_rel_error, 1e-6) << what << " dx: " << rx.ToString();
        EXPECT_LT(rg.max_rel_error, 1e-6) << what << " dgamma: " << rg.ToString();
        EXPECT_LT(rb.max_rel_error, 1e-6) << what << " dbeta: " << rb.ToString();
        EXPECT_LT(rr.max_rel_error, 1e-6) << what << " dresidual: " << rr.ToString();
        // dg is dout masked by the forward's output: exactly.
        for (int64_t k = 0; k < n; ++k) EXPECT_EQ(g.dg[k], relu && !(y[k] > 0) ? 0.0 : v[k]) << what << " " << k;
      }
    }
  }
}

TEST(BatchNormNhwcCpu, AccumulatesParamGradsAndOverwritesDxAndDg) {
  auto cpu = Cpu();
  const Shape shape = {3, 2, 2, 5};
  const int64_t n = 60, c = 5;
  const auto x = RandomVector(n, 1), dy = RandomVector(n, 3), res = RandomVector(n, 4);
  for (DType dt : {DType::kF32, DType::kF64}) {
    const Dev d{cpu.get(), dt, dt};
    HostBn bn = Fresh(c, 2);
    Vec y;
    ASSERT_NO_FATAL_FAILURE(Train(d, shape, x, &res, true, &bn, &y));
    Grads set, acc;
    const Vec init = F32(RandomVector(c, 5, 5, 10));
    ASSERT_NO_FATAL_FAILURE(Backward(d, shape, x, dy, &y, bn, Vec(c, NAN), false, true, &set));
    ASSERT_NO_FATAL_FAILURE(Backward(d, shape, x, dy, &y, bn, init, true, true, &acc));
    EXPECT_EQ(set.dx, acc.dx);  // dx and dg are always overwritten (they start as NaN)
    EXPECT_EQ(set.dg, acc.dg);
    const double tol = dt == DType::kF32 ? 2e-6 : 1e-13;
    for (int64_t ch = 0; ch < c; ++ch) {
      EXPECT_NEAR(acc.dgamma[ch], init[ch] + set.dgamma[ch], tol * 10);
      EXPECT_NEAR(acc.dbeta[ch], init[ch] + set.dbeta[ch], tol * 10);
    }
  }
}

// In place: y into the residual's tensor; dg into dout's and dx into x's (the header's aliasing contract).
void ExpectInPlaceMatches(const Dev& d, const Shape& shape, uint64_t seed) {
  const int64_t n = Tensor::NumelOf(shape), c = shape.back();
  const auto x = Bf16(RandomVector(n, seed, -2, 3)), res = Bf16(RandomVector(n, seed + 1)),
             dy = Bf16(RandomVector(n, seed + 2));
  HostBn bn = Fresh(c, seed + 3);
  Vec y;
  ASSERT_NO_FATAL_FAILURE(Train(d, shape, x, &res, true, &bn, &y));
  Grads want;
  ASSERT_NO_FATAL_FAILURE(Backward(d, shape, x, dy, &y, bn, Vec(c, 0.0), false, true, &want));

  BatchNormTensors t;
  ASSERT_NO_FATAL_FAILURE(ToDevice(d, Fresh(c, seed + 3), &t));
  Tensor tx, tr, tdy, tdgamma, tdbeta;
  DT_ASSERT_OK(Make(*d.ctx, d.act, shape, x, &tx));
  DT_ASSERT_OK(Make(*d.ctx, d.act, shape, res, &tr));
  DT_ASSERT_OK(Make(*d.ctx, d.act, shape, dy, &tdy));
  DT_ASSERT_OK(Make(*d.ctx, d.par, {c}, Vec(c, 0.0), &tdgamma));
  DT_ASSERT_OK(Make(*d.ctx, d.par, {c}, Vec(c, 0.0), &tdbeta));
  DT_ASSERT_OK(BatchNormNhwcForwardTraining(*d.ctx, tx, &t, &tr, true, &tr));  // y = tr
  Vec got_y, got_dx, got_dg, got_dgamma, got_dbeta;
  DT_ASSERT_OK(Fetch(*d.ctx, tr, &got_y));
  EXPECT_EQ(got_y, y);
  DT_ASSERT_OK(BatchNormNhwcBackward(*d.ctx, tx, tdy, &tr, t, &tx, &tdy, &tdgamma, &tdbeta, false));  // dx = tx
  DT_ASSERT_OK(Fetch(*d.ctx, tx, &got_dx));
  DT_ASSERT_OK(Fetch(*d.ctx, tdy, &got_dg));
  DT_ASSERT_OK(Fetch(*d.ctx, tdgamma, &got_dgamma));
  DT_ASSERT_OK(Fetch(*d.ctx, tdbeta, &got_dbeta));
  EXPECT_EQ(got_dx, want.dx);
  EXPECT_EQ(got_dg, want.dg);
  EXPECT_EQ(got_dgamma, want.dgamma);
  EXPECT_EQ(got_dbeta, want.dbeta);
}

TEST(BatchNormNhwcCpu, InPlace) {
  auto cpu = Cpu();
  ASSERT_NO_FATAL_FAILURE(ExpectInPlaceMatches(Dev{cpu.get(), DType::kF64, DType::kF64}, {2, 3, 3, 5}, 31));
}

TEST(BatchNormNhwc, RejectsBadShapesNamingThem) {
  auto cpu = Cpu();
  const Dev d{cpu.get(), DType::kF32, DType::kF32};
  BatchNormTensors t3, t4;
  ASSERT_NO_FATAL_FAILURE(ToDevice(d, Fresh(3, 1), &t3));
  ASSERT_NO_FATAL_FAILURE(ToDevice(d, Fresh(4, 1), &t4));
  Tensor x, y, y_bad, x1d, r64;
  DT_ASSERT_OK(MakeTensor(*cpu, DType::kF32, {2, 2, 2, 4}, Vec(32, 0.0), &x));  // C = 4
  DT_ASSERT_OK(MakeTensor(*cpu, DType::kF32, {2, 2, 2, 4}, Vec(32, 0.0), &y));
  DT_ASSERT_OK(MakeTensor(*cpu, DType::kF32, {2, 4, 4}, Vec(32, 0.0), &y_bad));
  DT_ASSERT_OK(MakeTensor(*cpu, DType::kF32, {6}, Vec(6, 0.0), &x1d));
  DT_ASSERT_OK(MakeTensor(*cpu, DType::kF64, {2, 2, 2, 4}, Vec(32, 0.0), &r64));
  Status st = BatchNormNhwcForwardTraining(*cpu, x, &t3, nullptr, false, &y);
  EXPECT_EQ(st.code(), Status::Code::kInvalidArgument);
  EXPECT_NE(st.message().find("f32[3]"), std::string::npos) << st.ToString();
  EXPECT_NE(st.message().find("f32[2,2,2,4]"), std::string::npos) << st.ToString();
  DT_ASSERT_OK(BatchNormNhwcForwardTraining(*cpu, x, &t4, nullptr, true, &y));
  st = BatchNormNhwcForwardTraining(*cpu, x, &t4, &y_bad, false, &y);
  EXPECT_EQ(st.code(), Status::Code::kInvalidArgument);
  EXPECT_NE(st.message().find("f32[2,4,4]"), std::string::npos) << st.ToString();
  EXPECT_EQ(BatchNormNhwcForwardTraining(*cpu, x, &t4, nullptr, false, &y_bad).code(), Status::Code::kInvalidArgument);
  EXPECT_EQ(BatchNormNhwcForwardTraining(*cpu, x, &t4, &r64, false, &y).code(), Status::Code::kInvalidArgument);
  EXPECT_EQ(BatchNormNhwcForwardEval(*cpu, x1d, t4, nullptr, false, &y).code(), Status::Code::kInvalidArgument);
  EXPECT_EQ(BatchNormNhwcForwardEval(*cpu, x, t3, nullptr, false, &y).code(), Status::Code::kInvalidArgument);
  EXPECT_EQ(BatchNormNhwcBackward(*cpu, x, y, nullptr, t4, &y, nullptr, nullptr, nullptr, true).code(),
            Status::Code::kInvalidArgument);
  Tensor dg4, db3;
  DT_ASSERT_OK(MakeTensor(*cpu, DType::kF32, {4}, Vec(4, 0.0), &dg4));
  DT_ASSERT_OK(MakeTensor(*cpu, DType::kF32, {3}, Vec(3, 0.0), &db3));
  st = BatchNormNhwcBackward(*cpu, x, y, &y_bad, t4, &y, nullptr, &dg4, &dg4, true);
  EXPECT_EQ(st.code(), Status::Code::kInvalidArgument);
  EXPECT_NE(st.message().find("f32[2,4,4]"), std::string::npos) << st.ToString();
  st = BatchNormNhwcBackward(*cpu, x, y, nullptr, t4, &y, nullptr, &dg4, &db3, true);
  EXPECT_EQ(st.code(), Status::Code::kInvalidArgument);
  EXPECT_NE(st.message().find("f32[3]"), std::string::npos) << st.ToString();
}

// ---- CUDA (bf16) vs the CPU f64 reference ----------------------------------------------------------------------
//
// Inputs (x, residual, dout) are bf16-rounded first; the reference runs in f64 on exactly those values, and the
// backward reference gets the GPU's bf16 forward output as `out`, so both apply the same ReLU mask.
// Tolerances:
//  - y, dx (bf16 outputs): |gpu - ref| <= 2^-8 |ref| + 1e-5 * scale. Rounding to nearest bf16 is at most half an ulp,
//    2^-8 relative; the fp32 arithmetic before it adds ~1e-6 for these O(1..10) values.
//  - save_mean, save_inv_std, running_mean, running_var: 1e-6 relative to max(1, |ref|) (double sums of the same
//    bf16 values, one rounding to f32: 6e-8).
//  - dbeta, dgamma: 2e-6 * max(1, max |ref|) (double sums, f32 statistics in xhat: ~1e-7 relative).
//  - dg: exact (a masked copy of dout).
constexpr double kBf16Rel = 1.0 / 256;

class BatchNormNhwcCuda : public ::testing::Test {
 protected:
  void SetUp() override {
    DT_SKIP_WITHOUT_CUDA();
    DT_ASSERT_OK(DeviceContext::CreateCpu(&cpu_));
    DT_ASSERT_OK(DeviceContext::CreateCuda(0, &gpu_));
  }
  Dev Gpu(bool misalign = false) const { return Dev{gpu_.get(), DType::kBF16, DType::kF32, misalign}; }
  Dev Ref() const { return Dev{cpu_.get(), DType::kF64, DType::kF64}; }

  // Training forward + backward on the GPU and the reference; compares everything.
  void ExpectTrainMatches(const Shape& shape, bool relu, bool with_res, bool want_dg, bool accumulate,
                          bool misalign = false) {
    const int64_t n = Tensor::NumelOf(shape), c = shape.back();
    const std::string what = ::testing::PrintToString(shape) + " relu " + std::to_string(relu) + " res " +
                             std::to_string(with_res) + " dg " + std::to_string(want_dg) + " acc " +
                             std::to_string(accumulate) + " misalign " + std::to_string(misalign);
    SCOPED_TRACE(what);
    const uint64_t seed = static_cast<uint64_t>(n + c);
    const auto x = Bf16(RandomVector(n, seed, -3, 5)), res = Bf16(RandomVector(n, seed + 1, -1, 1)),
               dout = Bf16(RandomVector(n, seed + 2));
    HostBn bg = Fresh(c, seed + 3), bc = bg;
    Vec yg, yc;
    ASSERT_NO_FATAL_FAILURE(Train(Gpu(misalign), shape, x, with_res ? &res : nullptr, relu, &bg, &yg));
    ASSERT_NO_FATAL_FAILURE(Train(Ref(), shape, x, with_res ? &res : nullptr, relu, &bc, &yc));
    ExpectClose(yg, yc, kBf16Rel, 1e-5 * testing::Scale(yc), "y");
    ExpectClose(bg.save_mean, bc.save_mean, 1e-6, 1e-6, "save_mean");
    ExpectClose(bg.save_inv_std, bc.save_inv_std, 1e-6, 1e-6, "save_inv_std");
    ExpectClose(bg.running_mean, bc.running_mean, 1e-6, 1e-6, "running_mean");
    ExpectClose(bg.running_var, bc.running_var, 1e-6, 1e-6, "running_var");

    const Vec init = accumulate ? F32(RandomVector(c, seed + 4, -10, 10)) : Vec(c, NAN);
    Grads gg, gc;
    ASSERT_NO_FATAL_FAILURE(
        Backward(Gpu(misalign), shape, x, dout, relu ? &yg : nullptr, bg, init, accumulate, want_dg, &gg));
    ASSERT_NO_FATAL_FAILURE(Backward(Ref(), shape, x, dout, relu ? &yg : nullptr, bc, init, accumulate, want_dg, &gc));
    ExpectClose(gg.dx, gc.dx, kBf16Rel, 1e-5 * testing::Scale(gc.dx), "dx");
    ExpectClose(gg.dgamma, gc.dgamma, 0, 2e-6 * testing::Scale(gc.dgamma), "dgamma");
    ExpectClose(gg.dbeta, gc.dbeta, 0, 2e-6 * testing::Scale(gc.dbeta), "dbeta");
    if (want_dg) {
      EXPECT_EQ(gg.dg, gc.dg);
    }
  }

  std::unique_ptr<DeviceContext> cpu_, gpu_;
};

// The CNN's training shapes (batch 128), every combination of ReLU / residual / dg / accumulate.
TEST_F(BatchNormNhwcCuda, TrainingMatchesCpuOnCnnShapes) {
  for (const Shape& shape : {Shape{128, 28, 28, 32}, Shape{128, 14, 14, 64}, Shape{128, 7, 7, 128}}) {
    for (int variant = 0; variant < 4; ++variant) {
      const bool relu = variant & 1, with_res = variant & 2;
      ASSERT_NO_FATAL_FAILURE(ExpectTrainMatches(shape, relu, with_res, /*want_dg=*/with_res, /*accumulate=*/relu));
    }
  }
}

// Odd channel counts (one channel a thread), tiny and single-row maps, and more than 2048 channels (two column
// slabs of 8-channel slots; 300 channels: two slabs of 1-channel slots).
TEST_F(BatchNormNhwcCuda, TrainingMatchesCpuOnOddShapes) {
  for (const Shape& shape : {Shape{4, 5, 5, 3}, Shape{3, 7, 9, 20}, Shape{16, 32, 32, 3}, Shape{2, 3, 8},
                             Shape{1, 1, 1, 8}, Shape{4, 3, 3, 2056}, Shape{5, 2, 3, 300}, Shape{7, 1, 1, 24}}) {
    for (int variant = 0; variant < 4; ++variant) {
      const bool relu = variant & 1, with_res = variant & 2;
      ASSERT_NO_FATAL_FAILURE(ExpectTrainMatches(shape, relu, with_res, /*want_dg=*/relu, /*accumulate=*/with_res));
    }
  }
}

// C % 8 == 0 but the tensors start 2 bytes into their allocations: the launchers fall back to one channel a thread.
TEST_F(BatchNormNhwcCuda, MisalignedPointersTakeTheScalarPath) {
  ASSERT_NO_FATAL_FAILURE(ExpectTrainMatches({16, 14, 14, 64}, true, true, true, true, /*misalign=*/true));
  ASSERT_NO_FATAL_FAILURE(ExpectTrainMatches({3, 5, 5, 16}, false, false, false, false, /*misalign=*/true));
}

// Eval with the same f32 running statistics on both sides, at the CNN's eval batch of 1000.
TEST_F(BatchNormNhwcCuda, EvalMatchesCpu) {
  for (const Shape& shape : {Shape{1000, 28, 28, 32}, Shape{1000, 14, 14, 64}, Shape{1000, 7, 7, 128},
                             Shape{7, 5, 5, 20}, Shape{2, 3, 3}, Shape{2, 2, 2056}}) {
    const int64_t n = Tensor::NumelOf(shape), c = shape.back();
    const auto x = Bf16(RandomVector(n, 41, -3, 5)), res = Bf16(RandomVector(n, 42));
    const HostBn bn = Fresh(c, 43);
    for (const bool fused : {false, true}) {
      SCOPED_TRACE(::testing::PrintToString(shape) + (fused ? " relu+residual" : " plain"));
      Vec yg, yc;
      ASSERT_NO_FATAL_FAILURE(Eval(Gpu(), shape, x, fused ? &res : nullptr, fused, bn, &yg));
      ASSERT_NO_FATAL_FAILURE(Eval(Ref(), shape, x, fused ? &res : nullptr, fused, bn, &yc));
      ExpectClose(yg, yc, kBf16Rel, 1e-5 * testing::Scale(yc), "y");
    }
  }
}

// accumulate_param_grads adds to dgamma/dbeta; dx and dg are the same either way (and start as NaN).
TEST_F(BatchNormNhwcCuda, AccumulateAddsParamGradsOnly) {
  for (const Shape& shape : {Shape{128, 14, 14, 64}, Shape{3, 7, 9, 20}}) {
    const int64_t n = Tensor::NumelOf(shape), c = shape.back();
    const auto x = Bf16(RandomVector(n, 51, -3, 5)), res = Bf16(RandomVector(n, 52)), dout = Bf16(RandomVector(n, 53));
    HostBn bn = Fresh(c, 54);
    Vec y;
    ASSERT_NO_FATAL_FAILURE(Train(Gpu(), shape, x, &res, true, &bn, &y));
    const Vec init = F32(RandomVector(c, 55, -10, 10));
    Grads set, acc;
    ASSERT_NO_FATAL_FAILURE(Backward(Gpu(), shape, x, dout, &y, bn, Vec(c, NAN), false, true, &set));
    ASSERT_NO_FATAL_FAILURE(Backward(Gpu(), shape, x, dout, &y, bn, init, true, true, &acc));
    EXPECT_EQ(set.dx, acc.dx);
    EXPECT_EQ(set.dg, acc.dg);
    for (int64_t ch = 0; ch < c; ++ch) {
      // One f32 rounding of the double sum (init + total) against two (total, then init + it).
      EXPECT_NEAR(acc.dgamma[ch], init[ch] + set.dgamma[ch], 1e-6 * (std::fabs(init[ch]) + std::fabs(set.dgamma[ch])));
      EXPECT_NEAR(acc.dbeta[ch], init[ch] + set.dbeta[ch], 1e-6 * (std::fabs(init[ch]) + std::fabs(set.dbeta[ch])));
    }
  }
}

// Two runs give the same bits: fixed-order sums, no atomics.
TEST_F(BatchNormNhwcCuda, BitwiseReproducible) {
  for (const Shape& shape : {Shape{128, 28, 28, 32}, Shape{128, 7, 7, 128}, Shape{16, 32, 32, 3}}) {
    const int64_t n = Tensor::NumelOf(shape), c = shape.back();
    const auto x = Bf16(RandomVector(n, 61, -3, 5)), res = Bf16(RandomVector(n, 62)), dout = Bf16(RandomVector(n, 63));
    HostBn bn[2] = {Fresh(c, 64), Fresh(c, 64)};
    Vec y[2];
    Grads g[2];
    for (int run = 0; run < 2; ++run) {
      ASSERT_NO_FATAL_FAILURE(Train(Gpu(), shape, x, &res, true, &bn[run], &y[run]));
      ASSERT_NO_FATAL_FAILURE(Backward(Gpu(), shape, x, dout, &y[run], bn[run], Vec(c, 1.0), true, true, &g[run]));
    }
    EXPECT_EQ(y[0], y[1]);
    EXPECT_EQ(bn[0].save_mean, bn[1].save_mean);
    EXPECT_EQ(bn[0].save_inv_std, bn[1].save_inv_std);
    EXPECT_EQ(bn[0].running_mean, bn[1].running_mean);
    EXPECT_EQ(bn[0].running_var, bn[1].running_var);
    EXPECT_EQ(g[0].dx, g[1].dx);
    EXPECT_EQ(g[0].dg, g[1].dg);
    EXPECT_EQ(g[0].dgamma, g[1].dgamma);
    EXPECT_EQ(g[0].dbeta, g[1].dbeta);
  }
}

TEST_F(BatchNormNhwcCuda, InPlace) {
  ASSERT_NO_FATAL_FAILURE(ExpectInPlaceMatches(Gpu(), {32, 14, 14, 64}, 71));
  ASSERT_NO_FATAL_FAILURE(ExpectInPlaceMatches(Gpu(), {4, 5, 5, 20}, 72));
}

TEST_F(BatchNormNhwcCuda, RejectsBadShapesAndDtypes) {
  DeviceContext& gpu = *gpu_;
  BatchNormTensors t4, t3;
  ASSERT_NO_FATAL_FAILURE(ToDevice(Gpu(), Fresh(4, 1), &t4));
  ASSERT_NO_FATAL_FAILURE(ToDevice(Gpu(), Fresh(3, 1), &t3));
  Tensor x, y, x32, y32, dg16;
  DT_ASSERT_OK(Make(gpu, DType::kBF16, {2, 2, 2, 4}, Vec(32, 0.0), &x));
  DT_ASSERT_OK(Make(gpu, DType::kBF16, {2, 2, 2, 4}, Vec(32, 0.0), &y));
  DT_ASSERT_OK(Make(gpu, DType::kF32, {2, 2, 2, 4}, Vec(32, 0.0), &x32));
  DT_ASSERT_OK(Make(gpu, DType::kF32, {2, 2, 2, 4}, Vec(32, 0.0), &y32));
  DT_ASSERT_OK(Make(gpu, DType::kBF16, {4}, Vec(4, 0.0), &dg16));
  Status st = BatchNormNhwcForwardTraining(gpu, x, &t3, nullptr, true, &y);
  EXPECT_EQ(st.code(), Status::Code::kInvalidArgument);
  EXPECT_NE(st.message().find("f32[3]"), std::string::npos) << st.ToString();
  EXPECT_NE(st.message().find("bf16[2,2,2,4]"), std::string::npos) << st.ToString();
  st = BatchNormNhwcForwardTraining(gpu, x32, &t4, nullptr, true, &y32);  // CUDA activations are bf16
  EXPECT_EQ(st.code(), Status::Code::kInvalidArgument);
  EXPECT_NE(st.message().find("f32[2,2,2,4]"), std::string::npos) << st.ToString();
  EXPECT_EQ(BatchNormNhwcForwardEval(gpu, x, t4, &y32, false, &y).code(), Status::Code::kInvalidArgument);
  EXPECT_EQ(BatchNormNhwcBackward(gpu, x, y, nullptr, t4, &y, nullptr, &dg16, &dg16, false).code(),
            Status::Code::kInvalidArgument);  // per-channel grads are f32
  // A CPU tensor on the GPU path.
  auto cpu = Cpu();
  Tensor xc;
  DT_ASSERT_OK(MakeTensor(*cpu, DType::kF32, {2, 2, 2, 4}, Vec(32, 0.0), &xc));
  EXPECT_EQ(BatchNormNhwcForwardEval(gpu, xc, t4, nullptr, false, &y).code(), Status::Code::kInvalidArgument);
  DT_ASSERT_OK(BatchNormNhwcForwardTraining(gpu, x, &t4, nullptr, true, &y));
}

}  // namespace
}  // namespace dtrain::ops
