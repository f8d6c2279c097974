#include "tests/testing/grad_check.h"

#include <algorithm>
#include <cmath>
#include <random>
#include <sstream>
#include <type_traits>

#include "core/bf16.h"

namespace dtrain::testing {

std::string GradCheckResult::ToString() const {
  std::ostringstream os;
  os << "max relative error " << max_rel_error << " at index " << worst_index << " (analytic " << analytic
     << ", numeric " << numeric << ")";
  return os.str();
}

GradCheckResult CheckGradient(const ScalarFn& f, const std::vector<double>& x, const std::vector<double>& analytic,
                              double h, double floor) {
  GradCheckResult r;
  if (analytic.size() != x.size()) {
    r.max_rel_error = INFINITY;  // a size mismatch is a failed check, reported through the error
    return r;
  }
  std::vector<double> xp = x;
  for (size_t i = 0; i < x.size(); ++i) {
    xp[i] = x[i] + h;
    const double f_plus = f(xp);
    xp[i] = x[i] - h;
    const double f_minus = f(xp);
    xp[i] = x[i];
    const double numeric = (f_plus - f_minus) / (2 * h);
    const double err = std::fabs(analytic[i] - numeric) / std::max({std::fabs(analytic[i]), std::fabs(numeric), floor});
    if (!(err <= r.max_rel_error)) {  // also catches NaN
      r.max_rel_error = std::isnan(err) ? INFINITY : err;
      r.worst_index = static_cast<int64_t>(i);
      r.analytic = analytic[i];
      r.numeric = numeric;
    }
  }
  return r;
}

std::vector<double> RandomVector(int64_t n, uint64_t seed, double lo, double hi) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> dist(lo, hi);
  std::vector<double> v(static_cast<size_t>(n));
  for (double& e : v) e = dist(rng);
  return v;
}

double Dot(const std::vector<double>& w, const std::vector<double>& y) {
  double s = 0;
  for (size_t i = 0; i < w.size() && i < y.size(); ++i) s += w[i] * y[i];
  return s;
}

namespace {

template <typename T>
Status CopyIn(DeviceContext& ctx, const std::vector<double>& values, Tensor* out) {
  std::vector<T> host(values.size());
  for (size_t i = 0; i < values.size(); ++i) {
    if constexpr (std::is_same_v<T, uint16_t>) {
      host[i] = RoundBf16Rne(static_cast<float>(values[i]));  // bf16: round to nearest even
    } else {
      host[i] = static_cast<T>(values[i]);
    }
  }
  const Tensor view = Tensor::Wrap(host.data(), out->shape(), out->dtype(), DeviceType::kCPU);
  Status st = out->CopyFrom(view, ctx.stream());
  if (!st.ok()) return st;
  return ctx.Synchronize();  // `host` dies at return
}

template <typename T>
Status CopyOut(DeviceContext& ctx, const Tensor& t, std::vector<double>* out) {
  std::vector<T> host(static_cast<size_t>(t.numel()));
  Tensor view = Tensor::Wrap(host.data(), t.shape(), t.dtype(), DeviceType::kCPU);
  Status st = view.CopyFrom(t, ctx.stream());
  if (st.ok()) st = ctx.Synchronize();
  out->resize(host.size());
  for (size_t i = 0; i < host.size(); ++i) {
    if constexpr (std::is_same_v<T, uint16_t>) {
      (*out)[i] = Bf16BitsToF32(host[i]);
    } else {
      (*out)[i] = static_cast<double>(host[i]);
    }
  }
  return st;
}

}  // namespace

