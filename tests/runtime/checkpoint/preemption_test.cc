// The worker's early SIGUSR1 handler (Preemption::InstallEarly, runtime/checkpoint/preemption.h): a checkpoint request
// during the start is kept, not fatal; SIGTERM stays fatal until InstallHandlers; a run without checkpoints gets
// SIGUSR1's default action back, and a request kept meanwhile then ends it as it would have ended it at once. After
// InstallHandlers, SIGINT asks for a checkpoint too, and a second SIGINT ends the process.
// The handlers are process-wide: each case runs in a child (a death test) so that none leaks into the next.

#include "runtime/checkpoint/preemption.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

namespace dtrain::runtime {
namespace {

// The handler this process has for `sig` now.
void (*HandlerOf(int sig))(int) {
  struct sigaction now;
  sigaction(sig, nullptr, &now);
  return now.sa_handler;
}

TEST(PreemptionDeathTest, AnEarlyRequestIsKeptThroughInstallHandlers) {
  EXPECT_EXIT(
      {
        Preemption::Clear();
        Preemption::InstallEarly();
        raise(SIGUSR1);  // delivered synchronously to this thread: the launcher's grow request during the start
        const bool kept = Preemption::Requested() == SIGUSR1;
        Preemption::InstallHandlers();  // the store is open: both signals
        _exit(kept && Preemption::Requested() == SIGUSR1 && HandlerOf(SIGTERM) != SIG_DFL ? 42 : 1);
      },
      ::testing::ExitedWithCode(42), "");
}

// A request that arrived while the worker's parent held SIGUSR1 blocked (dtrain rank-exec, the per-node launcher)
// is pending, and InstallEarly's unblock delivers it to the handler.
TEST(PreemptionDeathTest, ARequestHeldPendingByTheParentReachesTheEarlyHandler) {
  EXPECT_EXIT(
      {
        sigset_t usr1;
        sigemptyset(&usr1);
        sigaddset(&usr1, SIGUSR1);
        sigprocmask(SIG_BLOCK, &usr1, nullptr);  // as the worker starts
        raise(SIGUSR1);                          // the request during exec: pending, not fatal
        Preemption::Clear();
        Preemption::InstallEarly();
        sigset_t pending;
        sigpending(&pending);
        _exit(Preemption::Requested() == SIGUSR1 && !sigismember(&pending, SIGUSR1) ? 42 : 1);
      },
      ::testing::ExitedWithCode(42), "");
}

TEST(PreemptionDeathTest, SigtermStaysFatalUntilInstallHandlers) {
  EXPECT_EXIT(
      {
        Preemption::InstallEarly();
        raise(SIGTERM);  // a stop before there is anything to save: at once
        _exit(0);
      },
      ::testing::KilledBySignal(SIGTERM), "");
}

TEST(PreemptionDeathTest, UndoEarlyDeliversARequestKeptDuringTheStart) {
  EXPECT_EXIT(
      {
        Preemption::Clear();
        Preemption::InstallEarly();
        raise(SIGUSR1);
        if (Preemption::Requested() != SIGUSR1) _exit(1);
        Preemption::UndoEarly();  // checkpoints off: nothing will read the flag
        _exit(0);
      },
      ::testing::KilledBySignal(SIGUSR1), "");
}

TEST(PreemptionDeathTest, UndoEarlyWithoutARequestRestoresTheDefault) {
  EXPECT_EXIT(
      {
        Preemption::Clear();
        Preemption::InstallEarly();
        if (HandlerOf(SIGUSR1) == SIG_DFL) _exit(1);
        Preemption::UndoEarly();
        if (HandlerOf(SIGUSR1) != SIG_DFL) _exit(2);
        raise(SIGUSR1);  // now fatal, as before InstallEarly
        _exit(0);
      },
      ::testing::KilledBySignal(SIGUSR1), "");
}

// Ctrl-C on `dtrain train`: the first SIGINT asks for a checkpoint like SIGTERM; a second one, while that stop is
// under way, ends the process by SIGINT at once (as a second SIGINT to `dtrain launch` kills its workers at once).
TEST(PreemptionDeathTest, ASecondSigintEndsTheProcessAtOnce) {
  EXPECT_EXIT(
      {
        Preemption::Clear();
        Preemption::InstallHandlers();
        raise(SIGINT);
        if (Preemption::Requested() != SIGINT) _exit(1);
        raise(SIGINT);  // the user insists, e.g. while the checkpoint is written
        _exit(0);
      },
      ::testing::KilledBySignal(SIGINT), "");
}

// Repeated SIGTERM (a scheduler's, before its SIGKILL) and a SIGINT after it: the stop is asked again, not forced,
// for SIGTERM; SIGINT after any pending request is the second stop.
TEST(PreemptionDeathTest, ARepeatedSigtermOnlyAsksAgain) {
  EXPECT_EXIT(
      {
        Preemption::Clear();
        Preemption::InstallHandlers();
        raise(SIGTERM);
        raise(SIGTERM);
        _exit(Preemption::Requested() == SIGTERM ? 42 : 1);
      },
      ::testing::ExitedWithCode(42), "");
  EXPECT_EXIT(
      {
        Preemption::Clear();
        Preemption::InstallHandlers();
        raise(SIGTERM);
        raise(SIGINT);
        _exit(0);
      },
      ::testing::KilledBySignal(SIGINT), "");
}

}  // namespace
}  // namespace dtrain::runtime
