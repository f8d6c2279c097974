#include "launcher/attempt_log.h"

#include <filesystem>

#include "core/clock.h"
#include "core/logging.h"

namespace dtrain::launcher {

void AttemptLog::Write(int attempt, const std::vector<HostSlots>& hosts, int world, double start, double noticed,
                       const std::string& reason, const std::vector<std::string>& lost) {
  if (!ok_) return;
  if (writer_.path().empty()) {
    std::error_code ec;
    std::filesystem::create_directories(run_dir_, ec);
    const Status st = writer_.Open(run_dir_ + "/elastic.jsonl");
    if (!st.ok()) {
      DT_LOG_WARN(kLauncher, "no elastic.jsonl record of the attempts: {}", st.ToString());
      ok_ = false;
      return;
    }
  }
  std::string names;
  for (const HostSlots& h : hosts) names += (names.empty() ? "" : ",") + h.name;
  std::string lost_names;
  for (const std::string& h : lost) lost_names += (lost_names.empty() ? "" : ",") + h;
  const Status st = writer_.Write(runtime::JsonLine()
                                      .Add("kind", std::string("attempt"))
                                      .Add("attempt", static_cast<int64_t>(attempt))
                                      .Add("hosts", names)
                                      .Add("world", static_cast<int64_t>(world))
                                      .Add("start", start)
                                      .Add("end", WallSeconds())
                                      .Add("noticed", noticed)
                                      .Add("reason", reason)
                                      .Add("lost", lost_names));
  if (!st.ok()) {
    DT_LOG_WARN(kLauncher, "elastic.jsonl: {}", st.ToString());
    ok_ = false;
  }
}

}  // namespace dtrain::launcher
