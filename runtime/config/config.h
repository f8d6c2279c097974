#pragma once
// Loading dtrain's YAML configs into the typed schema of proto/config.proto.
//
// The YAML tree (runtime/config/yaml.h) is mapped onto dtrain::proto::Config with protobuf reflection:
// nested messages are nested mappings, repeated scalars are sequences, field names are the keys.
// Values go through three layers, each one overwriting the one before:
//   1. (dtrain.proto.default_value) of every field, parsed as YAML text;
//   2. the YAML document;
//   3. the `--set a.b=c` overrides, in order (the value is a YAML scalar or flow sequence).
// Every value is checked where it is set, so an error names the place it came from:
//   "configs/x.yaml:12: key 'optim.lr': expected a number in [0, 10], got 'fast'"
//   "configs/x.yaml:3: unknown key 'optim.lrr' (known keys of 'optim': name, lr, ...)"
//   "--set optim.lr=fast: key 'optim.lr': expected a number in [0, 10], got 'fast'"
// Renamed keys: a field's (dtrain.proto.renamed_from) lists its old dotted keys ("data.s3_endpoint|..."). In the
// document an old key sets its field after the rest of the document, with one warning naming every old key; an old
// key at the field's default says nothing (a config rendered before the rename holds every old key), and old and
// new keys giving one field different values are an error naming both. `--set old.key=v` sets the field, warning.
// Only singular scalar fields may be renamed.
// Checks: strict scalars (integers reject "1.5", "abc", trailing junk and out-of-range values; bools
// are exactly true/false; numbers and bools must not be quoted), (min)/(max) bounds (for repeated
// fields (min) bounds both each item and the number of items), (choices) "a|b|c" for strings.
// The schema may use message, int64, uint64, double, bool and string fields (singular, or repeated
// for scalars); any other field type is reported as Unimplemented when the loader meets it. The
// schema must not be recursive: defaults and rendering walk every sub-message.
//
// All functions are stateless and thread-safe. Errors are InvalidArgument, except a missing file
// (NotFound), an unreadable one (IoError) and a schema default that does not parse (Internal).

#include <string>
#include <vector>

#include "core/status.h"
#include "proto/config.pb.h"

namespace dtrain::runtime {

// Reads `path`, then as ParseConfig with `path` as the source name.
Status LoadConfig(const std::string& path, const std::vector<std::string>& overrides, dtrain::proto::Config* out);

// Parses `yaml_text` (an empty text gives all defaults), applies `overrides` and fills *out, which
// is cleared first. On error *out holds a partial config and must not be used.
Status ParseConfig(const std::string& yaml_text, const std::string& source_name,
                   const std::vector<std::string>& overrides, dtrain::proto::Config* out);

// The config rendered as YAML: every field, defaults included, in schema order, two-space indent,
// repeated fields as flow sequences, doubles in their shortest exact form. Logged at start and
// stored in the run dir; ParseConfig(ConfigToYaml(c), ...) gives back c for any valid c, except that credentials
// inside a URL value (user information, a query string: core/redact_url.h) render as "<redacted>", so that no
// password reaches a log, config.yaml, a checkpoint or exported weights.
std::string ConfigToYaml(const dtrain::proto::Config& c);

// Only what differs from the schema's defaults, as ConfigToYaml renders it (a section appears when one of
// its keys differs; empty when c is all defaults). ParseConfig of it gives back c. Internal only when a
// schema default does not parse.
Status ConfigDiffYaml(const dtrain::proto::Config& c, std::string* out);

// Every key of the schema as `--set` takes it ("optim.lr", "model.mlp.hidden"): each scalar or repeated-scalar field,
// in schema order; renamed (old) keys are not listed. Shell completion offers them (launcher/cli/completion.h).
std::vector<std::string> ConfigKeys();

}  // namespace dtrain::runtime
