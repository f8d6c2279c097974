#include "runtime/config/yaml.h"

#include <cstdio>
#include <unordered_set>
#include <utility>

#include "core/check.h"

namespace dtrain::runtime {
namespace {

// One line that holds content (blank and comment-only lines are dropped while splitting).
struct Line {
  int number = 0;          // 1-based
  std::size_t indent = 0;  // leading spaces
  std::string text;        // without the line end
};

bool IsBlank(char c) { return c == ' ' || c == '\t'; }

std::size_t SkipBlanks(const std::string& t, std::size_t p) {
  while (p < t.size() && IsBlank(t[p])) ++p;
  return p;
}

// A '#' starts a comment when it begins the text or follows a blank (YAML's rule).
bool IsCommentAt(const std::string& t, std::size_t p) { return t[p] == '#' && (p == 0 || IsBlank(t[p - 1])); }

std::string TrimRight(std::string s) {
  while (!s.empty() && IsBlank(s.back())) s.pop_back();
  return s;
}

bool IsSeqItem(const Line& l) {
  const std::string& t = l.text;
  return t[l.indent] == '-' && (l.indent + 1 == t.size() || IsBlank(t[l.indent + 1]));
}

// Why `c` cannot start a key or a plain scalar, or nullptr when it can.
const char* IndicatorReason(char c) {
  switch (c) {
    case '&':
      return "anchors are not supported";
    case '*':
      return "aliases are not supported";
    case '!':
      return "tags are not supported";
    case '|':
    case '>':
      return "block scalars are not supported";
    case '{':
    case '}':
      return "flow mappings are not supported";
    case '?':
      return "complex keys are not supported";
    case '%':
      return "directives are not supported";
    case '@':
    case '`':
      return "reserved indicator";
    case ']':
    case ',':
    case ':':
    case '#':
      return "expected a scalar, a quoted string or '['";
    default:
      return nullptr;
  }
}

std::string Unexpected(char c, const char* why) { return std::string("unexpected '") + c + "': " + why; }

int HexDigit(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

// Recursive-descent parser over the content lines. Each nested block or flow sequence adds one
// level of depth, capped at kYamlMaxDepth, so recursion is bounded whatever the input.
class Parser {
 public:
  explicit Parser(std::string source) : source_(std::move(source)) {}

  Status Document(std::string_view text, YamlNode* root);
  Status Value(std::string_view text, YamlNode* out);

 private:
  Status Error(int line, std::size_t pos, const std::string& msg) const;
  Status CheckChars(int line, std::string_view raw) const;
  Status SplitLines(std::string_view text);
  Status Block(int depth, YamlNode* out);
  Status Map(std::size_t indent, int depth, YamlNode* out);
  Status Seq(std::size_t indent, int depth, YamlNode* out);
  Status Key(const Line& l, std::size_t* pos, std::string* key) const;
  Status Inline(const Line& l, std::size_t* pos, int depth, bool flow, YamlNode* out) const;
  Status FlowSeq(const Line& l, std::size_t* pos, int depth, YamlNode* out) const;
  Status Quoted(const Line& l, std::size_t* pos, std::string* out) const;
  Status Escape(const Line& l, std::size_t* pos, std::string* out) const;
  Status Plain(const Line& l, std::size_t* pos, bool flow, std::string* out) const;
  Status LineEnd(const Line& l, std::size_t pos) const;

  std::string source_;
  bool value_mode_ = false;  // ParseYamlValue: errors name a column only
  std::vector<Line> lines_;
  std::size_t next_ = 0;  // the line being parsed
};

Status Parser::Error(int line, std::size_t pos, const std::string& msg) const {
  const std::string col = std::to_string(pos + 1);
  if (value_mode_) return Status::InvalidArgument(source_ + ": col " + col + ": " + msg);
  return Status::InvalidArgument(source_ + ":" + std::to_string(line) + ":" + col + ": " + msg);
}

Status Parser::CheckChars(int line, std::string_view raw) const {
  for (std::size_t i = 0; i < raw.size(); ++i) {
    const auto c = static_cast<unsigned char>(raw[i]);
    if ((c < 0x20 && c != '\t') || c == 0x7f) {
      char hex[8];
      std::snprintf(hex, sizeof(hex), "0x%02x", c);
      return Error(line, i, std::string("control character ") + hex + " is not allowed");
    }
  }
  return Status::OK();
}

Status Parser::SplitLines(std::string_view text) {
  if (text.size() > kYamlMaxInputBytes) {
    return Status::InvalidArgument(source_ + ": input is " + std::to_string(text.size()) + " bytes; at most " +
                                   std::to_string(kYamlMaxInputBytes) + " are supported");
  }
  if (text.substr(0, 3) == "\xEF\xBB\xBF") text.remove_prefix(3);  // UTF-8 byte order mark
  bool seen_content = false;
  int number = 0;
  for (std::size_t start = 0; start <= text.size();) {
    std::size_t end = text.find('\n', start);
    if (end == std::string_view::npos) end = text.size();
    std::string_view raw = text.substr(start, end - start);
    start = end + 1;
    ++number;
    if (!raw.empty() && raw.back() == '\r') raw.remove_suffix(1);
    DT_RETURN_IF_ERROR(CheckChars(number, raw));
    const std::size_t first = raw.find_first_not_of(" \t");
    if (first == std::string_view::npos || raw[first] == '#') continue;
    const std::size_t tab = raw.find('\t');
    if (tab < first) return Error(number, tab, "tab in indentation: indent with spaces");
    if (first == 0 && raw.substr(0, 3) == "---" && (raw.size() == 3 || IsBlank(raw[3]))) {
      if (seen_content) return Error(number, 0, "a second document ('---') is not supported");
      const std::size_t after = raw.find_first_not_of(" \t", 3);
      if (after != std::string_view::npos && raw[after] != '#') {
        return Error(number, after, "expected a line end after '---'");
      }
      seen_content = true;
      continue;
    }
    seen_content = true;
    lines_.push_back(Line{number, first, std::string(raw)});
  }
  return Status::OK();
}

Status Parser::Document(std::string_view text, YamlNode* root) {
  *root = YamlNode();
  DT_RETURN_IF_ERROR(SplitLines(text));
  if (lines_.empty()) {
    root->kind = YamlNode::Kind::kMap;
    root->line = 1;
    root->col = 1;
    return Status::OK();
  }
  DT_RETURN_IF_ERROR(Block(1, root));
  if (next_ < lines_.size()) {
    const Line& l = lines_[next_];
    return Error(l.number, l.indent,
                 "inconsistent indentation: the document's top level is " + std::string(YamlKindName(root->kind)) +
                     " at column " + std::to_string(root->col));
  }
  return Status::OK();
}

Status Parser::Value(std::string_view text, YamlNode* out) {
  value_mode_ = true;
  *out = YamlNode();
  if (text.size() > kYamlMaxInputBytes) return Error(1, 0, "value too long");
  DT_RETURN_IF_ERROR(CheckChars(1, text));
  const Line l{1, 0, std::string(text)};
  std::size_t p = SkipBlanks(l.text, 0);
  out->line = 1;
  out->col = static_cast<int>(p) + 1;
  if (p == l.text.size() || IsCommentAt(l.text, p)) return Status::OK();
  DT_RETURN_IF_ERROR(Inline(l, &p, 1, /*flow=*/false, out));
  return LineEnd(l, p);
}

Status Parser::Block(int depth, YamlNode* out) {
  const Line& l = lines_[next_];
  if (depth > kYamlMaxDepth) {
    return Error(l.number, l.indent, "nesting deeper than " + std::to_string(kYamlMaxDepth) + " levels");
  }
  return IsSeqItem(l) ? Seq(l.indent, depth, out) : Map(l.indent, depth, out);
}

Status Parser::Map(std::size_t indent, int depth, YamlNode* out) {
  out->kind = YamlNode::Kind::kMap;
  out->line = lines_[next_].number;
  out->col = static_cast<int>(indent) + 1;
  std::unordered_set<std::string> seen;
  while (next_ < lines_.size()) {
    const Line& l = lines_[next_];
    if (l.indent < indent) break;
    if (l.indent > indent) {
      return Error(l.number, l.indent,
                   "unexpected indentation: expected a key at column " + std::to_string(indent + 1));
    }
    if (IsSeqItem(l)) return Error(l.number, l.indent, "expected 'key: value', got a sequence item");
    YamlEntry entry;
    entry.line = l.number;
    entry.col = static_cast<int>(indent) + 1;
    std::size_t pos = indent;
    DT_RETURN_IF_ERROR(Key(l, &pos, &entry.key));
    if (!seen.insert(entry.key).second) return Error(l.number, indent, "duplicate key '" + entry.key + "'");
    pos = SkipBlanks(l.text, pos);
    entry.value.line = l.number;
    entry.value.col = static_cast<int>(pos) + 1;
    if (pos == l.text.size() || l.text[pos] == '#') {
      // `key:` alone: a nested block (deeper, or a sequence at the key's column) or null.
      ++next_;
      if (next_ < lines_.size()) {
        const Line& n = lines_[next_];
        if (n.indent > indent || (n.indent == indent && IsSeqItem(n))) {
          DT_RETURN_IF_ERROR(Block(depth + 1, &entry.value));
        }
      }
    } else {
      DT_RETURN_IF_ERROR(Inline(l, &pos, depth + 1, /*flow=*/false, &entry.value));
      DT_RETURN_IF_ERROR(LineEnd(l, pos));
      ++next_;
    }
    out->entries.push_back(std::move(entry));
  }
  return Status::OK();
}

Status Parser::Seq(std::size_t indent, int depth, YamlNode* out) {
  out->kind = YamlNode::Kind::kSeq;
  out->line = lines_[next_].number;
  out->col = static_cast<int>(indent) + 1;
  while (next_ < lines_.size()) {
    const Line& l = lines_[next_];
    if (l.indent < indent || (l.indent == indent && !IsSeqItem(l))) break;
    if (l.indent > indent) {
      return Error(l.number, l.indent, "unexpected indentation: expected '- ' at column " + std::to_string(indent + 1));
    }
    std::size_t pos = SkipBlanks(l.text, indent + 1);
    if (pos == l.text.size() || l.text[pos] == '#') {
      return Error(l.number, indent,
                   "expected a scalar or a flow sequence after '-' (nested blocks are not supported)");
    }
    YamlNode item;
    DT_RETURN_IF_ERROR(Inline(l, &pos, depth + 1, /*flow=*/false, &item));
    DT_RETURN_IF_ERROR(LineEnd(l, pos));
    ++next_;
    out->items.push_back(std::move(item));
  }
  return Status::OK();
}

Status Parser::Key(const Line& l, std::size_t* pos, std::string* key) const {
  const std::string& t = l.text;
  std::size_t p = *pos;
  if (t[p] == '\'' || t[p] == '"') {
    DT_RETURN_IF_ERROR(Quoted(l, &p, key));
    p = SkipBlanks(t, p);
    if (p >= t.size() || t[p] != ':') return Error(l.number, p, "expected ':' after the quoted key");
  } else {
    if (const char* why = IndicatorReason(t[p])) return Error(l.number, p, Unexpected(t[p], why));
    std::size_t q = p;
    for (;; ++q) {
      if (q == t.size() || IsCommentAt(t, q)) {
        return Error(l.number, p, "expected 'key: value' or '- item', got '" + TrimRight(t.substr(p, q - p)) + "'");
      }
      if (t[q] == ':' && (q + 1 == t.size() || IsBlank(t[q + 1]))) break;
    }
    *key = TrimRight(t.substr(p, q - p));
    p = q;
  }
  ++p;  // past ':'
  if (p < t.size() && !IsBlank(t[p])) return Error(l.number, p, "expected a space after ':'");
  *pos = p;
  return Status::OK();
}

Status Parser::Inline(const Line& l, std::size_t* pos, int depth, bool flow, YamlNode* out) const {
  out->line = l.number;
  out->col = static_cast<int>(*pos) + 1;
  const char c = l.text[*pos];
  if (c == '[') {
    if (depth > kYamlMaxDepth) {
      return Error(l.number, *pos, "nesting deeper than " + std::to_string(kYamlMaxDepth) + " levels");
    }
    return FlowSeq(l, pos, depth, out);
  }
  out->kind = YamlNode::Kind::kScalar;
  if (c == '\'' || c == '"') {
    out->quoted = true;
    return Quoted(l, pos, &out->scalar);
  }
  return Plain(l, pos, flow, &out->scalar);
}

Status Parser::FlowSeq(const Line& l, std::size_t* pos, int depth, YamlNode* out) const {
  const std::string& t = l.text;
  out->kind = YamlNode::Kind::kSeq;
  std::size_t p = *pos + 1;
  for (;;) {
    p = SkipBlanks(t, p);
    if (p >= t.size() || IsCommentAt(t, p)) {
      return Error(l.number, *pos, "unterminated flow sequence: expected ']' on the same line");
    }
    if (t[p] == ']') break;  // `[]`, or a trailing comma
    YamlNode item;
    DT_RETURN_IF_ERROR(Inline(l, &p, depth + 1, /*flow=*/true, &item));
    out->items.push_back(std::move(item));
    p = SkipBlanks(t, p);
    if (p < t.size() && t[p] == ',') {
      ++p;
    } else if (p < t.size() && t[p] == ']') {
      break;
    } else if (p >= t.size() || IsCommentAt(t, p)) {
      return Error(l.number, *pos, "unterminated flow sequence: expected ']' on the same line");
    } else {
      return Error(l.number, p, "expected ',' or ']' in a flow sequence");
    }
  }
  *pos = p + 1;
  return Status::OK();
}

Status Parser::Quoted(const Line& l, std::size_t* pos, std::string* out) const {
  const std::string& t = l.text;
  const char quote = t[*pos];
  std::string s;
  std::size_t p = *pos + 1;
  for (;;) {
    if (p >= t.size()) {
      return Error(l.number, *pos,
                   std::string("unterminated quoted scalar: expected a closing ") + quote +
                       " on the same line (multi-line scalars are not supported)");
    }
    const char c = t[p];
    if (c == quote) {
      if (quote == '\'' && p + 1 < t.size() && t[p + 1] == '\'') {  // '' is an escaped '
        s += '\'';
        p += 2;
        continue;
      }
      break;
    }
    if (quote == '"' && c == '\\') {
      DT_RETURN_IF_ERROR(Escape(l, &p, &s));
      continue;
    }
    s += c;
    ++p;
  }
  *pos = p + 1;
  *out = std::move(s);
  return Status::OK();
}

Status Parser::Escape(const Line& l, std::size_t* pos, std::string* out) const {
  const std::string& t = l.text;
  const std::size_t p = *pos;
  if (p + 1 >= t.size()) return Error(l.number, p, "unterminated escape sequence");
  const char e = t[p + 1];
  switch (e) {
    case '\\':
    case '"':
    case '/':
      *out += e;
      break;
    case 'n':
      *out += '\n';
      break;
    case 't':
      *out += '\t';
      break;
    case 'r':
      *out += '\r';
      break;
    case '0':
      *out += '\0';
      break;
    case 'x': {
      const int hi = p + 2 < t.size() ? HexDigit(t[p + 2]) : -1;
      const int lo = p + 3 < t.size() ? HexDigit(t[p + 3]) : -1;
      if (hi < 0 || lo < 0) return Error(l.number, p, "expected two hex digits after '\\x'");
      *out += static_cast<char>(hi * 16 + lo);
      *pos = p + 4;
      return Status::OK();
    }
    default:
      return Error(l.number, p,
                   std::string("unsupported escape '\\") + e + "' (supported: \\\\ \\\" \\/ \\n \\t \\r \\0 \\xHH)");
  }
  *pos = p + 2;
  return Status::OK();
}

Status Parser::Plain(const Line& l, std::size_t* pos, bool flow, std::string* out) const {
  const std::string& t = l.text;
  const std::size_t p = *pos;
  if (t[p] == '-' && (p + 1 == t.size() || IsBlank(t[p + 1]) || (flow && (t[p + 1] == ',' || t[p + 1] == ']')))) {
    return Error(l.number, p, "unexpected '- ': a block sequence must start on its own line");
  }
  if (const char* why = IndicatorReason(t[p])) return Error(l.number, p, Unexpected(t[p], why));
  std::size_t q = p;
  for (; q < t.size(); ++q) {
    const char c = t[q];
    if (IsCommentAt(t, q)) break;
    const bool ends_token = q + 1 == t.size() || IsBlank(t[q + 1]) || (flow && (t[q + 1] == ',' || t[q + 1] == ']'));
    if (c == ':' && ends_token) {
      return Error(l.number, q,
                   "unexpected ': ' in a plain scalar: a nested mapping must start on its own line "
                   "(mappings inside sequences are not supported); quote a value that contains ': '");
    }
    if (flow && (c == ',' || c == ']')) break;
    if (flow && (c == '[' || c == '{' || c == '}')) {
      return Error(l.number, q, std::string("unexpected '") + c + "' inside a flow sequence item");
    }
  }
  *out = TrimRight(t.substr(p, q - p));
  *pos = q;
  return Status::OK();
}

Status Parser::LineEnd(const Line& l, std::size_t pos) const {
  const std::size_t p = SkipBlanks(l.text, pos);
  if (p == l.text.size() || IsCommentAt(l.text, p)) return Status::OK();
  return Error(l.number, p, "expected the end of the line or a comment after the value");
}

}  // namespace

bool YamlNode::IsNull() const { return kind == Kind::kScalar && !quoted && scalar.empty(); }

const YamlNode* YamlNode::Find(std::string_view key) const {
  for (const YamlEntry& e : entries) {
    if (e.key == key) return &e.value;
  }
  return nullptr;
}

const char* YamlKindName(YamlNode::Kind kind) {
  switch (kind) {
    case YamlNode::Kind::kScalar:
      return "a scalar";
    case YamlNode::Kind::kMap:
      return "a mapping";
    case YamlNode::Kind::kSeq:
      return "a sequence";
  }
  return "?";
}

Status ParseYaml(std::string_view text, const std::string& source_name, YamlNode* root) {
  return Parser(source_name).Document(text, root);
}

Status ParseYamlValue(std::string_view text, const std::string& source_name, YamlNode* out) {
  return Parser(source_name).Value(text, out);
}

}  // namespace dtrain::runtime
