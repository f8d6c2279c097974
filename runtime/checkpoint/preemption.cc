#include "runtime/checkpoint/preemption.h"

#include <signal.h>

#include <atomic>
#include <cstring>

namespace dtrain::runtime {
namespace {

std::atomic<int> g_signal{0};
static_assert(std::atomic<int>::is_always_lock_free, "the signal handler needs a lock-free atomic");

void OnSignal(int sig) { g_signal.store(sig, std::memory_order_relaxed); }

void SetAction(int sig, void (*handler)(int)) {
  struct sigaction sa;
  std::memset(&sa, 0, sizeof(sa));
  sa.sa_handler = handler;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;  // blocking calls (reads, MPI progress) continue; the loop polls the flag
  sigaction(sig, &sa, nullptr);
}

}  // namespace

void Preemption::InstallEarly() { SetAction(SIGUSR1, OnSignal); }

void Preemption::UndoEarly() {
  SetAction(SIGUSR1, SIG_DFL);
  if (g_signal.load(std::memory_order_relaxed) == SIGUSR1) raise(SIGUSR1);  // ends the process (default action)
}

void Preemption::InstallHandlers() {
  SetAction(SIGTERM, OnSignal);
  SetAction(SIGUSR1, OnSignal);
}

int Preemption::Requested() { return g_signal.load(std::memory_order_relaxed); }
void Preemption::Raise(int signal) { g_signal.store(signal, std::memory_order_relaxed); }
void Preemption::Clear() { g_signal.store(0, std::memory_order_relaxed); }

}  // namespace dtrain::runtime
