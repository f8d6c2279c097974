// CpuAllocator's counters: bytes in use (each block as RoundSize counts it) and their peak, ResetPeak, and
// DeviceContext::memory_stats() reading the host allocator of a CPU context (the memory plan's measured side).
#include "core/allocator.h"

#include <gtest/gtest.h>

#include <memory>

#include "core/device_context.h"
#include "core/tensor.h"

namespace dtrain {
namespace {

TEST(CpuAllocator, CountsBlocksInUseAndThePeak) {
  EXPECT_EQ(CpuAllocator::RoundSize(0), 64u);
  EXPECT_EQ(CpuAllocator::RoundSize(1), 64u);
  EXPECT_EQ(CpuAllocator::RoundSize(64), 64u);
  EXPECT_EQ(CpuAllocator::RoundSize(65), 128u);
  CpuAllocator a;
  void *p = nullptr, *q = nullptr;
  ASSERT_TRUE(a.Allocate(100, &p).ok());      // 128
  ASSERT_TRUE(a.Allocate(1 << 20, &q).ok());  // 1 MiB
  EXPECT_EQ(a.stats().bytes_in_use, 128 + (1 << 20));
  a.Free(q);
  EXPECT_EQ(a.stats().bytes_in_use, 128);
  EXPECT_EQ(a.stats().peak_bytes_in_use, 128 + (1 << 20));
  a.ResetPeak();
  EXPECT_EQ(a.stats().peak_bytes_in_use, 128);
  a.Free(p);
  a.Free(nullptr);
  EXPECT_EQ(a.stats().bytes_in_use, 0);
  EXPECT_EQ(a.stats().peak_bytes_in_use, 128);
}

TEST(CpuAllocator, ACpuContextReportsItsHostAllocator) {
  std::unique_ptr<DeviceContext> ctx;
  ASSERT_TRUE(DeviceContext::CreateCpu(&ctx).ok());
  const int64_t before = ctx->memory_stats().bytes_in_use;
  {
    Tensor t;
    ASSERT_TRUE(Tensor::Empty({1000}, DType::kF32, ctx->allocator(), &t).ok());
    EXPECT_EQ(ctx->memory_stats().bytes_in_use, before + 4032);  // 4000 B in 64 B granules
  }
  EXPECT_EQ(ctx->memory_stats().bytes_in_use, before);
  EXPECT_EQ(ctx->memory_stats().peak_bytes_in_use, before + 4032);
  ctx->ResetMemoryPeak();
  EXPECT_EQ(ctx->memory_stats().peak_bytes_in_use, before);
}

}  // namespace
}  // namespace dtrain
