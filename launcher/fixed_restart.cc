#include "launcher/fixed_restart.h"

#include <memory>
#include <string>

#include "core/logging.h"
#include "launcher/attempt_outcome.h"

namespace dtrain::launcher {
namespace {

class FixedRestart : public RestartPolicy {
 public:
  FixedRestart(const LaunchOptions& opts, const LaunchEnv& env) : opts_(opts), env_(env) {}

  int Plan(int attempt, int /*failures*/, AttemptPlan* plan) override {
    const Status st = BuildLaunchCommand(opts_, env_, attempt, &plan->cmd);
    if (!st.ok()) return LaunchError(st);
    plan->title = "attempt " + std::to_string(attempt + 1) + " of " + std::to_string(opts_.max_restarts + 1);
    plan->when = plan->title;
    return -1;
  }

  AttemptVerdict Classify(const AttemptPlan& /*plan*/, const AttemptEnd& end) override {
    AttemptVerdict v;
    v.kind = BasicKind(end);
    return v;
  }

  void Apply(const AttemptPlan& /*plan*/, const AttemptEnd& end, const AttemptVerdict& verdict) override {
    if (verdict.kind == AttemptKind::kDone) DT_LOG_INFO(kLauncher, "{}", end.finished);
  }

 private:
  const LaunchOptions& opts_;
  const LaunchEnv& env_;
};

}  // namespace

std::unique_ptr<RestartPolicy> MakeFixedRestartPolicy(const LaunchOptions& opts, const LaunchEnv& env) {
  return std::make_unique<FixedRestart>(opts, env);
}

}  // namespace dtrain::launcher
