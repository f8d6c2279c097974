#include "launcher/attempt_loop.h"

#include <memory>

#include "launcher/attempt_outcome.h"
#include "launcher/exit_codes.h"
#include "launcher/supervisor.h"

namespace dtrain::launcher {

int RunWithRestarts(LaunchBackend* backend, int max_restarts) {
  std::unique_ptr<SupervisorScope> scope;
  Status st = SupervisorScope::Create(&scope);
  if (!st.ok()) return LaunchError(st);
  const int attempts = max_restarts + 1;
  for (int attempt = 0; attempt < attempts; ++attempt) {
    AttemptEnd end;
    st = backend->RunAttempt(attempt, attempts, scope.get(), &end);
    if (!st.ok()) return LaunchError(st);
    if (end.done) return kExitOk;
    const int exit_code = AfterFailure(end.exit_code, end.stop_signal, attempt, max_restarts, end.who);
    if (exit_code >= 0) return exit_code;
  }
  return kExitFailure;  // not reached: the last attempt's AfterFailure returns a code
}

}  // namespace dtrain::launcher
