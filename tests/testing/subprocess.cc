#include "tests/testing/subprocess.h"

#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <vector>

namespace dtrain::testing {

ProcessResult RunCommand(const std::string& command) {
  ProcessResult r;
  const std::string full = command + " 2>&1";
  FILE* p = popen(full.c_str(), "r");
  if (p == nullptr) return r;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof(buf), p)) > 0) r.output.append(buf, n);
  const int status = pclose(p);
  if (WIFEXITED(status)) {
    r.exit_code = WEXITSTATUS(status);
    // /bin/sh reports a child killed by signal N as exit status 128+N.
    if (r.exit_code > 128 && r.exit_code < 128 + 32) r.signal = r.exit_code - 128;
  } else if (WIFSIGNALED(status)) {
    r.signal = WTERMSIG(status);
  }
  return r;
}

std::string DtrainBin() {
  const char* bin = std::getenv("DTRAIN_BIN");
  if (bin != nullptr) return bin;
#ifdef DT_DTRAIN_BIN
  return DT_DTRAIN_BIN;
#else
  return "dtrain";
#endif
}

std::string ReadFile(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

void WriteFile(const std::string& path, const std::string& text) { std::ofstream(path, std::ios::binary) << text; }

double Field(const std::string& line, const std::string& key) {
  const auto pos = line.find("\"" + key + "\":");
  if (pos == std::string::npos) return NAN;
  return std::stod(line.substr(pos + key.size() + 3));
}

std::vector<std::string> Lines(const std::string& text, const std::string& must_contain) {
  std::vector<std::string> out;
  std::stringstream ss(text);
  std::string line;
  while (std::getline(ss, line)) {
    if (line.find(must_contain) != std::string::npos) out.push_back(line);
  }
  return out;
}

}  // namespace dtrain::testing
