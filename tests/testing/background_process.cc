#include "tests/testing/background_process.h"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <thread>

namespace dtrain::testing {

BackgroundProcess::BackgroundProcess(const std::string& command, const std::string& log) : log_(log) {
  const std::string sh = "exec " + command + " > " + log + " 2>&1";
  pid_ = fork();
  if (pid_ == 0) {
    execl("/bin/sh", "sh", "-c", sh.c_str(), static_cast<char*>(nullptr));
    _exit(127);
  }
}

BackgroundProcess::~BackgroundProcess() {
  if (pid_ <= 0) return;
  kill(pid_, SIGKILL);
  waitpid(pid_, nullptr, 0);
}

void BackgroundProcess::Signal(int sig) {
  if (pid_ > 0) kill(pid_, sig);
}

ProcessResult BackgroundProcess::Wait(double timeout_s) {
  ProcessResult r;
  if (pid_ <= 0) return r;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
  int status = 0;
  pid_t done = 0;
  while ((done = waitpid(pid_, &status, WNOHANG)) == 0 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  if (done != pid_) {  // timed out
    kill(pid_, SIGKILL);
    waitpid(pid_, &status, 0);
  } else if (WIFEXITED(status)) {
    r.exit_code = WEXITSTATUS(status);
  } else if (WIFSIGNALED(status)) {
    r.signal = WTERMSIG(status);
  }
  pid_ = -1;
  r.output = ReadFile(log_);
  return r;
}

}  // namespace dtrain::testing
