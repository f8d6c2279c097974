#include "runtime/checkpoint/preemption.h"

#include <signal.h>

#include <atomic>
#include <cstring>

namespace dtrain::runtime {
namespace {

std::atomic<int> g_signal{0};
static_assert(std::atomic<int>::is_always_lock_free, "the signal handler needs a lock-free atomic");

void SetAction(int sig, void (*handler)(int)) {
  struct sigaction sa;
  std::memset(&sa, 0, sizeof(sa));
  sa.sa_handler = handler;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;  // blocking calls (reads, MPI progress) continue; the loop polls the flag
  sigaction(sig, &sa, nullptr);
}

// Async-signal-safe: an atomic store, or sigaction + raise.
void OnSignal(int sig) {
  if (sig == SIGINT && g_signal.load(std::memory_order_relaxed) != 0) {
    // A second Ctrl-C while the first stop is under way: end now, by SIGINT's default action (SIGINT is blocked
    // in this handler, so the raised one is delivered as it returns).
    SetAction(SIGINT, SIG_DFL);
    raise(SIGINT);
    return;
  }
  g_signal.store(sig, std::memory_order_relaxed);
}

}  // namespace

void Preemption::InstallEarly() {
  SetAction(SIGUSR1, OnSignal);
  sigset_t usr1;
  sigemptyset(&usr1);
  sigaddset(&usr1, SIGUSR1);
  pthread_sigmask(SIG_UNBLOCK, &usr1, nullptr);  // a request held pending by the parent is delivered here
}

void Preemption::UndoEarly() {
  SetAction(SIGUSR1, SIG_DFL);
  if (g_signal.load(std::memory_order_relaxed) == SIGUSR1) raise(SIGUSR1);  // ends the process (default action)
}

void Preemption::InstallHandlers() {
  SetAction(SIGTERM, OnSignal);
  SetAction(SIGUSR1, OnSignal);
  SetAction(SIGINT, OnSignal);
}

int Preemption::Requested() { return g_signal.load(std::memory_order_relaxed); }
void Preemption::Raise(int signal) { g_signal.store(signal, std::memory_order_relaxed); }
void Preemption::Clear() { g_signal.store(0, std::memory_order_relaxed); }

}  // namespace dtrain::runtime
