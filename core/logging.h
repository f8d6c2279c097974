#pragma once
// Logging: spdlog named loggers, one per subsystem, with a `host:rank` prefix.
//
//   DTRAIN_LOG_LEVEL   trace|debug|info|warn|error|off   (default info)
//   DTRAIN_LOG_SUBSYS  comma list (core,comm,runtime,data,model,launcher); when set, only these
//                      subsystems log below warn — like NCCL_DEBUG_SUBSYS.
//
// Pattern: "12:00:01.123 host:rank comm I  file.cc:42] message". Thread-safe (spdlog's mt sinks).
// Log through the DT_LOG_* macros so that file:line is kept and disabled levels cost no formatting.

#include <fmt/format.h>

#include <string>
#include <string_view>

namespace spdlog {
class logger;
}

namespace dtrain::log {

enum class Subsys { kCore, kComm, kRuntime, kData, kModel, kLauncher };
enum class Level { kTrace, kDebug, kInfo, kWarn, kError };

// (Re)creates the loggers with this process's identity. Safe to call more than once (the launcher
// calls it before the rank is known, the worker again after MPI_Init). Reads the env knobs.
void Init(int rank, const std::string& host = "");

// The logger of a subsystem; initialises with rank -1 ("?") if Init was not called. The pointer stays
// valid for the life of the process (a later Init replaces the logger but keeps the old one alive).
spdlog::logger* Get(Subsys subsys);

// Whether a message of `level` from `subsys` would be written now (its logger's level).
bool Enabled(Subsys subsys, Level level);

// Writes one formatted message with its source location. The DT_LOG_* macros call this; spdlog's
// templates stay in logging.cc, so a file that logs pays for fmt::format only.
void Write(Subsys subsys, Level level, const char* file, int line, std::string_view message);

// Writes out what every logger holds (before a process ends itself without unwinding).
void Flush();

// Hostname of this machine (short form), for prefixes and error messages.
std::string Hostname();

}  // namespace dtrain::log

// Formats only when the level is enabled (DTRAIN_LOG_LEVEL / DTRAIN_LOG_SUBSYS, checked at run time: one
// atomic load when disabled).
#define DT_LOG_AT_(sub, level, ...)                                                                            \
  do {                                                                                                         \
    if (::dtrain::log::Enabled(::dtrain::log::Subsys::sub, level)) {                                           \
      ::dtrain::log::Write(::dtrain::log::Subsys::sub, level, __FILE__, __LINE__, ::fmt::format(__VA_ARGS__)); \
    }                                                                                                          \
  } while (false)

#define DT_LOG_TRACE(sub, ...) DT_LOG_AT_(sub, ::dtrain::log::Level::kTrace, __VA_ARGS__)
#define DT_LOG_DEBUG(sub, ...) DT_LOG_AT_(sub, ::dtrain::log::Level::kDebug, __VA_ARGS__)
#define DT_LOG_INFO(sub, ...) DT_LOG_AT_(sub, ::dtrain::log::Level::kInfo, __VA_ARGS__)
#define DT_LOG_WARN(sub, ...) DT_LOG_AT_(sub, ::dtrain::log::Level::kWarn, __VA_ARGS__)
#define DT_LOG_ERROR(sub, ...) DT_LOG_AT_(sub, ::dtrain::log::Level::kError, __VA_ARGS__)
