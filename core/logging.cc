#include "core/logging.h"

#include <spdlog/sinks/stdout_color_sinks.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cstdlib>
#include <sstream>

namespace dtrain::log {
namespace {

constexpr std::array<const char*, 6> kNames = {"core", "comm", "runtime", "data", "model", "launcher"};

spdlog::level::level_enum LevelFromEnv() {
  const char* env = std::getenv("DTRAIN_LOG_LEVEL");
  if (env == nullptr || *env == '\0') return spdlog::level::info;
  auto level = spdlog::level::from_str(env);
  // spdlog maps unknown names to "off"; an unknown name should not silence everything.
  if (level == spdlog::level::off && std::string(env) != "off") {
    std::fprintf(stderr, "dtrain: DTRAIN_LOG_LEVEL='%s' is not one of trace|debug|info|warn|error|off; using info\n",
                 env);
    return spdlog::level::info;
  }
  return level;
}

bool SubsysEnabled(const std::string& name) {
  const char* env = std::getenv("DTRAIN_LOG_SUBSYS");
  if (env == nullptr || *env == '\0') return true;
  std::stringstream ss(env);
  std::string item;
  while (std::getline(ss, item, ',')) {
    if (item == name || item == "all") return true;
  }
  return false;
}

}  // namespace

std::string Hostname() {
  char buf[256] = {0};
  if (gethostname(buf, sizeof(buf) - 1) != 0) return "unknown";
  std::string host(buf);
  return host.substr(0, host.find('.'));
}

void Init(int rank, const std::string& host) {
  const std::string who = (host.empty() ? Hostname() : host) + ":" + (rank < 0 ? "?" : std::to_string(rank));
  const auto level = LevelFromEnv();
  auto sink = std::make_shared<spdlog::sinks::stderr_color_sink_mt>(spdlog::color_mode::automatic);
  for (const char* name : kNames) {
    spdlog::drop(name);
    auto logger = std::make_shared<spdlog::logger>(name, sink);
    logger->set_pattern("%H:%M:%S.%e " + who + " %n %L %s:%#] %v");
    logger->set_level(SubsysEnabled(name) ? level : std::max(level, spdlog::level::warn));
    logger->flush_on(spdlog::level::warn);
    spdlog::register_logger(logger);
  }
}

spdlog::logger* Get(Subsys subsys) {
  const char* name = kNames[static_cast<int>(subsys)];
  auto logger = spdlog::get(name);
  if (!logger) {
    Init(-1);
    logger = spdlog::get(name);
  }
  return logger.get();
}

}  // namespace dtrain::log
