#pragma once
// A small YAML-subset parser for dtrain's config files (configs/*.yaml).
//
// Supported: block mappings (indentation-based, nested), block sequences of scalars (`- item`, also
// directly under a key at the key's indentation), flow sequences (`[1, 2, [3]]`, on one line),
// plain / 'single-quoted' / "double-quoted" scalars (escapes \\ \" \n \t \r \0 \/ \xHH), `#` comments
// outside quotes, one leading `---`, blank lines, CRLF line ends, a UTF-8 BOM.
//
// Rejected with InvalidArgument("<source>:<line>:<col>: <what was expected>"): anchors, aliases, tags,
// block and multi-line scalars, flow mappings, complex keys, mappings inside sequences, tabs in
// indentation, duplicate keys, inconsistent indentation, several documents, control characters,
// nesting deeper than kYamlMaxDepth and inputs larger than kYamlMaxInputBytes.
//
// The parser is meant to be fed untrusted input: it never crashes, recurses at most kYamlMaxDepth
// levels and runs in time about linear in the input size. Stateless; thread-safe.

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"

namespace dtrain::runtime {

inline constexpr std::size_t kYamlMaxInputBytes = 1 << 20;
inline constexpr int kYamlMaxDepth = 32;

struct YamlEntry;

// One node of the parsed tree. Lines and columns are 1-based; 0 means "not from a file".
struct YamlNode {
  enum class Kind { kScalar, kMap, kSeq };

  Kind kind = Kind::kScalar;
  std::string scalar;              // kScalar: text with quotes removed and escapes resolved
  bool quoted = false;             // kScalar: written as '...' or "..."
  std::vector<YamlEntry> entries;  // kMap: in file order, keys unique
  std::vector<YamlNode> items;     // kSeq
  int line = 0;
  int col = 0;

  // An empty, unquoted scalar: what `key:` with nothing after it (and no nested block) holds.
  bool IsNull() const;
  // The value of `key` in a mapping, or nullptr (also when this is not a mapping).
  const YamlNode* Find(std::string_view key) const;
};

struct YamlEntry {
  std::string key;
  int line = 0;  // position of the key
  int col = 0;
  YamlNode value;
};

// "a scalar", "a mapping", "a sequence": for error messages.
const char* YamlKindName(YamlNode::Kind kind);

// Parses a whole document. The root is a mapping or a sequence; an empty document (only blank
// lines, comments or `---`) gives an empty mapping. `source_name` prefixes error messages.
Status ParseYaml(std::string_view text, const std::string& source_name, YamlNode* root);

// Parses one inline value: a plain or quoted scalar or a flow sequence, with an optional trailing
// comment (used for `--set key=value` and for schema defaults). Empty text gives a null scalar.
// Errors read "<source_name>: col <n>: <what was expected>".
Status ParseYamlValue(std::string_view text, const std::string& source_name, YamlNode* out);

}  // namespace dtrain::runtime
