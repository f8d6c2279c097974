#include "kernels/fp8.h"

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstring>

#include "core/check.h"
#include "kernels/bias.h"

namespace dtrain::ops {

namespace {

struct Fp8Spec {
  int mant_bits;
  int bias;
  double max;
};
Fp8Spec SpecOf(Fp8Format f) { return f == Fp8Format::kE4M3 ? Fp8Spec{3, 7, kE4M3Max} : Fp8Spec{2, 15, kE5M2Max}; }

uint32_t Bits(float x) {
  uint32_t u;
  std::memcpy(&u, &x, sizeof(u));
  return u;
}
float FromBits(uint32_t u) {
  float x;
  std::memcpy(&x, &u, sizeof(x));
  return x;
}

}  // namespace

// Written from the format's definition (not from cuda_fp8.hpp's bit manipulation) so that the tests compare two
// independent implementations. All arithmetic is exact in double: |x| / quantum is a float times a power of two,
// and nearbyint rounds ties to even in the default rounding mode.
uint8_t FloatToFp8(float x, Fp8Format f) {
  if (std::isnan(x)) return 0x7F;
  const Fp8Spec s = SpecOf(f);
  const uint8_t sign = std::signbit(x) ? 0x80 : 0x00;
  const int emin = 1 - s.bias;  // exponent of the smallest normal; subnormals share its quantum
  double a = std::fabs(static_cast<double>(x));
  if (a != 0 && std::isfinite(a)) {
    const double quantum = std::ldexp(1.0, std::max(std::ilogb(a), emin) - s.mant_bits);
    a = std::nearbyint(a / quantum) * quantum;  // may carry into the next binade: the exponent is taken below
  }
  a = std::min(a, s.max);  // saturation: rounding past max, and infinities, give max
  if (a == 0) return sign;
  const int e = std::ilogb(a);
  if (e < emin)
    return static_cast<uint8_t>(sign | static_cast<int>(a / std::ldexp(1.0, emin - s.mant_bits)));  // subnormal
  const int mant = static_cast<int>(a / std::ldexp(1.0, e - s.mant_bits)) - (1 << s.mant_bits);
  return static_cast<uint8_t>(sign | ((e + s.bias) << s.mant_bits) | mant);
}

float Fp8ToFloat(uint8_t bits, Fp8Format f) {
  const Fp8Spec s = SpecOf(f);
  const int exp_field_max = (1 << (7 - s.mant_bits)) - 1;
  const int e = (bits >> s.mant_bits) & exp_field_max;
  const int m = bits & ((1 << s.mant_bits) - 1);
  const float sign = (bits & 0x80) != 0 ? -1.f : 1.f;
  if (e == exp_field_max) {
    if (f == Fp8Format::kE4M3 && m == (1 << s.mant_bits) - 1) return NAN;  // E4M3FN: only S.1111.111 is special
    if (f == Fp8Format::kE5M2) return m == 0 ? sign * INFINITY : NAN;
  }
  if (e == 0) return sign * static_cast<float>(std::ldexp(m, 1 - s.bias - s.mant_bits));
  return sign * static_cast<float>(std::ldexp((1 << s.mant_bits) + m, e - s.bias - s.mant_bits));
}

Fp8ScalePair Fp8ScaleFromAmax(float amax, Fp8Format f) {
  Fp8ScalePair p;
  if (!(amax > 0.f) || !std::isfinite(amax)) return p;  // 0, NaN, inf: scale 1 (see fp8.h)
  float s = Fp8Max(f) / amax;
  if (std::isinf(s)) s = FLT_MAX;
  // Round down to a power of two by clearing the mantissa (s >= 448 / FLT_MAX is a normal float).
  p.scale = FromBits(Bits(s) & 0xFF800000u);
  p.scale_inv = 1.f / p.scale;
  return p;
}

float AmaxCpu(const float* x, int64_t n) {
  uint32_t m = 0;
  for (int64_t i = 0; i < n; ++i) m = std::max(m, Bits(x[i]) & 0x7FFFFFFFu);
  return FromBits(m);
}

void CastToFp8Cpu(uint8_t* out, uint8_t* out_t, const float* x, int64_t rows, int64_t cols, float scale, Fp8Format f) {
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < cols; ++c) {
      const float scaled = x[r * cols + c] * scale;  // an f32 product, as the kernel's __fmul_rn
      const uint8_t q = FloatToFp8(scaled, f);
      if (out != nullptr) out[r * cols + c] = q;
      if (out_t != nullptr) out_t[c * rows + r] = q;
    }
  }
}

