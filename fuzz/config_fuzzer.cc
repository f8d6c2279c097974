// Fuzzes the YAML config loader (runtime/config/yaml.h, runtime/config/config.h) with arbitrary text.
// Properties: every input gives a Status (no crash, leak or hang); a config that loads survives
// ConfigToYaml -> ParseConfig unchanged (the round trip runtime/config/config.h promises; a config holding
// credentials in a URL renders them redacted, so it is left out).
// Lines "#set key=value" are also passed as `--set` overrides (to YAML they are comments), so one
// input exercises the document, the inline-value parser and the override path.

#include <google/protobuf/util/message_differencer.h>

#include <string>
#include <vector>

#include "fuzz/fuzz_util.h"
#include "runtime/config/config.h"
#include "runtime/config/yaml.h"

namespace {

std::vector<std::string> Overrides(const std::string& text) {
  std::vector<std::string> out;
  size_t pos = 0;
  while (pos < text.size() && out.size() < 8) {
    size_t end = text.find('\n', pos);
    if (end == std::string::npos) end = text.size();
    if (text.compare(pos, 5, "#set ") == 0) out.push_back(text.substr(pos + 5, end - pos - 5));
    pos = end + 1;
  }
  return out;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  dtrain::runtime::YamlNode node;
  (void)dtrain::runtime::ParseYamlValue(text, "fuzz-value", &node);

  dtrain::proto::Config config;
  if (!dtrain::runtime::ParseConfig(text, "fuzz.yaml", Overrides(text), &config).ok()) return 0;
  const std::string yaml = dtrain::runtime::ConfigToYaml(config);
  if (yaml.find("<redacted>") != std::string::npos) return 0;  // credentials in a URL are not rendered
  dtrain::proto::Config back;
  const dtrain::Status st = dtrain::runtime::ParseConfig(yaml, "rendered.yaml", {}, &back);
  DT_FUZZ_ASSERT(st.ok(), "the rendered config does not load: " + st.ToString() + "\n" + yaml);
  DT_FUZZ_ASSERT(google::protobuf::util::MessageDifferencer::Equals(config, back),
                 "round trip changed the config:\n" + yaml + "\nreloaded as\n" + back.DebugString());
  return 0;
}
