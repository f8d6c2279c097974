#pragma once
// Parsing a dtrain command line with CLI11, as a Status.
//
// Every subcommand registers its flags on a CLI::App (`AddXxxCommand(CLI::App* parent, XxxArgs*)` in its
// *_cmd.h); launcher/cli/cli.cc puts them all under one root, and the same tree answers `--help`, parse
// errors and `dtrain completion bash`, so none of them can drift from the flags. ParseWithCli turns
// CLI11's outcome into one Status: CLI11's exceptions never leave this file.
//
// Parse errors are InvalidArgument with a one-line message naming the flag or word, e.g.
//   "unknown flag '--frobnicate' (see `dtrain launch --help`)", "--nnodes: missing value",
//   "--nnodes: expected a positive integer, got 'two'", "--dry-run: takes no value",
//   "unexpected argument 'b.yaml'", "unknown command 'frob' (expected one of: ...)".
// The caller prints them as `dtrain <command>: error: <message>` and exits 2 (launcher/exit_codes.h).
// Stateless, thread-compatible (an App must not be parsed by two threads at once).

#include <functional>
#include <string>
#include <vector>

#include "core/status.h"

namespace CLI {
class App;
}  // namespace CLI

namespace dtrain::launcher {

struct ParseResult {
  std::string command;    // the selected (sub)command path, e.g. "data convert-text"; "" for none
  bool help = false;      // --help/-h was given: help_text holds that command's help, nothing else is valid
  std::string help_text;  // CLI11's help of the selected command
};

// Parses `words` (the arguments after the program name) with `root`. Fills *out also on error (its
// `command` names where the error was found).
Status ParseWithCli(CLI::App* root, const std::vector<std::string>& words, ParseResult* out);

// Parses `words` with a fresh root named "dtrain" that holds only what `add` registers on it (one
// command's parser, for that command's own tests and vector entry points).
Status ParseWithCli(const std::function<void(CLI::App*)>& add, const std::vector<std::string>& words, ParseResult* out);

// Checks for CLI::Option::check(): each returns "" for a valid value, else "expected ..., got 'V'".
using ValueCheck = std::function<std::string(const std::string&)>;
ValueCheck PositiveInt();
ValueCheck NonNegativeInt();
ValueCheck OneOf(const std::vector<std::string>& choices);  // "expected a|b|c, got 'x'"
// --resume of `launch` and `train`: auto, never or a step number (checkpoint.resume). torchrun-style words for the
// newest checkpoint (latest, last, newest) are answered with dtrain's way: auto, the default.
ValueCheck ResumeValue();

// Throws the CLI11 error that ParseWithCli reports as `message` (one line): for checks that span
// several flags, run in a CLI::App callback after the flags are parsed. Only valid inside a parse.
[[noreturn]] void FailParse(const std::string& message);

}  // namespace dtrain::launcher