// ---- Tensor entry points ------------------------------------------------------------------------------------------

namespace {

// A one-element f32 tensor on ctx's device.
Status CheckScalar(const DeviceContext& ctx, const char* op, const char* name, const Tensor* t) {
  DT_CHECK_ARG(t != nullptr && t->numel() == 1 && t->dtype() == DType::kF32 && t->device() == ctx.type(),
               op << ": " << name << " must be a one-element f32 tensor on " << DeviceName(ctx.type()) << ", got "
                  << (t != nullptr ? t->ToString() : "null"));
  return Status::OK();
}

// f32 anywhere, bf16 on CUDA; on ctx's device.
Status CheckInput(const DeviceContext& ctx, const char* op, const Tensor& x) {
  DT_CHECK_ARG(x.device() == ctx.type(), op << ": x " << x.ToString() << " not on " << DeviceName(ctx.type()));
  DT_CHECK_ARG(x.dtype() == DType::kF32 || (ctx.is_cuda() && x.dtype() == DType::kBF16),
               op << ": x must be f32 (or bf16 on CUDA), got " << x.ToString());
  return Status::OK();
}

// A cast's x ([rows, cols]: f32, or bf16 on CUDA) and its outputs (at least one of out / out_t, u8, x's shape and x's
// shape transposed): *o / *ot their bytes, or null for an output not wanted.
Status CheckCast(const DeviceContext& ctx, const char* op, const Tensor& x, Tensor* out, Tensor* out_t, uint8_t** o,
                 uint8_t** ot) {
  DT_RETURN_IF_ERROR(CheckInput(ctx, op, x));
  DT_CHECK_ARG(x.ndim() == 2, op << ": x " << x.ToString() << " must be 2-D [rows, cols]");
  const int64_t rows = x.dim(0), cols = x.dim(1);
  const bool want = out != nullptr && out->defined(), want_t = out_t != nullptr && out_t->defined();
  DT_CHECK_ARG(want || want_t, op << ": neither out nor out_t given for x " << x.ToString());
  if (want) {
    DT_CHECK_ARG(
        out->dtype() == DType::kU8 && out->shape() == x.shape() && out->device() == ctx.type(),
        op << ": out " << out->ToString() << " must be u8 [" << rows << "," << cols << "] like x " << x.ToString());
  }
  if (want_t) {
    const std::vector<int64_t> shape_t = {cols, rows};
    DT_CHECK_ARG(out_t->dtype() == DType::kU8 && out_t->shape() == shape_t && out_t->device() == ctx.type(),
                 op << ": out_t " << out_t->ToString() << " must be u8 [" << cols << "," << rows
                    << "] (x transposed) for x " << x.ToString());
  }
  *o = want ? out->data<uint8_t>() : nullptr;
  *ot = want_t ? out_t->data<uint8_t>() : nullptr;
  return Status::OK();
}

}  // namespace

Status CheckAmaxOutput(const DeviceContext& ctx, const char* op, const Tensor* amax) {
  return amax == nullptr ? Status::OK() : CheckScalar(ctx, op, "amax", amax);
}

