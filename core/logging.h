#pragma once
// Logging: spdlog named loggers, one per subsystem, with a `host:rank` prefix.
//
//   DTRAIN_LOG_LEVEL   trace|debug|info|warn|error|off   (default info)
//   DTRAIN_LOG_SUBSYS  comma list (core,comm,runtime,data,model,launcher); when set, only these
//                      subsystems log below warn — like NCCL_DEBUG_SUBSYS.
//
// Pattern: "12:00:01.123 host:rank comm I  file.cc:42] message". Thread-safe (spdlog's mt sinks).
// Log through the DT_LOG_* macros so that file:line is kept and trace compiles out in release.

#include <spdlog/spdlog.h>

#include <string>

namespace dtrain::log {

enum class Subsys { kCore, kComm, kRuntime, kData, kModel, kLauncher };

// (Re)creates the loggers with this process's identity. Safe to call more than once (the launcher
// calls it before the rank is known, the worker again after MPI_Init). Reads the env knobs.
void Init(int rank, const std::string& host = "");

// The logger of a subsystem; initialises with rank -1 ("?") if Init was not called.
spdlog::logger* Get(Subsys subsys);

// Hostname of this machine (short form), for prefixes and error messages.
std::string Hostname();

}  // namespace dtrain::log

#define DT_LOG_TRACE(sub, ...) SPDLOG_LOGGER_TRACE(::dtrain::log::Get(::dtrain::log::Subsys::sub), __VA_ARGS__)
#define DT_LOG_DEBUG(sub, ...) SPDLOG_LOGGER_DEBUG(::dtrain::log::Get(::dtrain::log::Subsys::sub), __VA_ARGS__)
#define DT_LOG_INFO(sub, ...) SPDLOG_LOGGER_INFO(::dtrain::log::Get(::dtrain::log::Subsys::sub), __VA_ARGS__)
#define DT_LOG_WARN(sub, ...) SPDLOG_LOGGER_WARN(::dtrain::log::Get(::dtrain::log::Subsys::sub), __VA_ARGS__)
#define DT_LOG_ERROR(sub, ...) SPDLOG_LOGGER_ERROR(::dtrain::log::Get(::dtrain::log::Subsys::sub), __VA_ARGS__)
