#include "core/logging.h"

#include <gtest/gtest.h>
#include <spdlog/logger.h>
#include <stdlib.h>

#include <string>

#include "tests/testing/log_capture.h"

namespace dtrain {
namespace {

int Counted(int* calls) {
  ++*calls;
  return 42;
}

TEST(Logging, DebugIsWrittenWhenEnabledAndNotFormattedWhenNot) {
  testing::LogCapture capture(log::Subsys::kData);  // trace and above, spdlog's default pattern
  int calls = 0;
  const int debug_line = __LINE__ + 1;
  DT_LOG_DEBUG(kData, "debug value {}", Counted(&calls));
  EXPECT_EQ(calls, 1);
  const std::string debug_text = "[data] [debug] [logging_test.cc:" + std::to_string(debug_line) + "] debug value 42";
  EXPECT_NE(capture.text().find(debug_text), std::string::npos) << capture.text();

  log::Get(log::Subsys::kData)->set_level(spdlog::level::info);
  DT_LOG_DEBUG(kData, "hidden {}", Counted(&calls));
  DT_LOG_TRACE(kData, "hidden {}", Counted(&calls));
  EXPECT_EQ(calls, 1);  // a disabled level does not even evaluate its arguments
  EXPECT_EQ(capture.text().find("hidden"), std::string::npos) << capture.text();
  const int warn_line = __LINE__ + 1;
  DT_LOG_WARN(kData, "shown {}", Counted(&calls));
  EXPECT_EQ(calls, 2);
  const std::string warn_text = "[data] [warning] [logging_test.cc:" + std::to_string(warn_line) + "] shown 42";
  EXPECT_NE(capture.text().find(warn_text), std::string::npos) << capture.text();
}

TEST(Logging, LevelAndSubsystemsComeFromTheEnvironment) {
  ::setenv("DTRAIN_LOG_LEVEL", "debug", 1);
  ::setenv("DTRAIN_LOG_SUBSYS", "data", 1);
  log::Init(3, "node7");
  EXPECT_TRUE(log::Enabled(log::Subsys::kData, log::Level::kDebug));
  EXPECT_FALSE(log::Enabled(log::Subsys::kData, log::Level::kTrace));
  // Other subsystems stay at warn and above.
  EXPECT_FALSE(log::Enabled(log::Subsys::kComm, log::Level::kDebug));
  EXPECT_FALSE(log::Enabled(log::Subsys::kComm, log::Level::kInfo));
  EXPECT_TRUE(log::Enabled(log::Subsys::kComm, log::Level::kWarn));
  ::unsetenv("DTRAIN_LOG_LEVEL");
  ::unsetenv("DTRAIN_LOG_SUBSYS");
  log::Init(-1);
  EXPECT_TRUE(log::Enabled(log::Subsys::kComm, log::Level::kInfo));
  EXPECT_FALSE(log::Enabled(log::Subsys::kComm, log::Level::kDebug));
}

TEST(Logging, APointerFromGetStaysValidAcrossInit) {
  spdlog::logger* before = log::Get(log::Subsys::kModel);
  log::Init(0, "h");
  spdlog::logger* after = log::Get(log::Subsys::kModel);
  EXPECT_NE(before, after);
  EXPECT_EQ(before->name(), "model");  // still alive (ASan would report a use after free)
  EXPECT_EQ(after->name(), "model");
  log::Flush();
}

}  // namespace
}  // namespace dtrain
