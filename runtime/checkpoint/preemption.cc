#include "runtime/checkpoint/preemption.h"

#include <signal.h>

#include <atomic>
#include <cstring>

namespace dtrain::runtime {
namespace {

std::atomic<int> g_signal{0};
static_assert(std::atomic<int>::is_always_lock_free, "the signal handler needs a lock-free atomic");

void OnSignal(int sig) { g_signal.store(sig, std::memory_order_relaxed); }

}  // namespace

void Preemption::InstallHandlers() {
  struct sigaction sa;
  std::memset(&sa, 0, sizeof(sa));
  sa.sa_handler = OnSignal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;  // blocking calls (reads, MPI progress) continue; the loop polls the flag
  sigaction(SIGTERM, &sa, nullptr);
  sigaction(SIGUSR1, &sa, nullptr);
}

int Preemption::Requested() { return g_signal.load(std::memory_order_relaxed); }
void Preemption::Raise(int signal) { g_signal.store(signal, std::memory_order_relaxed); }
void Preemption::Clear() { g_signal.store(0, std::memory_order_relaxed); }

}  // namespace dtrain::runtime
