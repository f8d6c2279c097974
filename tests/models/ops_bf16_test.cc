// The bf16 Cast on the GPU, bit for bit against the host conversion (the other 16-bit ops: ops_half_test, for bf16
// and fp16). Needs a GPU and skips without one.
#include <gtest/gtest.h>

#include <cmath>
#include <memory>
#include <vector>

#include "comm/bf16.h"
#include "models/ops/elementwise.h"
#include "runtime/core/check.h"
#include "runtime/core/device_context.h"
#include "tests/testing/grad_check.h"

namespace dtrain::ops {
namespace {

using testing::Fetch;
using testing::MakeTensor;
using testing::RandomVector;

class Bf16Ops : public ::testing::Test {
 protected:
  void SetUp() override {
    DT_SKIP_WITHOUT_CUDA();
    DT_ASSERT_OK(DeviceContext::CreateCpu(&cpu_));
    DT_ASSERT_OK(DeviceContext::CreateCuda(0, &gpu_));
  }
  std::unique_ptr<DeviceContext> cpu_, gpu_;
};

// Cast rounds like the host conversion (round-to-nearest-even, NaN stays NaN) on odd sizes and misaligned views,
// and bf16 -> f32 is exact.
TEST_F(Bf16Ops, CastMatchesHostRoundingBitForBit) {
  for (const int64_t n : {int64_t{1}, int64_t{37}, int64_t{4096}}) {
    std::vector<double> v = RandomVector(n + 1, n, -1e3, 1e3);
    v[0] = NAN;
    if (n > 2) v[2] = 1.0 + 1.0 / 256;  // exactly halfway between two bf16 values: rounds to even (1.0)
    Tensor f32, view, bf16, back;
    DT_ASSERT_OK(MakeTensor(*gpu_, DType::kF32, {n + 1}, v, &f32));
    DT_ASSERT_OK(f32.View(1, {n}, &view));  // 4-byte offset: the scalar path
    for (const Tensor* in : {&f32, &view}) {
      DT_ASSERT_OK(Tensor::Empty(in->shape(), DType::kBF16, gpu_->allocator(), &bf16));
      DT_ASSERT_OK(Cast(*gpu_, *in, &bf16));
      std::vector<uint16_t> bits(in->numel());
      Tensor host = Tensor::Wrap(bits.data(), in->shape(), DType::kBF16, DeviceType::kCPU);
      DT_ASSERT_OK(host.CopyFrom(bf16, gpu_->stream()));
      DT_ASSERT_OK(gpu_->Synchronize());
      const int64_t off = in == &view ? 1 : 0;
      for (int64_t i = 0; i < in->numel(); ++i) {
        const float x = static_cast<float>(v[i + off]);
        if (std::isnan(x)) {  // any NaN encoding (the device's is 0x7FFF, the host's 0x7FC0)
          ASSERT_TRUE((bits[i] & 0x7F80) == 0x7F80 && (bits[i] & 0x7F) != 0) << "n=" << n << " i=" << i;
          continue;
        }
        ASSERT_EQ(bits[i], comm::F32ToBf16(x)) << "n=" << n << " i=" << i;
      }
      DT_ASSERT_OK(Tensor::Empty(in->shape(), DType::kF32, gpu_->allocator(), &back));
      DT_ASSERT_OK(Cast(*gpu_, bf16, &back));
      std::vector<double> got;
      DT_ASSERT_OK(Fetch(*gpu_, back, &got));
      for (int64_t i = 0; i < in->numel(); ++i) {
        const double want = comm::Bf16ToF32(bits[i]);
        ASSERT_TRUE(got[i] == want || (std::isnan(got[i]) && std::isnan(want))) << i;
      }
    }
  }
}

}  // namespace
}  // namespace dtrain::ops
