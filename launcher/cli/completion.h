#pragma once
// `dtrain completion bash`: a bash completion script generated from the CLI11 tree (launcher/cli/cli.cc),
// so it offers exactly the subcommands and flags the parser accepts.
//
// The script defines `_dtrain` and registers it with `complete -o default -F _dtrain dtrain`: the
// words before the cursor select the (sub)command; a word starting with '-' completes to that
// command's flags (each flag's first long name and its short names; aliases such as --nproc_per_node
// are accepted but not offered), the word after `--set` (or `--set=`) to a config key and its '='
// ("optim.l" -> "optim.lr="), any other word to its subcommands, and where a command has none,
// bash's default (file names) takes over. Install: `dtrain completion bash > /etc/bash_completion.d/dtrain`
// or `source <(dtrain completion bash)` in ~/.bashrc.

#include <string>
#include <vector>

namespace CLI {
class App;
}  // namespace CLI

namespace dtrain::launcher {

// The script for the tree below `root` (its name is the program name); `set_keys` are what `--set` completes to
// (runtime::ConfigKeys()).
std::string BashCompletionScript(CLI::App* root, const std::vector<std::string>& set_keys);

}  // namespace dtrain::launcher
