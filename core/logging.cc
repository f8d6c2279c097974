#include "core/logging.h"

#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cstdlib>
#include <memory>
#include <mutex>
#include <sstream>
#include <vector>

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

namespace {

std::mutex g_init_mu;
// The current logger of each subsystem; the loggers themselves are owned by Owned() and never freed, so a
// pointer read here stays valid across a later Init (which replaces it).
std::array<std::atomic<spdlog::logger*>, kNames.size()> g_current{};

std::vector<std::shared_ptr<spdlog::logger>>& Owned() {
  static auto* owned = new std::vector<std::shared_ptr<spdlog::logger>>();  // outlives every static destructor
  return *owned;
}

void InitLocked(int rank, const std::string& host) {
  const std::string who = (host.empty() ? Hostname() : host) + ":" + (rank < 0 ? "?" : std::to_string(rank));
  const auto level = LevelFromEnv();
  auto sink = std::make_shared<spdlog::sinks::stderr_color_sink_mt>(spdlog::color_mode::automatic);
  for (size_t i = 0; i < kNames.size(); ++i) {
    const char* name = kNames[i];
    spdlog::drop(name);
    auto logger = std::make_shared<spdlog::logger>(name, sink);
    logger->set_pattern("%H:%M:%S.%e " + who + " %n %L %s:%#] %v");
    logger->set_level(SubsysEnabled(name) ? level : std::max(level, spdlog::level::warn));
    logger->flush_on(spdlog::level::warn);
    spdlog::register_logger(logger);
    Owned().push_back(logger);
    g_current[i].store(logger.get(), std::memory_order_release);
  }
}

}  // namespace

void Init(int rank, const std::string& host) {
  std::lock_guard<std::mutex> lock(g_init_mu);
  InitLocked(rank, host);
}

spdlog::logger* Get(Subsys subsys) {
  const auto i = static_cast<size_t>(subsys);
  spdlog::logger* logger = g_current[i].load(std::memory_order_acquire);
  if (logger != nullptr) return logger;
  std::lock_guard<std::mutex> lock(g_init_mu);
  if (g_current[i].load(std::memory_order_acquire) == nullptr) InitLocked(-1, "");
  return g_current[i].load(std::memory_order_acquire);
}

namespace {
spdlog::level::level_enum ToSpdlog(Level level) {
  switch (level) {
    case Level::kTrace:
      return spdlog::level::trace;
    case Level::kDebug:
      return spdlog::level::debug;
    case Level::kInfo:
      return spdlog::level::info;
    case Level::kWarn:
      return spdlog::level::warn;
    case Level::kError:
      break;
  }
  return spdlog::level::err;
}
}  // namespace

void Flush() {
  for (auto& current : g_current) {
    if (spdlog::logger* logger = current.load(std::memory_order_acquire)) logger->flush();
  }
}

bool Enabled(Subsys subsys, Level level) { return Get(subsys)->should_log(ToSpdlog(level)); }

void Write(Subsys subsys, Level level, const char* file, int line, std::string_view message) {
  Get(subsys)->log(spdlog::source_loc{file, line, ""}, ToSpdlog(level),
                   spdlog::string_view_t(message.data(), message.size()));
}

}  // namespace dtrain::log
