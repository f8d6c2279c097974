#pragma once
// Runs a shell command line in a real child process and captures its combined stdout+stderr,
// for end-to-end tests of the `dtrain` binary (its path comes from env DTRAIN_BIN, set by ctest).

#include <string>
#include <vector>

#include "tests/testing/fixtures.h"  // TempDir, which most process tests use

namespace dtrain::testing {

struct ProcessResult {
  int exit_code = -1;  // the exit status, or -1 when the child died by a signal
  int signal = 0;      // the signal that killed it, else 0
  std::string output;  // stdout and stderr, interleaved
};

// Runs `/bin/sh -c command 2>&1`.
ProcessResult RunCommand(const std::string& command);

// $DTRAIN_BIN, else the build's dtrain (DT_DTRAIN_BIN, defined by tests/CMakeLists.txt).
std::string DtrainBin();

// Reads a whole file ("" when it cannot be read).
std::string ReadFile(const std::string& path);
void WriteFile(const std::string& path, const std::string& text);

// The number after "key": in one JSON line (e.g. of metrics.jsonl); NaN when the key is absent.
double Field(const std::string& line, const std::string& key);
// The lines of `text` that contain `must_contain`, in order.
std::vector<std::string> Lines(const std::string& text, const std::string& must_contain);

}  // namespace dtrain::testing
