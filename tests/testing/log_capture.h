#pragma once
// LogCapture: while alive, everything one subsystem's logger writes (at every level) is also kept in
// memory, for tests that assert what was logged. Not thread-safe against other captures of the same
// logger; the logger itself may log from any thread.

#include <spdlog/logger.h>
#include <spdlog/sinks/ostream_sink.h>

#include <memory>
#include <sstream>
#include <string>

#include "core/logging.h"

namespace dtrain::testing {

class LogCapture {
 public:
  explicit LogCapture(log::Subsys subsys = log::Subsys::kRuntime)
      : sink_(std::make_shared<spdlog::sinks::ostream_sink_mt>(os_)) {
    logger_ = log::Get(subsys);
    old_level_ = logger_->level();
    logger_->sinks().push_back(sink_);
    logger_->set_level(spdlog::level::trace);
  }
  ~LogCapture() {
    logger_->sinks().pop_back();
    logger_->set_level(old_level_);
  }
  LogCapture(const LogCapture&) = delete;
  LogCapture& operator=(const LogCapture&) = delete;

  std::string text() const {
    sink_->flush();
    return os_.str();
  }

 private:
  std::ostringstream os_;
  std::shared_ptr<spdlog::sinks::ostream_sink_mt> sink_;
  spdlog::logger* logger_;
  spdlog::level::level_enum old_level_;
};

}  // namespace dtrain::testing
