// GpuAlarm: the idle alarm fires once per idle stretch after run.gpu_idle_s seconds under the threshold, a busy
// window ends the stretch, throttle reasons are reported when they change, and gpu_idle_exit turns the idle verdict
// into a stop request.

#include "runtime/observe/gpu_alarm.h"

#include <gtest/gtest.h>

namespace dtrain::runtime {
namespace {

GpuWindow Window(double util_pct, uint64_t throttle = 0) {
  GpuWindow w;
  w.samples = 5;
  w.util_pct = util_pct;
  w.throttle = throttle;
  return w;
}

TEST(GpuAlarm, IdleIsReportedOnceAfterTheIdleTimeAndAgainOnlyAfterABusyWindow) {
  GpuAlarm alarm({/*idle_util_pct=*/30, /*idle_s=*/10, /*exit_when_idle=*/false});
  EXPECT_EQ(alarm.Observe(Window(12), 4).idle, "");
  EXPECT_EQ(alarm.Observe(Window(29.9), 4).idle, "");
  EXPECT_DOUBLE_EQ(alarm.idle_s(), 8);
  const GpuAlarmEvents ev = alarm.Observe(Window(5), 4);
  EXPECT_EQ(ev.idle, "under 30% busy for 12 s (5% now)");
  EXPECT_FALSE(ev.stop);
  EXPECT_EQ(alarm.Observe(Window(5), 4).idle, "") << "once per idle stretch";
  EXPECT_EQ(alarm.Observe(Window(30), 4).idle, "") << "30% is not under 30%: the stretch ends";
  EXPECT_DOUBLE_EQ(alarm.idle_s(), 0);
  EXPECT_EQ(alarm.Observe(Window(1), 6).idle, "");
  EXPECT_EQ(alarm.Observe(Window(1), 6).idle, "under 30% busy for 12 s (1% now)");
}

TEST(GpuAlarm, AWindowWithoutSamplesNeitherCountsNorEndsTheStretch) {
  GpuAlarm alarm({30, 10, false});
  alarm.Observe(Window(0), 6);
  EXPECT_EQ(alarm.Observe(GpuWindow(), 100).idle, "");
  EXPECT_DOUBLE_EQ(alarm.idle_s(), 6);
  EXPECT_EQ(alarm.Observe(Window(0), 6).idle, "under 30% busy for 12 s (0% now)");
}

TEST(GpuAlarm, IdleExitAsksToStopInEveryIdleWindowFromTheVerdictOn) {
  GpuAlarm alarm({50, 2, true});
  EXPECT_FALSE(alarm.Observe(Window(10), 1).stop);
  const GpuAlarmEvents ev = alarm.Observe(Window(10), 1);
  EXPECT_TRUE(ev.stop);
  EXPECT_EQ(ev.idle, "under 50% busy for 2 s (10% now)");
  EXPECT_TRUE(alarm.Observe(Window(10), 1).stop);
  EXPECT_FALSE(alarm.Observe(Window(90), 1).stop);
}

TEST(GpuAlarm, ThrottleReasonsAreReportedWhenTheyChange) {
  GpuAlarm alarm({30, 60, false});
  EXPECT_EQ(alarm.Observe(Window(100, 0x4), 1).throttle, "power cap");
  EXPECT_EQ(alarm.Observe(Window(100, 0x4), 1).throttle, "") << "same reasons: already reported";
  EXPECT_EQ(alarm.Observe(Window(100, 0x4 | 0x20), 1).throttle, "power cap, thermal (software)");
  EXPECT_EQ(alarm.Observe(Window(100, 0), 1).throttle, "");
  EXPECT_EQ(alarm.Observe(Window(100, 0x1), 1).throttle, "") << "0x1 (GPU idle) does not slow the GPU down";
  EXPECT_EQ(alarm.Observe(Window(100, 0x4), 1).throttle, "power cap") << "again after it went away";
}

}  // namespace
}  // namespace dtrain::runtime
