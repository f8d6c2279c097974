#include "runtime/train/master_halves.h"

#include <cstring>
#include <vector>

#include "core/check.h"
#include "kernels/bf16_round.h"

namespace dtrain::runtime {

void JoinMastersInPlace(void* buf, const uint16_t* lo, int64_t n) {
  char* b = static_cast<char*>(buf);
  for (int64_t i = n - 1; i >= 0; --i) {
    uint16_t hi;
    std::memcpy(&hi, b + 2 * i, sizeof(hi));
    const float f = ops::JoinF32(hi, lo[i]);
    std::memcpy(b + 4 * i, &f, sizeof(f));  // bytes [4i, 4i + 4) held high halves 2i, 2i + 1 >= i: already read
  }
}

void SplitMastersInPlace(void* buf, uint16_t* lo, int64_t n) {
  char* b = static_cast<char*>(buf);
  for (int64_t i = 0; i < n; ++i) {
    float f;
    std::memcpy(&f, b + 4 * i, sizeof(f));
    uint16_t hi;
    ops::SplitF32(f, &hi, &lo[i]);
    std::memcpy(b + 2 * i, &hi, sizeof(hi));  // bytes [2i, 2i + 2) held f32 value i / 2 <= i: already read
  }
}

Status CopyF32IntoMasters(DeviceContext& ctx, const Tensor& src, Tensor* hi, Tensor* lo) {
  DT_CHECK_ARG(hi != nullptr && lo != nullptr, "CopyF32IntoMasters: hi and lo must not be null");
  DT_CHECK_ARG(src.dtype() == DType::kF32 && src.device() == DeviceType::kCPU && hi->dtype() == DType::kBF16 &&
                   lo->dtype() == DType::kBF16 && hi->numel() == src.numel() && lo->numel() == src.numel(),
               "CopyF32IntoMasters: " << src.ToString() << " must be f32 on the CPU, " << hi->ToString() << " and "
                                      << lo->ToString() << " bf16 of its numel");
  const size_t n = static_cast<size_t>(src.numel());
  std::vector<uint16_t> h(n), l(n);
  const float* in = src.data<float>();
  for (size_t i = 0; i < n; ++i) ops::SplitF32(in[i], &h[i], &l[i]);
  const Tensor hh = Tensor::Wrap(h.data(), {src.numel()}, DType::kBF16, DeviceType::kCPU);
  const Tensor hl = Tensor::Wrap(l.data(), {src.numel()}, DType::kBF16, DeviceType::kCPU);
  DT_RETURN_IF_ERROR(hi->CopyFrom(hh, ctx.stream()));
  DT_RETURN_IF_ERROR(lo->CopyFrom(hl, ctx.stream()));
  return ctx.Synchronize();  // sync point: h and l are freed on return
}

Status ReadMasters(DeviceContext& ctx, const Tensor& hi, const Tensor& lo, int64_t offset, int64_t n, float* dst) {
  DT_CHECK_ARG(
      dst != nullptr && hi.dtype() == DType::kBF16 && lo.dtype() == DType::kBF16 && offset >= 0 && n >= 0 &&
          offset + n <= hi.numel() && hi.numel() == lo.numel(),
      "ReadMasters: [" << offset << ", " << offset + n << ") of " << hi.ToString() << " and " << lo.ToString());
  Tensor h, l;
  DT_RETURN_IF_ERROR(hi.View(offset, {n}, &h));
  DT_RETURN_IF_ERROR(lo.View(offset, {n}, &l));
  std::vector<uint16_t> low(static_cast<size_t>(n));
  Tensor to_hi = Tensor::Wrap(dst, {n}, DType::kBF16, DeviceType::kCPU);  // the first half of dst's bytes
  Tensor to_lo = Tensor::Wrap(low.data(), {n}, DType::kBF16, DeviceType::kCPU);
  DT_RETURN_IF_ERROR(to_hi.CopyFrom(h, ctx.stream()));
  DT_RETURN_IF_ERROR(to_lo.CopyFrom(l, ctx.stream()));
  DT_RETURN_IF_ERROR(ctx.Synchronize());  // sync point: the copies are in host memory
  JoinMastersInPlace(dst, low.data(), n);
  return Status::OK();
}

}  // namespace dtrain::runtime
