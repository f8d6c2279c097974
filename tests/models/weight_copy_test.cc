// The 16-bit weight copy's runs (models/weight_copy.h): AppendCopyRun merges a parameter into the last run only when
// both its source and its place in the copy continue it; CastCopyRuns writes each run's f32 source (at the offset
// given) rounded to nearest even into its place and nothing else, on the CPU and, where there is a GPU, on CUDA with
// the same bits.

#include "models/weight_copy.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <memory>
#include <vector>

#include "kernels/bf16_round.h"
#include "tests/testing/grad_check.h"

namespace dtrain::models {
namespace {

bool operator==(const CopyRun& a, const CopyRun& b) { return a.src == b.src && a.dst == b.dst && a.numel == b.numel; }

TEST(WeightCopy, RunsMergeWhenSourceAndPlaceBothContinue) {
  std::vector<CopyRun> runs;
  AppendCopyRun(0, 0, 4, &runs);
  AppendCopyRun(4, 4, 2, &runs);   // both continue: one run
  AppendCopyRun(8, 6, 3, &runs);   // the source skips 2 elements (a parameter not copied)
  AppendCopyRun(11, 0, 3, &runs);  // the place restarts (a layer part every layer shares)
  AppendCopyRun(14, 3, 1, &runs);
  const std::vector<CopyRun> want = {{0, 0, 6}, {8, 6, 3}, {11, 0, 4}};
  ASSERT_EQ(runs.size(), want.size());
  for (size_t i = 0; i < want.size(); ++i) EXPECT_TRUE(runs[i] == want[i]) << i;
}

// params of 20 values, runs of src_offset 3: copy[0, 4) from params[3, 7), copy[6, 9) from params[13, 16); the
// copy's other elements keep their bits.
void CastIntoCopy(DeviceContext& ctx, std::vector<uint16_t>* bits) {
  std::vector<double> values = testing::RandomVector(20, 7, -3, 3);
  values[4] = 1.0 + 0x1p-8;  // a tie: to even (1.0)
  Tensor params, copy;
  DT_ASSERT_OK(testing::MakeTensor(ctx, DType::kF32, {20}, values, &params));
  DT_ASSERT_OK(testing::MakeBf16FromBits(ctx, {10}, std::vector<uint16_t>(10, 0x7fc1), &copy));
  const std::vector<CopyRun> runs = {{0, 0, 4}, {10, 6, 3}};
  DT_ASSERT_OK(CastCopyRuns(ctx, params, 3, runs, &copy));
  DT_ASSERT_OK(testing::FetchBf16Bits(ctx, copy, bits));
  std::vector<uint16_t> want(10, 0x7fc1);
  for (const CopyRun& r : runs) {
    for (int64_t i = 0; i < r.numel; ++i) {
      want[static_cast<size_t>(r.dst + i)] =
          RoundBf16Rne(static_cast<float>(values[static_cast<size_t>(3 + r.src + i)]));
    }
  }
  EXPECT_EQ(*bits, want);
  EXPECT_EQ((*bits)[1], 0x3f80);  // the tie went to even
}

TEST(WeightCopy, CastWritesEachRunRoundedAndNothingElse) {
  std::unique_ptr<DeviceContext> cpu;
  DT_ASSERT_OK(DeviceContext::CreateCpu(&cpu));
  std::vector<uint16_t> bits;
  ASSERT_NO_FATAL_FAILURE(CastIntoCopy(*cpu, &bits));
}

TEST(WeightCopyCuda, CastGivesTheCpuBits) {
  DT_SKIP_WITHOUT_CUDA();
  std::unique_ptr<DeviceContext> cpu, gpu;
  DT_ASSERT_OK(DeviceContext::CreateCpu(&cpu));
  DT_ASSERT_OK(DeviceContext::CreateCuda(0, &gpu));
  std::vector<uint16_t> want, got;
  ASSERT_NO_FATAL_FAILURE(CastIntoCopy(*cpu, &want));
  ASSERT_NO_FATAL_FAILURE(CastIntoCopy(*gpu, &got));
  EXPECT_EQ(got, want);
}

}  // namespace
}  // namespace dtrain::models