Status MakeTensor(DeviceContext& ctx, DType dtype, const std::vector<int64_t>& shape, const std::vector<double>& values,
                  Tensor* out) {
  if (static_cast<int64_t>(values.size()) != Tensor::NumelOf(shape)) {
    return Status::InvalidArgument("MakeTensor: " + std::to_string(values.size()) + " values for " +
                                   std::to_string(Tensor::NumelOf(shape)) + " elements");
  }
  Status st = Tensor::Empty(shape, dtype, ctx.allocator(), out);
  if (!st.ok()) return st;
  switch (dtype) {
    case DType::kF32:
      return CopyIn<float>(ctx, values, out);
    case DType::kF64:
      return CopyIn<double>(ctx, values, out);
    case DType::kI32:
      return CopyIn<int32_t>(ctx, values, out);
    case DType::kBF16:
      return CopyIn<uint16_t>(ctx, values, out);
    default:
      return Status::InvalidArgument(std::string("MakeTensor: unsupported dtype ") + DTypeName(dtype));
  }
}

Status Fetch(DeviceContext& ctx, const Tensor& t, std::vector<double>* out) {
  switch (t.dtype()) {
    case DType::kF32:
      return CopyOut<float>(ctx, t, out);
    case DType::kF64:
      return CopyOut<double>(ctx, t, out);
    case DType::kI32:
      return CopyOut<int32_t>(ctx, t, out);
    case DType::kBF16:
      return CopyOut<uint16_t>(ctx, t, out);
    default:
      return Status::InvalidArgument("Fetch: unsupported tensor " + t.ToString());
  }
}

double MaxAbsDiff(const std::vector<double>& a, const std::vector<double>& b) {
  if (a.size() != b.size()) return INFINITY;
  double m = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    const double d = std::fabs(a[i] - b[i]);
    if (!(d <= m)) m = std::isnan(d) ? INFINITY : d;
  }
  return m;
}

double RelFrobenius(const std::vector<double>& a, const std::vector<double>& b) {
  if (a.size() != b.size()) return INFINITY;
  double num = 0, den = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    num += (a[i] - b[i]) * (a[i] - b[i]);
    den += b[i] * b[i];
  }
  if (std::isnan(num)) return INFINITY;
  return den > 0 ? std::sqrt(num / den) : std::sqrt(num);
}

double Scale(const std::vector<double>& v) {
  double m = 1.0;
  for (double e : v) m = std::max(m, std::fabs(e));
  return m;
}

Status MakeTensorAt(DeviceContext& ctx, DType dtype, const std::vector<int64_t>& shape,
                    const std::vector<double>& values, int64_t offset, Tensor* out) {
  std::vector<double> padded(static_cast<size_t>(offset), 0.0);
  padded.insert(padded.end(), values.begin(), values.end());
  Tensor base;
  Status st = MakeTensor(ctx, dtype, {static_cast<int64_t>(padded.size())}, padded, &base);
  return st.ok() ? base.View(offset, shape, out) : st;
}

Status MakeBf16FromBits(DeviceContext& ctx, const std::vector<int64_t>& shape, const std::vector<uint16_t>& bits,
                        Tensor* out) {
  if (static_cast<int64_t>(bits.size()) != Tensor::NumelOf(shape)) {
    return Status::InvalidArgument("MakeBf16FromBits: " + std::to_string(bits.size()) + " values for " +
                                   std::to_string(Tensor::NumelOf(shape)) + " elements");
  }
  Status st = Tensor::Empty(shape, DType::kBF16, ctx.allocator(), out);
  if (!st.ok()) return st;
  std::vector<uint16_t> host = bits;
  st = out->CopyFrom(Tensor::Wrap(host.data(), shape, DType::kBF16, DeviceType::kCPU), ctx.stream());
  return st.ok() ? ctx.Synchronize() : st;  // `host` dies at return
}

Status FetchBf16Bits(DeviceContext& ctx, const Tensor& t, std::vector<uint16_t>* bits) {
  if (t.dtype() != DType::kBF16) return Status::InvalidArgument("FetchBf16Bits: not bf16: " + t.ToString());
  bits->assign(static_cast<size_t>(t.numel()), 0);
  Tensor view = Tensor::Wrap(bits->data(), t.shape(), DType::kBF16, DeviceType::kCPU);
  Status st = view.CopyFrom(t, ctx.stream());
  return st.ok() ? ctx.Synchronize() : st;
}

}  // namespace dtrain::testing
