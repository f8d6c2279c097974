#pragma once
// `dtrain config show CONFIG [--set k=v ...] [--defaults | --diff]`: the resolved config as YAML.
//
//   dtrain config show CONFIG [--set k=v ...]         every key after CONFIG and the overrides, as the
//                                                     trainer logs it and stores it in <run.dir>/config.yaml
//   dtrain config show --defaults                     every key at its schema default
//   dtrain config show CONFIG [--set k=v ...] --diff  only the keys whose value differs from the default,
//                                                     under their sections (itself a loadable config)
// Rendering is runtime::ConfigToYaml (runtime/config/config.h). A config that does not load is the
// loader's error (InvalidArgument/NotFound: exit 2). Output goes to stdout.

#include <string>
#include <vector>

#include "core/status.h"

namespace CLI {
class App;
}  // namespace CLI

namespace dtrain::launcher {

struct ConfigShowArgs {
  std::string config;             // CONFIG ("" only with --defaults)
  std::vector<std::string> sets;  // --set values, in order
  bool defaults = false, diff = false;
};

// Registers `config` and below it `config show` on `parent` (launcher/cli_parse.h); *out must outlive
// `parent`. Returns the `config` group.
CLI::App* AddConfigCommand(CLI::App* parent, ConfigShowArgs* out);

// The YAML text `dtrain config show` prints for `args`.
Status ShowConfig(const ConfigShowArgs& args, std::string* yaml);

// The lines of `yaml` whose leaf value differs from `base` (both ConfigToYaml renderings of the
// same schema), each under its section lines.
std::string DiffConfigYaml(const std::string& yaml, const std::string& base);

}  // namespace dtrain::launcher
