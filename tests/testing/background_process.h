#pragma once
// BackgroundProcess: a command running in the background while the test acts on it (signals it, watches its files),
// then waits for how it ended. `/bin/sh -c "exec COMMAND > LOG 2>&1"`: the pid is the command's own, so a signal
// reaches it and not a shell.
//
//   BackgroundProcess p(DtrainBin() + " train c.yaml", dir.File("a.log"));
//   ASSERT_TRUE(WaitUntil([&] { return ReadFile(metrics).find("\"kind\":\"train\"") != std::string::npos; }, 60));
//   p.Signal(SIGINT);
//   const ProcessResult r = p.Wait(60);  // r.output: the log
//
// Not thread-safe: one test thread drives it.

#include <sys/types.h>

#include <string>

#include "tests/testing/subprocess.h"

namespace dtrain::testing {

class BackgroundProcess {
 public:
  // Starts it.
  BackgroundProcess(const std::string& command, const std::string& log);
  // SIGKILLs and reaps it when it still runs.
  ~BackgroundProcess();
  BackgroundProcess(const BackgroundProcess&) = delete;
  BackgroundProcess& operator=(const BackgroundProcess&) = delete;

  void Signal(int sig);
  // Up to timeout_s for it to end: exit_code (-1 when a signal ended it), signal, output = the log. On a timeout it is
  // killed and the result has exit_code -1 and signal 0.
  ProcessResult Wait(double timeout_s);

 private:
  pid_t pid_ = -1;
  std::string log_;
};

}  // namespace dtrain::testing
