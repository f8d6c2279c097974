// Tests of runtime/lr_schedule: warmup and cosine values at their defining points, and validation.
#include "runtime/optim/lr_schedule.h"

#include <gtest/gtest.h>

#include <cmath>
#include <memory>

namespace dtrain::runtime {
namespace {

TEST(LrSchedule, CosineWithWarmupAtItsDefiningPoints) {
  // lr 0.1, warmup 10, total 110, min ratio 0.1 (min lr 0.01).
  std::unique_ptr<LrSchedule> s;
  ASSERT_TRUE(LrSchedule::Create("cosine", 0.1, 10, 110, 0.1, &s).ok());
  EXPECT_DOUBLE_EQ(s->LrAt(0), 0.1 / 10);           // warmup start: lr / warmup
  EXPECT_DOUBLE_EQ(s->LrAt(4), 0.1 * 5 / 10);       // linear
  EXPECT_DOUBLE_EQ(s->LrAt(9), 0.1);                // warmup end: lr
  EXPECT_DOUBLE_EQ(s->LrAt(10), 0.1);               // cosine start
  EXPECT_DOUBLE_EQ(s->LrAt(60), (0.1 + 0.01) / 2);  // cosine midpoint
  // A quarter of the way: min + (lr - min) * (1 + cos(pi/4)) / 2.
  EXPECT_NEAR(s->LrAt(35), 0.01 + 0.09 * (1 + std::sqrt(0.5)) / 2, 1e-15);
  EXPECT_NEAR(s->LrAt(110), 0.01, 1e-15);  // end
  EXPECT_DOUBLE_EQ(s->LrAt(500), 0.01);    // held after the end
  EXPECT_DOUBLE_EQ(s->LrAt(-3), s->LrAt(0));
  EXPECT_DOUBLE_EQ(s->min_lr(), 0.1 * 0.1);
  // Monotone non-increasing after warmup.
  for (int64_t t = 10; t < 120; ++t) EXPECT_LE(s->LrAt(t + 1), s->LrAt(t)) << t;
}

TEST(LrSchedule, CosineWithoutWarmupDecaysToZero) {
  std::unique_ptr<LrSchedule> s;
  ASSERT_TRUE(LrSchedule::Create("cosine", 1.0, 0, 100, 0.0, &s).ok());
  EXPECT_DOUBLE_EQ(s->LrAt(0), 1.0);
  EXPECT_DOUBLE_EQ(s->LrAt(50), 0.5);
  EXPECT_NEAR(s->LrAt(100), 0.0, 1e-15);
}

TEST(LrSchedule, WarmupEqualToTotalEndsAtMin) {
  std::unique_ptr<LrSchedule> s;
  ASSERT_TRUE(LrSchedule::Create("cosine", 1.0, 4, 4, 0.5, &s).ok());
  EXPECT_DOUBLE_EQ(s->LrAt(3), 1.0);
  EXPECT_DOUBLE_EQ(s->LrAt(4), 0.5);
}

TEST(LrSchedule, ConstantWithAndWithoutWarmup) {
  std::unique_ptr<LrSchedule> s;
  ASSERT_TRUE(LrSchedule::Create("constant", 0.003, 0, 0, 0.0, &s).ok());
  EXPECT_DOUBLE_EQ(s->LrAt(0), 0.003);
  EXPECT_DOUBLE_EQ(s->LrAt(1000000), 0.003);
  ASSERT_TRUE(LrSchedule::Create("constant", 0.004, 4, 0, 0.0, &s).ok());
  EXPECT_DOUBLE_EQ(s->LrAt(0), 0.001);
  EXPECT_DOUBLE_EQ(s->LrAt(1), 0.002);
  EXPECT_DOUBLE_EQ(s->LrAt(3), 0.004);
  EXPECT_DOUBLE_EQ(s->LrAt(100), 0.004);
}

// Schedule steps counted in samples (schedule.samples_per_step): a position between two whole steps lies on the same
// warmup line and cosine curve.
TEST(LrSchedule, FractionalStepsLieOnTheSameCurves) {
  std::unique_ptr<LrSchedule> s;
  ASSERT_TRUE(LrSchedule::Create("cosine", 0.1, 10, 110, 0.1, &s).ok());
  EXPECT_DOUBLE_EQ(s->LrAt(4.5), 0.1 * 5.5 / 10);  // warmup: linear between steps 4 and 5
  EXPECT_DOUBLE_EQ(s->LrAt(60.0), (0.1 + 0.01) / 2);
  const double mid = (s->LrAt(35) + s->LrAt(36)) / 2;
  EXPECT_NEAR(s->LrAt(35.5), mid, 1e-5);  // on the curve, not on the chord: 5.5e-6 apart
  EXPECT_LT(s->LrAt(35.5), s->LrAt(35));
  EXPECT_GT(s->LrAt(35.5), s->LrAt(36));
}

TEST(LrSchedule, WarmupLongerThanTheRunIsClippedToIt) {
  for (const char* kind : {"cosine", "constant"}) {
    std::unique_ptr<LrSchedule> s;
    ASSERT_TRUE(LrSchedule::Create(kind, 0.1, 100, 50, 0.0, &s).ok()) << kind;
    EXPECT_EQ(s->warmup_steps(), 50) << kind;
    EXPECT_DOUBLE_EQ(s->LrAt(0), 0.1 / 50) << kind;  // rises over the whole run
    EXPECT_DOUBLE_EQ(s->LrAt(49), 0.1) << kind;      // and reaches the base LR at its last step
  }
}

TEST(LrSchedule, CreateRejectsBadCombinations) {
  std::unique_ptr<LrSchedule> s;
  auto code = [&](const char* kind, double lr, int64_t warmup, int64_t total, double ratio) {
    return LrSchedule::Create(kind, lr, warmup, total, ratio, &s).code();
  };
  const auto kBad = Status::Code::kInvalidArgument;
  EXPECT_EQ(code("linear", 0.1, 0, 10, 0.0), kBad);
  EXPECT_EQ(code("cosine", 0.1, 0, 0, 0.0), kBad);  // cosine needs a total
  EXPECT_EQ(code("cosine", -0.1, 0, 10, 0.0), kBad);
  EXPECT_EQ(code("cosine", 0.1, -1, 10, 0.0), kBad);
  EXPECT_EQ(code("cosine", 0.1, 0, 10, 1.5), kBad);
  EXPECT_EQ(code("cosine", 0.1, 0, 10, -0.1), kBad);
  EXPECT_EQ(LrSchedule::Create("cosine", 0.1, 0, 10, 0.0, nullptr).code(), kBad);
}

}  // namespace
}  // namespace dtrain::runtime
