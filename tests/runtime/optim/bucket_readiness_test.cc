#include "runtime/optim/bucket_readiness.h"

#include <gtest/gtest.h>

#include <utility>

namespace dtrain::runtime {
namespace {

using Range = std::pair<int, int>;

// Three buckets over four params, as Zero1Optimizer's layout can make them: param 2 straddles
// buckets 0 and 1 (bucket 0 = the end of the buffer, launched first).
BucketReadiness Straddling() { return BucketReadiness("Test", {{2}, {1}, {0, 1}, {0}}, 3, {"a", "b", "c", "d"}); }

TEST(BucketReadiness, BucketsLaunchInOrderOnceEveryOverlappingParamIsIn) {
  BucketReadiness r = Straddling();
  ASSERT_TRUE(r.Mark(3).ok());
  EXPECT_EQ(r.TakeReady(), Range(0, 0)) << "bucket 0 still waits for param 2";
  ASSERT_TRUE(r.Mark(0).ok());
  EXPECT_EQ(r.TakeReady(), Range(0, 0)) << "bucket 2 is complete but bucket 0 must go first";
  ASSERT_TRUE(r.Mark(2).ok());
  EXPECT_EQ(r.TakeReady(), Range(0, 1)) << "bucket 1 still waits for param 1";
  EXPECT_EQ(r.TakeReady(), Range(1, 1));
  ASSERT_TRUE(r.Mark(1).ok());
  EXPECT_EQ(r.TakeReady(), Range(1, 3));
  EXPECT_EQ(r.Finish(), Range(3, 3));
  EXPECT_TRUE(r.step_sync());
}

TEST(BucketReadiness, FinishHandsOverWhatWasNotTakenAndStartsANewStep) {
  BucketReadiness r = Straddling();
  ASSERT_TRUE(r.Mark(1).ok());
  EXPECT_EQ(r.TakeReady(), Range(0, 0));
  EXPECT_EQ(r.Finish(), Range(0, 3));
  ASSERT_TRUE(r.Mark(1).ok()) << "a new step accepts the same parameter again";
}

TEST(BucketReadiness, ATwiceAnnouncedOrUnknownParamIsRefused) {
  BucketReadiness r = Straddling();
  ASSERT_TRUE(r.Mark(2).ok());
  const Status twice = r.Mark(2);
  EXPECT_EQ(twice.code(), Status::Code::kFailedPrecondition);
  EXPECT_NE(twice.message().find("Test: param 2 'c' announced twice"), std::string::npos) << twice.ToString();
  EXPECT_EQ(r.Mark(4).code(), Status::Code::kInvalidArgument);
  EXPECT_EQ(r.Mark(-1).code(), Status::Code::kInvalidArgument);
}

TEST(BucketReadiness, SyncIsLatchedByTheFirstMarkOfAStep) {
  BucketReadiness r = Straddling();
  r.set_sync(false);
  ASSERT_TRUE(r.Mark(3).ok());
  r.set_sync(true);  // mid-step: only the next step sees it
  EXPECT_FALSE(r.step_sync());
  r.Finish();
  EXPECT_FALSE(r.step_sync());
  ASSERT_TRUE(r.Mark(3).ok());
  EXPECT_TRUE(r.step_sync());
  r.Finish();
  r.set_sync(false);
  r.Finish();  // a step without any Mark latches at Finish
  EXPECT_FALSE(r.step_sync());
}

}  // namespace
}  // namespace dtrain::runtime
