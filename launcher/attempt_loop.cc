#include "launcher/attempt_loop.h"

#include <memory>

#include "core/logging.h"
#include "launcher/attempt_outcome.h"
#include "launcher/exit_codes.h"
#include "launcher/supervisor.h"

namespace dtrain::launcher {

int RunWithRestarts(LaunchBackend* backend, RestartPolicy* policy, int max_restarts) {
  std::unique_ptr<SupervisorScope> scope;
  Status st = SupervisorScope::Create(&scope);
  if (!st.ok()) return LaunchError(st);
  int failures = 0;  // attempts that count against --max-restarts
  for (int attempt = 0;; ++attempt) {
    AttemptPlan plan;
    plan.attempt = attempt;
    const int stop_code = policy->Plan(attempt, failures, &plan);
    if (stop_code >= 0) return stop_code;
    AttemptEnd end;
    policy->Begin(plan, scope.get());
    st = backend->RunAttempt(plan, scope.get(), &end);
    policy->End();
    if (!st.ok()) return LaunchError(st);
    const AttemptVerdict verdict = policy->Classify(plan, end);
    policy->Apply(plan, end, verdict);
    if (verdict.kind == AttemptKind::kDone) return kExitOk;
    if (verdict.report && !end.report.empty()) DT_LOG_ERROR(kLauncher, "{}", end.report);
    if (verdict.kind != AttemptKind::kFailure && verdict.kind != AttemptKind::kStopped) continue;
    const int exit_code = AfterFailure(end.exit_code, end.stop_signal, failures, max_restarts, attempt + 1, end.who);
    if (exit_code >= 0) return exit_code;
    ++failures;
  }
}

}  // namespace dtrain::launcher
