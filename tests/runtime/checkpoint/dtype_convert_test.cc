// Tests of runtime/checkpoint/dtype_convert.h: checkpoint files hold f32; bf16 params and optimizer state are widened
// in place on save (exactly) and narrowed on restore (round to nearest even: a bf16 value comes back bit for bit).
#include "runtime/checkpoint/dtype_convert.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <memory>
#include <vector>

#include "core/device_context.h"

namespace dtrain::runtime {
namespace {

float FromBits(uint32_t u) {
  float f;
  std::memcpy(&f, &u, sizeof(f));
  return f;
}

TEST(DtypeConvert, WidenInPlaceThenNarrowIsTheIdentity) {
  // bf16 bit patterns: 1, -2, the smallest normal, a subnormal, inf, a NaN, 0, -0 and a run of ordinary values.
  std::vector<uint16_t> bits = {0x3f80, 0xc000, 0x0080, 0x0001, 0x7f80, 0x7fc1, 0x0000, 0x8000};
  for (uint16_t b = 0x3c00; b < 0x3c40; ++b) bits.push_back(b);
  const int64_t n = static_cast<int64_t>(bits.size());
  std::vector<float> buf(n);  // 4n bytes; the bf16 values in the first 2n
  std::memcpy(buf.data(), bits.data(), bits.size() * sizeof(uint16_t));
  WidenBf16InPlace(buf.data(), n);
  for (int64_t i = 0; i < n; ++i) {
    const float want = FromBits(static_cast<uint32_t>(bits[i]) << 16);
    if (std::isnan(want)) {
      EXPECT_TRUE(std::isnan(buf[i])) << i;
    } else {
      EXPECT_EQ(buf[i], want) << i;
    }
  }
  std::unique_ptr<DeviceContext> cpu;
  ASSERT_TRUE(DeviceContext::CreateCpu(&cpu).ok());
  std::vector<uint16_t> back(n);
  Tensor src = Tensor::Wrap(buf.data(), {n}, DType::kF32, DeviceType::kCPU);
  Tensor dst = Tensor::Wrap(back.data(), {n}, DType::kBF16, DeviceType::kCPU);
  ASSERT_TRUE(CopyF32Into(*cpu, src, &dst).ok());
  EXPECT_EQ(back, bits);
}

TEST(DtypeConvert, NarrowRoundsToNearestEven) {
  std::unique_ptr<DeviceContext> cpu;
  ASSERT_TRUE(DeviceContext::CreateCpu(&cpu).ok());
  // 1 + 2^-8 is halfway between bf16 1 and 1 + 2^-7: ties to even (1); a little more rounds up.
  std::vector<float> f = {1.0f + 0x1p-8f, 1.0f + 0x1p-8f + 0x1p-20f, 1.0f + 3 * 0x1p-8f};
  std::vector<uint16_t> b(3);
  Tensor src = Tensor::Wrap(f.data(), {3}, DType::kF32, DeviceType::kCPU);
  Tensor dst = Tensor::Wrap(b.data(), {3}, DType::kBF16, DeviceType::kCPU);
  ASSERT_TRUE(CopyF32Into(*cpu, src, &dst).ok());
  EXPECT_EQ(b, (std::vector<uint16_t>{0x3f80, 0x3f81, 0x3f82}));
  // f32 into f32 is a copy; other dtypes and sizes are refused.
  std::vector<float> g(3);
  Tensor same = Tensor::Wrap(g.data(), {3}, DType::kF32, DeviceType::kCPU);
  ASSERT_TRUE(CopyF32Into(*cpu, src, &same).ok());
  EXPECT_EQ(g, f);
  std::vector<double> d(3);
  Tensor f64 = Tensor::Wrap(d.data(), {3}, DType::kF64, DeviceType::kCPU);
  EXPECT_EQ(CopyF32Into(*cpu, src, &f64).code(), Status::Code::kInvalidArgument);
  Tensor two = Tensor::Wrap(b.data(), {2}, DType::kBF16, DeviceType::kCPU);
  EXPECT_EQ(CopyF32Into(*cpu, src, &two).code(), Status::Code::kInvalidArgument);
}

}  // namespace
}  // namespace dtrain::runtime
