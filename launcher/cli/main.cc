// dtrain: the command-line entry point (the commands and the exit codes: launcher/cli/cli.h).

#include <signal.h>

#include <cstring>

#include "launcher/cli/cli.h"

int main(int argc, char** argv) {
  // A worker (`train`) and its mpirun parent (`rank-exec`) hold SIGUSR1, the launcher's checkpoint request, from
  // their first instruction: one sent while the command line and config are still being read stays pending
  // (rank-exec passes it on; the worker's handler takes it: runtime/checkpoint/preemption.h) instead of ending
  // the process by its default action.
  if (argc > 1 && (std::strcmp(argv[1], "train") == 0 || std::strcmp(argv[1], "rank-exec") == 0)) {
    sigset_t usr1;
    sigemptyset(&usr1);
    sigaddset(&usr1, SIGUSR1);
    sigprocmask(SIG_BLOCK, &usr1, nullptr);
  }
  return dtrain::launcher::Main(argc, argv);
}
