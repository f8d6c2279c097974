#include "runtime/train/finished_run.h"

#include <algorithm>
#include <sstream>

#include "runtime/config/config.h"

namespace dtrain::runtime {
namespace {

// The lines of a ConfigToYaml text, each as its dotted key and its value ("" for a section's own line).
struct KeyValue {
  std::string key, value;
};

std::vector<KeyValue> KeyedLines(const std::string& yaml) {
  std::vector<KeyValue> out;
  std::vector<std::string> sections;  // the open sections, one per indent level of two spaces
  std::istringstream in(yaml);
  std::string line;
  while (std::getline(in, line)) {
    const size_t indent = line.find_first_not_of(' ');
    const size_t colon = line.find(':');
    if (indent == std::string::npos || colon == std::string::npos || line[indent] == '#') continue;
    const size_t level = indent / 2;
    sections.resize(std::min(sections.size(), level));
    std::string key;
    for (const std::string& s : sections) key += s + ".";
    key += line.substr(indent, colon - indent);
    const std::string value = colon + 1 < line.size() ? line.substr(colon + 2) : "";
    if (value.empty()) sections.push_back(line.substr(indent, colon - indent));
    out.push_back({key, value});
  }
  return out;
}

// The config without what says how and where a run starts, and whether it leaves a weights file.
proto::Config WhatItTrains(const proto::Config& c) {
  proto::Config out = c;
  out.mutable_checkpoint()->clear_resume();
  out.mutable_checkpoint()->clear_overwrite();
  out.mutable_run()->clear_dir();
  out.mutable_run()->clear_final_weights();
  return out;
}

}  // namespace

std::vector<std::string> ConfigChanges(const proto::Config& before, const proto::Config& now) {
  // ConfigToYaml renders every field in schema order, one per line: the two texts pair up line by line.
  const std::vector<KeyValue> a = KeyedLines(ConfigToYaml(before));
  const std::vector<KeyValue> b = KeyedLines(ConfigToYaml(now));
  std::vector<std::string> out;
  for (size_t i = 0; i < a.size() && i < b.size(); ++i) {
    if (a[i].value != b[i].value) out.push_back(a[i].key + ": " + a[i].value + " -> " + b[i].value);
  }
  return out;
}

Status CheckFinishedRun(const std::string& saved_yaml, const proto::Config& now, int64_t step) {
  const std::string where = now.run().dir() + ": this run finished at step " + std::to_string(step);
  const std::string ways_out =
      ": nothing was trained or changed. To train with the new values give another run.dir, or start over here with "
      "--resume never --overwrite (the old checkpoints are moved aside first); to train this run longer raise "
      "train.epochs or train.max_steps";
  proto::Config saved;
  const Status parsed = ParseConfig(saved_yaml, "the checkpoint's config", {}, &saved);
  if (!parsed.ok()) {
    return Status::InvalidArgument(where + ", and its checkpoint's config does not read here (" + parsed.message() +
                                   "), so this start cannot tell whether it asks for the same run" + ways_out);
  }
  const std::vector<std::string> changes = ConfigChanges(WhatItTrains(saved), WhatItTrains(now));
  if (changes.empty()) return Status::OK();
  constexpr size_t kNamed = 4;
  std::string list;
  for (size_t i = 0; i < changes.size() && i < kNamed; ++i) list += (i == 0 ? "" : "; ") + changes[i];
  if (changes.size() > kNamed) list += "; and " + std::to_string(changes.size() - kNamed) + " more";
  return Status::InvalidArgument(where + " with another config than this start's (then -> now: " + list + ")" +
                                 ways_out);
}

}  // namespace dtrain::runtime