Status Fp8Amax(DeviceContext& ctx, const Tensor& x, Tensor* amax) {
  DT_RETURN_IF_ERROR(CheckInput(ctx, "Fp8Amax", x));
  DT_RETURN_IF_ERROR(CheckScalar(ctx, "Fp8Amax", "amax", amax));
  if (!ctx.is_cuda()) {
    amax->data<float>()[0] = AmaxCpu(x.data<float>(), x.numel());
    return Status::OK();
  }
#if DT_HAVE_CUDA
  if (x.dtype() == DType::kBF16)
    return Fp8AmaxCudaBf16(amax->data<float>(), x.data<uint16_t>(), x.numel(), ctx.stream());
  return Fp8AmaxCuda(amax->data<float>(), x.data<float>(), x.numel(), ctx.stream());
#else
  return Status::Unavailable("Fp8Amax: CUDA tensor in a build without CUDA");
#endif
}

Status Fp8SetAmax(DeviceContext& ctx, float bound, Tensor* amax) {
  DT_RETURN_IF_ERROR(CheckScalar(ctx, "Fp8SetAmax", "amax", amax));
  DT_CHECK_ARG(bound >= 0.f && std::isfinite(bound), "Fp8SetAmax: the bound " << bound << " must be finite and >= 0");
  if (!ctx.is_cuda()) {
    amax->data<float>()[0] = bound;
    return Status::OK();
  }
#if DT_HAVE_CUDA
  return Fp8SetAmaxCuda(amax->data<float>(), bound, ctx.stream());
#else
  return Status::Unavailable("Fp8SetAmax: CUDA tensor in a build without CUDA");
#endif
}

Status Fp8Scale(DeviceContext& ctx, const Tensor& amax, Fp8Format f, Tensor* scale, Tensor* scale_inv) {
  DT_RETURN_IF_ERROR(CheckScalar(ctx, "Fp8Scale", "amax", &amax));
  DT_RETURN_IF_ERROR(CheckScalar(ctx, "Fp8Scale", "scale", scale));
  DT_RETURN_IF_ERROR(CheckScalar(ctx, "Fp8Scale", "scale_inv", scale_inv));
  if (!ctx.is_cuda()) {
    const Fp8ScalePair p = Fp8ScaleFromAmax(amax.data<float>()[0], f);
    scale->data<float>()[0] = p.scale;
    scale_inv->data<float>()[0] = p.scale_inv;
    return Status::OK();
  }
#if DT_HAVE_CUDA
  return Fp8ScaleCuda(scale->data<float>(), scale_inv->data<float>(), amax.data<float>(), f, ctx.stream());
#else
  return Status::Unavailable("Fp8Scale: CUDA tensor in a build without CUDA");
#endif
}

Status CastToFp8(DeviceContext& ctx, const Tensor& x, const Tensor& scale, Fp8Format f, Tensor* out, Tensor* out_t) {
  DT_RETURN_IF_ERROR(CheckScalar(ctx, "CastToFp8", "scale", &scale));
  uint8_t *o, *ot;
  DT_RETURN_IF_ERROR(CheckCast(ctx, "CastToFp8", x, out, out_t, &o, &ot));
  const int64_t rows = x.dim(0), cols = x.dim(1);
  if (!ctx.is_cuda()) {
    CastToFp8Cpu(o, ot, x.data<float>(), rows, cols, scale.data<float>()[0], f);
    return Status::OK();
  }
#if DT_HAVE_CUDA
  if (x.dtype() == DType::kBF16) {
    return CastToFp8CudaBf16(o, ot, x.data<uint16_t>(), rows, cols, scale.data<float>(), f, ctx.stream());
  }
  return CastToFp8Cuda(o, ot, x.data<float>(), rows, cols, scale.data<float>(), f, ctx.stream());
#else
  return Status::Unavailable("CastToFp8: CUDA tensor in a build without CUDA");
#endif
}

