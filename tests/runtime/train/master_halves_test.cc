// Split masters' host conversions (runtime/train/master_halves.h): splitting f32 values in place into high halves and
// low halves and joining them back gives the values bit for bit (random bit patterns but NaNs, odd counts); the
// tensor-level copy into the halves and the read of a range of them do too, and the high halves are the params a
// forward reads (the bf16 nearest, ties away).

#include "runtime/train/master_halves.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <memory>
#include <random>
#include <vector>

#include "kernels/bf16_round.h"

namespace dtrain::runtime {
namespace {

std::vector<float> RandomFloats(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<float> v(n);
  for (float& x : v) {
    do {
      const uint32_t u = static_cast<uint32_t>(rng());
      std::memcpy(&x, &u, sizeof(x));
    } while (std::isnan(x));
  }
  return v;
}

TEST(MasterHalves, SplitAndJoinInPlaceGiveTheValuesBack) {
  for (const size_t n : {size_t{1}, size_t{2}, size_t{7}, size_t{4099}}) {
    const std::vector<float> want = RandomFloats(n, static_cast<uint32_t>(n));
    std::vector<float> buf = want;
    std::vector<uint16_t> lo(n);
    SplitMastersInPlace(buf.data(), lo.data(), static_cast<int64_t>(n));
    const auto* hi = reinterpret_cast<const uint16_t*>(buf.data());
    for (size_t i = 0; i < n; ++i) {
      uint16_t h = 0, l = 0;
      ops::SplitF32(want[i], &h, &l);
      ASSERT_EQ(hi[i], h) << i;
      ASSERT_EQ(lo[i], l) << i;
    }
    JoinMastersInPlace(buf.data(), lo.data(), static_cast<int64_t>(n));
    EXPECT_EQ(std::memcmp(buf.data(), want.data(), n * sizeof(float)), 0) << n;
  }
}

TEST(MasterHalves, CopyIntoTheHalvesAndReadARangeBack) {
  std::unique_ptr<DeviceContext> cpu;
  ASSERT_TRUE(DeviceContext::CreateCpu(&cpu).ok());
  constexpr int64_t n = 1001;
  std::vector<float> want = RandomFloats(n, 3);
  Tensor src = Tensor::Wrap(want.data(), {n}, DType::kF32, DeviceType::kCPU), hi, lo;
  ASSERT_TRUE(Tensor::Empty({n}, DType::kBF16, cpu->allocator(), &hi).ok());
  ASSERT_TRUE(Tensor::Empty({n}, DType::kBF16, cpu->allocator(), &lo).ok());
  ASSERT_TRUE(CopyF32IntoMasters(*cpu, src, &hi, &lo).ok());
  std::vector<float> got(300);
  ASSERT_TRUE(ReadMasters(*cpu, hi, lo, 700, 300, got.data()).ok());
  EXPECT_EQ(std::memcmp(got.data(), want.data() + 700, 300 * sizeof(float)), 0);
  // Bad arguments: a range past the end, f32 halves.
  EXPECT_EQ(ReadMasters(*cpu, hi, lo, 900, 300, got.data()).code(), Status::Code::kInvalidArgument);
  EXPECT_EQ(CopyF32IntoMasters(*cpu, src, &hi, &src).code(), Status::Code::kInvalidArgument);
}

}  // namespace
}  // namespace dtrain::runtime
