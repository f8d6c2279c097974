#include "runtime/checkpoint/dtype_convert.h"

#include <cstring>
#include <vector>

#include "core/bf16.h"
#include "core/check.h"

namespace dtrain::runtime {

Status CopyF32Into(DeviceContext& ctx, const Tensor& src, Tensor* dst) {
  DT_CHECK_ARG(dst != nullptr, "dst is null");
  DT_CHECK_ARG(src.dtype() == DType::kF32 && src.device() == DeviceType::kCPU && src.numel() == dst->numel(),
               "CopyF32Into: " << src.ToString() << " must be f32 on the CPU with the numel of " << dst->ToString());
  if (dst->dtype() == DType::kF32) return dst->CopyFrom(src, ctx.stream());
  DT_CHECK_ARG(dst->dtype() == DType::kBF16, "CopyF32Into: " << dst->ToString() << " must be f32 or bf16");
  std::vector<uint16_t> bits(static_cast<size_t>(src.numel()));
  const float* in = src.data<float>();
  for (size_t i = 0; i < bits.size(); ++i) bits[i] = RoundBf16Rne(in[i]);
  const Tensor host = Tensor::Wrap(bits.data(), {src.numel()}, DType::kBF16, DeviceType::kCPU);
  DT_RETURN_IF_ERROR(dst->CopyFrom(host, ctx.stream()));
  return ctx.Synchronize();  // sync point: `bits` is freed on return
}

void NarrowF32ToBf16InPlace(void* buf, int64_t n) {
  char* b = static_cast<char*>(buf);
  for (int64_t i = 0; i < n; ++i) {
    float f;
    std::memcpy(&f, b + 4 * i, sizeof(f));
    const uint16_t h = RoundBf16Rne(f);
    std::memcpy(b + 2 * i, &h, sizeof(h));  // bytes [2i, 2i + 2) held f32 value i / 2 <= i: already read
  }
}

void WidenBf16InPlace(void* buf, int64_t n) {
  char* b = static_cast<char*>(buf);
  for (int64_t i = n - 1; i >= 0; --i) {
    uint16_t h;
    std::memcpy(&h, b + 2 * i, sizeof(h));
    const uint32_t u = static_cast<uint32_t>(h) << 16;
    std::memcpy(b + 4 * i, &u, sizeof(u));  // bytes [4i, 4i + 4) held bf16 values 2i, 2i + 1 >= i: already read
  }
}

}  // namespace dtrain::runtime