Status Fp8ScaleSlots(DeviceContext& ctx, int64_t count, Tensor* storage, std::vector<Fp8Scales>* slots) {
  DT_CHECK_ARG(count >= 0, "Fp8ScaleSlots: negative count " << count);
  constexpr int64_t kStride = 4;  // floats: 16 bytes per value
  DT_RETURN_IF_ERROR(Tensor::Empty({std::max<int64_t>(1, count * 3 * kStride)}, DType::kF32, ctx.allocator(), storage));
  DT_RETURN_IF_ERROR(storage->SetZero(ctx.stream()));
  slots->assign(static_cast<size_t>(count), Fp8Scales());
  for (int64_t i = 0; i < count; ++i) {
    Fp8Scales& s = (*slots)[i];
    DT_RETURN_IF_ERROR(storage->View((3 * i + 0) * kStride, {1}, &s.amax));
    DT_RETURN_IF_ERROR(storage->View((3 * i + 1) * kStride, {1}, &s.scale));
    DT_RETURN_IF_ERROR(storage->View((3 * i + 2) * kStride, {1}, &s.scale_inv));
  }
  return Status::OK();
}

Status Fp8Quantize(DeviceContext& ctx, const Tensor& x, Fp8Format f, Fp8Scales* s, Tensor* out, Tensor* out_t,
                   const Fp8QuantizeOptions& opts) {
  DT_CHECK_ARG(s != nullptr, "Fp8Quantize: null scales for x " << x.ToString());
  Tensor* dbias = opts.dbias;
  if (dbias != nullptr) {
    DT_CHECK_ARG(
        x.ndim() == 2 && dbias->dtype() == DType::kF32 && dbias->numel() == x.dim(1) && dbias->device() == ctx.type(),
        "Fp8Quantize: dbias " << dbias->ToString() << " must be f32 [" << (x.ndim() == 2 ? x.dim(1) : 0) << "] for x "
                              << x.ToString());
  }
  if (!opts.amax_ready) DT_RETURN_IF_ERROR(Fp8Amax(ctx, x, &s->amax));
  if (!ctx.is_cuda()) {
    DT_RETURN_IF_ERROR(Fp8Scale(ctx, s->amax, f, &s->scale, &s->scale_inv));
    DT_RETURN_IF_ERROR(CastToFp8(ctx, x, s->scale, f, out, out_t));
    if (dbias != nullptr) BiasGradCpu(dbias->data<float>(), x.data<float>(), x.dim(0), x.dim(1), true);
    return Status::OK();
  }
#if DT_HAVE_CUDA
  // CastToFp8's checks, then one kernel for scale + cast (+ column sums).
  Fp8CastFromAmaxArgs a;
  DT_RETURN_IF_ERROR(CheckCast(ctx, "Fp8Quantize", x, out, out_t, &a.out, &a.out_t));
  DT_CHECK_ARG(dbias == nullptr || a.out_t != nullptr,
               "Fp8Quantize: the fused bias gradient needs out_t (x " << x.ToString() << ")");
  a.rows = x.dim(0);
  a.cols = x.dim(1);
  a.amax = s->amax.data<float>();
  a.scale = s->scale.data<float>();
  a.scale_inv = s->scale_inv.data<float>();
  a.format = f;
  Tensor partials;
  const int64_t tiles = (a.rows + kFp8CastTileRows - 1) / kFp8CastTileRows;
  if (dbias != nullptr) {
    DT_RETURN_IF_ERROR(Tensor::Empty({std::max<int64_t>(1, tiles * a.cols)}, DType::kF32, ctx.allocator(), &partials));
    a.col_partials = partials.data<float>();
  }
  DT_RETURN_IF_ERROR(x.dtype() == DType::kBF16 ? Fp8CastFromAmaxCudaBf16(a, x.data<uint16_t>(), ctx.stream())
                                               : Fp8CastFromAmaxCuda(a, x.data<float>(), ctx.stream()));
  if (dbias == nullptr) return Status::OK();
  return BiasGradFinishCuda(dbias->data<float>(), a.col_partials, tiles, a.cols, /*accumulate=*/true, ctx.stream());
#else
  return Status::Unavailable("Fp8Quantize: CUDA tensor in a build without CUDA");
#endif
}

}  // namespace dtrain::ops
