#include "launcher/cli/config_cmd.h"

#include <CLI/CLI.hpp>
#include <map>
#include <sstream>

#include "core/check.h"
#include "launcher/cli_parse.h"
#include "runtime/config/config.h"

namespace dtrain::launcher {
namespace {

struct YamlLine {
  std::string text;
  int depth = 0;
  std::string path;   // "optim.lr"
  bool leaf = false;  // has a value (not a section header)
};

// ConfigToYaml's lines: "key:" opens a section, "key: value" is a leaf, two spaces per level.
std::vector<YamlLine> SplitYaml(const std::string& yaml) {
  std::vector<YamlLine> lines;
  std::vector<std::string> stack;
  std::istringstream in(yaml);
  std::string text;
  while (std::getline(in, text)) {
    const size_t indent = text.find_first_not_of(' ');
    if (indent == std::string::npos) continue;
    YamlLine l;
    l.text = text;
    l.depth = static_cast<int>(indent / 2);
    const size_t colon = text.find(':', indent);
    const std::string key = text.substr(indent, colon == std::string::npos ? std::string::npos : colon - indent);
    stack.resize(l.depth);
    stack.push_back(key);
    for (const auto& k : stack) l.path += (l.path.empty() ? "" : ".") + k;
    l.leaf = colon != std::string::npos && colon + 1 < text.size();
    lines.push_back(l);
  }
  return lines;
}

}  // namespace

std::string DiffConfigYaml(const std::string& yaml, const std::string& base) {
  std::map<std::string, std::string> base_leaves;
  for (const auto& l : SplitYaml(base)) {
    if (l.leaf) base_leaves[l.path] = l.text;
  }
  std::string out;
  std::vector<const YamlLine*> open;  // section headers not printed yet, by depth
  std::vector<bool> printed;
  const std::vector<YamlLine> lines = SplitYaml(yaml);
  for (const auto& l : lines) {
    open.resize(l.depth);
    printed.resize(l.depth);
    if (!l.leaf) {
      open.push_back(&l);
      printed.push_back(false);
      continue;
    }
    const auto it = base_leaves.find(l.path);
    if (it != base_leaves.end() && it->second == l.text) continue;
    for (size_t d = 0; d < open.size(); ++d) {
      if (!printed[d]) out += open[d]->text + "\n";
      printed[d] = true;
    }
    out += l.text + "\n";
  }
  return out;
}

CLI::App* AddConfigCommand(CLI::App* parent, ConfigShowArgs* out) {
  *out = ConfigShowArgs();
  CLI::App* config = parent->add_subcommand("config", "look at configs as the trainer resolves them");
  config->footer("example: dtrain config show configs/fashion_mnist_mlp.yaml --diff\n");
  CLI::App* show =
      config->add_subcommand("show", "print the resolved config as YAML (what <run.dir>/config.yaml holds)");
  show->footer(
      "example: dtrain config show configs/fashion_mnist_mlp.yaml --set optim.lr=0.05 --diff\n"
      "         dtrain config show --defaults\n");
  show->add_option("CONFIG", out->config, "a YAML config (configs/*.yaml)");
  show->add_option_function<std::string>(
          "--set", [out](const std::string& v) { out->sets.push_back(v); }, "override a config key; repeatable")
      ->type_name("key=value")
      ->trigger_on_parse();
  CLI::Option* defaults = show->add_flag("--defaults", out->defaults, "print every key at its default (no CONFIG)");
  show->add_flag("--diff", out->diff, "print only the keys that differ from the defaults")
      ->excludes(defaults)
      ->disable_flag_override();
  defaults->disable_flag_override();
  show->callback([out] {
    if (out->defaults && (!out->config.empty() || !out->sets.empty())) {
      FailParse("--defaults: takes no CONFIG or --set (it prints the schema defaults)");
    }
    if (!out->defaults && out->config.empty()) {
      FailParse("missing CONFIG (usage: dtrain config show CONFIG [--set k=v ...] [--diff], or --defaults)");
    }
  });
  return config;
}

Status ShowConfig(const ConfigShowArgs& args, std::string* yaml) {
  proto::Config defaults;
  DT_RETURN_IF_ERROR(runtime::ParseConfig("", "defaults", {}, &defaults));
  if (args.defaults) {
    *yaml = runtime::ConfigToYaml(defaults);
    return Status::OK();
  }
  proto::Config cfg;
  DT_RETURN_IF_ERROR(runtime::LoadConfig(args.config, args.sets, &cfg));
  *yaml = runtime::ConfigToYaml(cfg);
  if (args.diff) *yaml = DiffConfigYaml(*yaml, runtime::ConfigToYaml(defaults));
  return Status::OK();
}

}  // namespace dtrain::launcher
