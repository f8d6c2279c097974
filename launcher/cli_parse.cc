#include "launcher/cli_parse.h"

#include <CLI/CLI.hpp>

namespace dtrain::launcher {
namespace {

bool ParseIntText(const std::string& text, long long* out) {
  if (text.empty() || text.size() > 18 || text.find_first_not_of("0123456789") != std::string::npos) return false;
  *out = std::stoll(text);
  return true;
}

// The selected chain: root, then each parsed subcommand below it.
std::vector<CLI::App*> SelectedChain(CLI::App* root) {
  std::vector<CLI::App*> chain = {root};
  while (!chain.back()->get_subcommands().empty()) chain.push_back(chain.back()->get_subcommands().front());
  return chain;
}

std::string CommandPath(const std::vector<CLI::App*>& chain) {
  std::string path;
  for (size_t i = 1; i < chain.size(); ++i) path += (path.empty() ? "" : " ") + chain[i]->get_name();
  return path;
}

std::string SubcommandNames(CLI::App* app) {
  std::string names;
  for (const CLI::App* sub : app->get_subcommands([](CLI::App*) { return true; })) {
    names += (names.empty() ? "" : ", ") + sub->get_name();
  }
  return names;
}

// CLI11's wording of a flag given a value it takes none ("dry-run was given a disallowed flag
// override") and of a missing value ("--nnodes: 1 required TEXT missing"), as one line naming the flag.
std::string ArgumentMismatchMessage(const std::string& what) {
  const std::string kOverride = " was given a disallowed flag override";
  const auto o = what.find(kOverride);
  if (o != std::string::npos) return "--" + what.substr(0, o) + ": takes no value";
  const auto colon = what.find(": ");
  if (colon != std::string::npos && what.find(" required ", colon) != std::string::npos && what.size() >= 8 &&
      what.compare(what.size() - 8, 8, " missing") == 0) {
    return what.substr(0, colon) + ": missing value";
  }
  return what;
}

// Words no option or positional took: an unknown flag, an extra positional or an unknown command.
Status CheckLeftovers(const std::vector<CLI::App*>& chain) {
  CLI::App* leaf = chain.back();
  const bool is_group = !leaf->get_subcommands([](CLI::App*) { return true; }).empty();
  const std::string path = CommandPath(chain);
  for (CLI::App* app : chain) {
    if (app == leaf && leaf->get_prefix_command()) break;  // the words after PROGRAM belong to it
    for (const std::string& word : app->remaining()) {
      if (is_group && word.rfind('-', 0) != 0) {
        return Status::InvalidArgument("unknown command '" + word + "' (expected one of: " + SubcommandNames(leaf) +
                                       ")");
      }
      if (word.rfind('-', 0) == 0) {
        return Status::InvalidArgument("unknown flag '" + word.substr(0, word.find('=')) + "' (see `dtrain " +
                                       (path.empty() ? "" : path + " ") + "--help`)");
      }
      return Status::InvalidArgument("unexpected argument '" + word + "'");
    }
  }
  // The root alone is left to the caller (`dtrain --version`); a group needs one of its commands.
  if (is_group && chain.size() > 1) {
    return Status::InvalidArgument("expected a command (one of: " + SubcommandNames(leaf) + ")");
  }
  return Status::OK();
}

// One command per level. Without a maximum, CLI11 takes any word that names a command of a level
// above as that command, even where a positional is due (`dtrain data inspect data` would start a
// second command, `data`, instead of inspecting the directory "data"); with it, a level whose
// command is chosen no longer matches names.
void AtMostOneCommandPerLevel(CLI::App* app) {
  const std::vector<CLI::App*> children = app->get_subcommands([](CLI::App*) { return true; });
  if (children.empty()) return;
  app->require_subcommand(0, 1);
  for (CLI::App* child : children) AtMostOneCommandPerLevel(child);
}

}  // namespace

Status ParseWithCli(CLI::App* root, const std::vector<std::string>& words, ParseResult* out) {
  *out = ParseResult();
  AtMostOneCommandPerLevel(root);
  std::vector<std::string> reversed(words.rbegin(), words.rend());  // CLI11 takes them last first
  Status st;
  try {
    root->parse(reversed);
  } catch (const CLI::CallForHelp&) {
    out->help = true;
  } catch (const CLI::CallForAllHelp&) {
    out->help = true;
  } catch (const CLI::ArgumentMismatch& e) {
    st = Status::InvalidArgument(ArgumentMismatchMessage(e.what()));
  } catch (const CLI::ParseError& e) {
    st = Status::InvalidArgument(e.what());
  }
  const std::vector<CLI::App*> chain = SelectedChain(root);
  out->command = CommandPath(chain);
  if (out->help) {
    out->help_text = root->help();
    return Status::OK();
  }
  if (!st.ok()) return st;
  return CheckLeftovers(chain);
}

Status ParseWithCli(const std::function<void(CLI::App*)>& add, const std::vector<std::string>& words,
                    ParseResult* out) {
  CLI::App root("", "dtrain");
  root.allow_extras();
  add(&root);
  return ParseWithCli(&root, words, out);
}

ValueCheck PositiveInt() {
  return [](const std::string& v) {
    long long n = 0;
    return ParseIntText(v, &n) && n > 0 && n <= INT32_MAX ? std::string()
                                                          : "expected a positive integer, got '" + v + "'";
  };
}

ValueCheck NonNegativeInt() {
  return [](const std::string& v) {
    long long n = 0;
    return ParseIntText(v, &n) && n <= INT32_MAX ? std::string() : "expected a non-negative integer, got '" + v + "'";
  };
}

ValueCheck OneOf(const std::vector<std::string>& choices) {
  return [choices](const std::string& v) {
    std::string list;
    for (const auto& c : choices) {
      if (v == c) return std::string();
      list += (list.empty() ? "" : "|") + c;
    }
    return "expected " + list + ", got '" + v + "'";
  };
}

ValueCheck ResumeValue() {
  return [](const std::string& v) {
    long long step = 0;
    if (v == "auto" || v == "never" || ParseIntText(v, &step)) return std::string();
    std::string msg = "expected auto|never|STEP, got '" + v + "'";
    if (v == "latest" || v == "last" || v == "newest") {
      msg +=
          ": dtrain resumes from the newest valid checkpoint of the run by default (--resume auto, "
          "checkpoint.resume: auto); drop --resume, or give a STEP to resume from an older one";
    }
    return msg;
  };
}

void FailParse(const std::string& message) { throw CLI::ValidationError(message, CLI::ExitCodes::ValidationError); }

}  // namespace dtrain::launcher
