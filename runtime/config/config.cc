#include "runtime/config/config.h"

#include <fcntl.h>
#include <google/protobuf/descriptor.h>
#include <google/protobuf/message.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <map>
#include <memory>
#include <string_view>
#include <system_error>

#include "core/check.h"
#include "core/logging.h"
#include "core/redact_url.h"
#include "runtime/config/yaml.h"

namespace dtrain::runtime {
namespace {

// Whether a YAML text holds anything besides blank lines, comments and document markers.
bool HasContent(const std::string& text) {
  size_t pos = 0;
  while (pos < text.size()) {
    size_t end = text.find('\n', pos);
    if (end == std::string::npos) end = text.size();
    const size_t first = text.find_first_not_of(" \t\r", pos);
    if (first < end && text[first] != '#') {
      const size_t last = text.find_last_not_of(" \t\r", end - 1);
      const std::string line = text.substr(first, last + 1 - first);
      if (line != "---" && line != "...") return true;  // document markers alone hold no keys
    }
    pos = end + 1;
  }
  return false;
}

namespace pb = google::protobuf;
using FD = pb::FieldDescriptor;
using Kind = YamlNode::Kind;

// Where a value came from: "configs/x.yaml:12", or "--set a.b=c" (line 0).
struct Origin {
  std::string source;
  int line = 0;
  std::string Str() const { return line > 0 ? source + ":" + std::to_string(line) : source; }
};

Status KeyError(const Origin& at, const std::string& key, const std::string& what) {
  return Status::InvalidArgument(at.Str() + ": key '" + key + "': " + what);
}

std::string Join(const std::string& prefix, const std::string& name) {
  return prefix.empty() ? name : prefix + "." + name;
}

// Shortest decimal text that reads back as exactly `v`.
std::string ShortestDouble(double v) {
  char buf[32];
  if (std::floor(v) == v && std::fabs(v) < 1e15) {  // integral: "10", not %g's "1e+01"
    std::snprintf(buf, sizeof(buf), "%.0f", v);
    return buf;
  }
  for (int prec = 1; prec <= 17; ++prec) {
    std::snprintf(buf, sizeof(buf), "%.*g", prec, v);
    if (std::strtod(buf, nullptr) == v) break;
  }
  return buf;
}

// ---- the schema's custom options ---------------------------------------------------------

struct Bounds {
  bool has_min = false;
  bool has_max = false;
  double min = 0;
  double max = 0;
};

Bounds BoundsOf(const FD* f) {
  const pb::FieldOptions& o = f->options();
  Bounds b;
  b.has_min = o.HasExtension(dtrain::proto::min);
  b.has_max = o.HasExtension(dtrain::proto::max);
  b.min = o.GetExtension(dtrain::proto::min);
  b.max = o.GetExtension(dtrain::proto::max);
  return b;
}

bool IsChoice(const std::string& value, const std::string& choices) {
  std::size_t start = 0;
  for (;;) {
    const std::size_t bar = choices.find('|', start);
    if (choices.compare(start, bar == std::string::npos ? std::string::npos : bar - start, value) == 0) return true;
    if (bar == std::string::npos) return false;
    start = bar + 1;
  }
}

// What a value of (an item of) `f` must be: "an integer in [1, 1048576]", "one of relu|gelu", ...
std::string Expected(const FD* f) {
  const Bounds b = BoundsOf(f);
  std::string range;
  if (b.has_min && b.has_max) {
    range = " in [" + ShortestDouble(b.min) + ", " + ShortestDouble(b.max) + "]";
  } else if (b.has_min) {
    range = " >= " + ShortestDouble(b.min);
  } else if (b.has_max) {
    range = " <= " + ShortestDouble(b.max);
  }
  switch (f->cpp_type()) {
    case FD::CPPTYPE_INT64:
      return "an integer" + range;
    case FD::CPPTYPE_UINT64:
      return "a non-negative integer" + range;
    case FD::CPPTYPE_DOUBLE:
      return "a number" + range;
    case FD::CPPTYPE_BOOL:
      return "true or false";
    case FD::CPPTYPE_STRING: {
      const std::string& choices = f->options().GetExtension(dtrain::proto::choices);
      return choices.empty() ? "a string" : "one of " + choices;
    }
    default:
      return std::string("a ") + f->type_name();
  }
}

// How a YAML value reads in an error message.
std::string Got(const YamlNode& v) {
  if (v.kind != Kind::kScalar) return YamlKindName(v.kind);
  if (v.IsNull()) return "an empty value";
  const std::string s = v.scalar.size() > 60 ? v.scalar.substr(0, 60) + "..." : v.scalar;
  return v.quoted ? "the quoted string '" + s + "'" : "'" + s + "'";
}

// ---- strict scalar parsing ----------------------------------------------------------------

bool IsDigit(char c) { return c >= '0' && c <= '9'; }

bool IsIntegerText(const std::string& s, bool allow_sign) {
  std::size_t i = (allow_sign && !s.empty() && (s[0] == '-' || s[0] == '+')) ? 1 : 0;
  if (i == s.size()) return false;
  for (; i < s.size(); ++i) {
    if (!IsDigit(s[i])) return false;
  }
  return true;
}

// [-+]? (d+ (. d*)? | . d+) ([eE] [-+]? d+)?  — no hex, inf or nan, which strtod would take.
bool IsFloatText(const std::string& s) {
  std::size_t i = 0;
  auto sign = [&] { i += (i < s.size() && (s[i] == '-' || s[i] == '+')) ? 1 : 0; };
  auto digits = [&] {
    const std::size_t from = i;
    while (i < s.size() && IsDigit(s[i])) ++i;
    return i - from;
  };
  sign();
  std::size_t mantissa = digits();
  if (i < s.size() && s[i] == '.') {
    ++i;
    mantissa += digits();
  }
  if (mantissa == 0) return false;
  if (i < s.size() && (s[i] == 'e' || s[i] == 'E')) {
    ++i;
    sign();
    if (digits() == 0) return false;
  }
  return i == s.size();
}

// One checked value of a scalar field (or of an item of a repeated one).
struct Scalar {
  std::int64_t i = 0;
  std::uint64_t u = 0;
  double d = 0;
  bool b = false;
  std::string s;
};

Status ParseScalar(const YamlNode& v, const FD* f, const std::string& key, const Origin& at, Scalar* out) {
  auto fail = [&](const std::string& note) {
    return KeyError(at, key, "expected " + Expected(f) + ", got " + Got(v) + note);
  };
  if (v.kind != Kind::kScalar || v.IsNull()) return fail("");
  const std::string& s = v.scalar;
  double number = 0;  // for the bounds check
  switch (f->cpp_type()) {
    case FD::CPPTYPE_STRING: {
      const std::string& choices = f->options().GetExtension(dtrain::proto::choices);
      if (!choices.empty() && !IsChoice(s, choices)) return fail("");
      out->s = s;
      return Status::OK();
    }
    case FD::CPPTYPE_BOOL:
      if (v.quoted || (s != "true" && s != "false")) return fail("");
      out->b = s == "true";
      return Status::OK();
    case FD::CPPTYPE_INT64:
      if (v.quoted || !IsIntegerText(s, /*allow_sign=*/true)) return fail("");
      errno = 0;
      out->i = std::strtoll(s.c_str(), nullptr, 10);
      if (errno == ERANGE) return fail(" (out of the int64 range)");
      number = static_cast<double>(out->i);
      break;
    case FD::CPPTYPE_UINT64:
      if (v.quoted || !IsIntegerText(s, /*allow_sign=*/false)) return fail("");
      errno = 0;
      out->u = std::strtoull(s.c_str(), nullptr, 10);
      if (errno == ERANGE) return fail(" (out of the uint64 range)");
      number = static_cast<double>(out->u);
      break;
    case FD::CPPTYPE_DOUBLE:
      if (v.quoted || !IsFloatText(s)) return fail("");
      out->d = std::strtod(s.c_str(), nullptr);
      if (!std::isfinite(out->d)) return fail(" (out of the double range)");
      number = out->d;
      break;
    default:
      return Status::Unimplemented(at.Str() + ": key '" + key + "': field type " + f->type_name() +
                                   " is not supported by the config loader");
  }
  const Bounds b = BoundsOf(f);
  if ((b.has_min && number < b.min) || (b.has_max && number > b.max)) return fail("");
  return Status::OK();
}

void Store(pb::Message* m, const FD* f, const Scalar& v) {
  const pb::Reflection* r = m->GetReflection();
  const bool rep = f->is_repeated();
  switch (f->cpp_type()) {
    case FD::CPPTYPE_INT64:
      rep ? r->AddInt64(m, f, v.i) : r->SetInt64(m, f, v.i);
      break;
    case FD::CPPTYPE_UINT64:
      rep ? r->AddUInt64(m, f, v.u) : r->SetUInt64(m, f, v.u);
      break;
    case FD::CPPTYPE_DOUBLE:
      rep ? r->AddDouble(m, f, v.d) : r->SetDouble(m, f, v.d);
      break;
    case FD::CPPTYPE_BOOL:
      rep ? r->AddBool(m, f, v.b) : r->SetBool(m, f, v.b);
      break;
    case FD::CPPTYPE_STRING:
      rep ? r->AddString(m, f, v.s) : r->SetString(m, f, v.s);
      break;
    default:
      break;  // ParseScalar rejected the type
  }
}

// ---- mapping YAML onto messages -------------------------------------------------------------

// "known keys of 'optim': name, lr, ..." (or "known top-level keys: model, ...").
std::string KnownKeys(const pb::Descriptor* d, const std::string& prefix) {
  std::string msg = "known " + (prefix.empty() ? std::string("top-level keys") : "keys of '" + prefix + "'");
  for (int i = 0; i < d->field_count(); ++i) msg += (i == 0 ? ": " : ", ") + d->field(i)->name();
  return msg;
}

std::string UnknownKey(const pb::Descriptor* d, const std::string& prefix, const std::string& key) {
  return "unknown key '" + key + "' (" + KnownKeys(d, prefix) + ")";
}

// Renamed keys: each (renamed_from) old dotted key -> the dotted key of its field now; and the old keys a YAML
// document holds, applied after the whole document (ApplyRenamed).
struct Renames {
  struct Found {
    std::string from, to;
    const YamlNode* value;
    Origin at;
  };
  std::map<std::string, std::string> to;
  std::vector<Found> found;
};

void CollectRenames(const pb::Descriptor* d, const std::string& prefix, Renames* r) {
  for (int i = 0; i < d->field_count(); ++i) {
    const FD* f = d->field(i);
    const std::string key = Join(prefix, f->name());
    if (f->cpp_type() == FD::CPPTYPE_MESSAGE && !f->is_repeated()) CollectRenames(f->message_type(), key, r);
    const std::string& old = f->options().GetExtension(dtrain::proto::renamed_from);
    for (std::size_t start = 0; !old.empty() && start <= old.size();) {
      const std::size_t bar = std::min(old.find('|', start), old.size());
      r->to[old.substr(start, bar - start)] = key;
      start = bar + 1;
    }
  }
}

Status ApplyMap(const YamlNode& node, pb::Message* m, const std::string& prefix, const std::string& source,
                Renames* renames);

Status SetField(const YamlNode& v, pb::Message* m, const FD* f, const std::string& key, const Origin& at,
                Renames* renames = nullptr) {
  if (f->cpp_type() == FD::CPPTYPE_MESSAGE && !f->is_repeated()) {
    if (v.IsNull()) return Status::OK();  // `optim:` with nothing under it keeps the defaults
    if (v.kind != Kind::kMap) return KeyError(at, key, "expected a mapping, got " + Got(v));
    return ApplyMap(v, m->GetReflection()->MutableMessage(m, f), key, at.source, renames);
  }
  if (!f->is_repeated()) {
    Scalar value;
    DT_RETURN_IF_ERROR(ParseScalar(v, f, key, at, &value));
    Store(m, f, value);
    return Status::OK();
  }
  if (v.kind != Kind::kSeq) return KeyError(at, key, "expected a sequence such as [1, 2], got " + Got(v));
  const Bounds b = BoundsOf(f);
  if (b.has_min && static_cast<double>(v.items.size()) < b.min) {
    return KeyError(at, key,
                    "expected at least " + ShortestDouble(b.min) + " item(s), got " + std::to_string(v.items.size()));
  }
  std::vector<Scalar> values(v.items.size());
  for (std::size_t i = 0; i < v.items.size(); ++i) {
    const Origin item_at{at.source, at.line > 0 ? v.items[i].line : 0};
    DT_RETURN_IF_ERROR(ParseScalar(v.items[i], f, key + "[" + std::to_string(i) + "]", item_at, &values[i]));
  }
  m->GetReflection()->ClearField(m, f);
  for (const Scalar& value : values) Store(m, f, value);
  return Status::OK();
}

Status ApplyMap(const YamlNode& node, pb::Message* m, const std::string& prefix, const std::string& source,
                Renames* renames) {
  const pb::Descriptor* d = m->GetDescriptor();
  for (const YamlEntry& e : node.entries) {
    const std::string key = Join(prefix, e.key);
    const FD* f = d->FindFieldByName(e.key);
    if (f == nullptr && renames != nullptr && renames->to.count(key) != 0) {
      renames->found.push_back({key, renames->to.at(key), &e.value, Origin{source, e.value.line}});
      continue;
    }
    if (f == nullptr) return Status::InvalidArgument(Origin{source, e.line}.Str() + ": " + UnknownKey(d, prefix, key));
    DT_RETURN_IF_ERROR(SetField(e.value, m, f, key, Origin{source, e.value.line}, renames));
  }
  return Status::OK();
}

// Sets every field that has a (default_value), recursing into sub-messages (the schema is not recursive).
Status ApplyDefaults(pb::Message* m, const std::string& prefix) {
  const pb::Descriptor* d = m->GetDescriptor();
  for (int i = 0; i < d->field_count(); ++i) {
    const FD* f = d->field(i);
    const std::string key = Join(prefix, f->name());
    if (f->cpp_type() == FD::CPPTYPE_MESSAGE && !f->is_repeated()) {
      DT_RETURN_IF_ERROR(ApplyDefaults(m->GetReflection()->MutableMessage(m, f), key));
      continue;
    }
    if (!f->options().HasExtension(dtrain::proto::default_value)) continue;
    const Origin at{"(default_value) of '" + key + "' in proto/config.proto", 0};
    YamlNode v;
    Status st = ParseYamlValue(f->options().GetExtension(dtrain::proto::default_value), at.source, &v);
    if (st.ok()) st = SetField(v, m, f, key, at);
    if (!st.ok()) return Status::Internal(st.message());
  }
  return Status::OK();
}

// "--set a.b=c": walks the dotted key through the schema, then sets the leaf from the YAML value. A renamed key
// sets its field now, with a warning.
Status ApplyOverride(const std::string& override_text, const Renames& renames, pb::Message* root) {
  const std::string source = "--set " + override_text;
  const std::size_t eq = override_text.find('=');
  if (eq == std::string::npos || eq == 0) {
    return Status::InvalidArgument(source + ": expected key=value, e.g. --set optim.lr=0.01");
  }
  std::string path = override_text.substr(0, eq);
  if (renames.to.count(path) != 0) {
    DT_LOG_WARN(kRuntime, "{}: key '{}' is deprecated, set as '{}' (use that name)", source, path, renames.to.at(path));
    path = renames.to.at(path);
  }
  pb::Message* m = root;
  const FD* f = nullptr;
  std::string prefix;
  for (std::size_t start = 0;;) {
    const std::size_t dot = path.find('.', start);
    const std::string name = path.substr(start, dot == std::string::npos ? std::string::npos : dot - start);
    if (f != nullptr) {  // step into the field named so far
      if (f->cpp_type() != FD::CPPTYPE_MESSAGE || f->is_repeated()) {
        return Status::InvalidArgument(source + ": key '" + prefix + "' has no sub-keys");
      }
      m = m->GetReflection()->MutableMessage(m, f);
    }
    const std::string key = Join(prefix, name);
    f = m->GetDescriptor()->FindFieldByName(name);
    if (f == nullptr) return Status::InvalidArgument(source + ": " + UnknownKey(m->GetDescriptor(), prefix, key));
    prefix = key;
    if (dot == std::string::npos) break;
    start = dot + 1;
  }
  if (f->cpp_type() == FD::CPPTYPE_MESSAGE) {
    return Status::InvalidArgument(source + ": key '" + prefix + "' is a mapping; set one of its keys (" +
                                   KnownKeys(f->message_type(), prefix) + ")");
  }
  YamlNode v;
  DT_RETURN_IF_ERROR(ParseYamlValue(override_text.substr(eq + 1), source, &v));
  return SetField(v, m, f, prefix, Origin{source, 0});
}

// ---- rendering ----------------------------------------------------------------------------

bool IsSafePlain(const std::string& s) {
  if (s.empty() || s[0] == '-') return false;
  for (const char c : s) {
    const bool alnum = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || IsDigit(c);
    if (!alnum && std::string_view("_-./+~=").find(c) == std::string_view::npos) return false;
  }
  return true;
}

std::string QuotedString(const std::string& s) {
  if (IsSafePlain(s)) return s;
  std::string q = "\"";
  for (const char c : s) {
    const auto u = static_cast<unsigned char>(c);
    if (c == '"' || c == '\\') {
      q += '\\';
      q += c;
    } else if (c == '\n') {
      q += "\\n";
    } else if (c == '\t') {
      q += "\\t";
    } else if (u < 0x20 || u == 0x7f) {
      char hex[8];
      std::snprintf(hex, sizeof(hex), "\\x%02x", u);
      q += hex;
    } else {
      q += c;
    }
  }
  return q + "\"";
}

std::string DoubleText(double v) {
  std::string s = ShortestDouble(v);
  if (s.find_first_of(".e") == std::string::npos) s += ".0";  // reads as a float at a glance
  return s;
}

// The YAML text of field `f` (index < 0) or of its item `index`.
std::string ScalarText(const pb::Message& m, const FD* f, int index) {
  const pb::Reflection* r = m.GetReflection();
  const bool rep = index >= 0;
  switch (f->cpp_type()) {
    case FD::CPPTYPE_INT64:
      return std::to_string(rep ? r->GetRepeatedInt64(m, f, index) : r->GetInt64(m, f));
    case FD::CPPTYPE_UINT64:
      return std::to_string(rep ? r->GetRepeatedUInt64(m, f, index) : r->GetUInt64(m, f));
    case FD::CPPTYPE_DOUBLE:
      return DoubleText(rep ? r->GetRepeatedDouble(m, f, index) : r->GetDouble(m, f));
    case FD::CPPTYPE_BOOL:
      return (rep ? r->GetRepeatedBool(m, f, index) : r->GetBool(m, f)) ? "true" : "false";
    case FD::CPPTYPE_STRING:  // credentials in a URL value (storage.endpoint) are never rendered
      return QuotedString(RedactUrl(rep ? r->GetRepeatedString(m, f, index) : r->GetString(m, f)));
    default:
      return std::string("null  # unsupported field type ") + f->type_name();
  }
}

// Renders `m`; with `base` (the same message type), only the fields whose value differs from base's.
void Render(const pb::Message& m, const pb::Message* base, int indent, std::string* out) {
  const pb::Descriptor* d = m.GetDescriptor();
  const pb::Reflection* r = m.GetReflection();
  const std::string pad(indent, ' ');
  for (int i = 0; i < d->field_count(); ++i) {
    const FD* f = d->field(i);
    if (f->cpp_type() == FD::CPPTYPE_MESSAGE && !f->is_repeated()) {
      std::string sub;
      Render(r->GetMessage(m, f), base ? &base->GetReflection()->GetMessage(*base, f) : nullptr, indent + 2, &sub);
      if (base == nullptr || !sub.empty()) *out += pad + f->name() + ":\n" + sub;
      continue;
    }
    if (base != nullptr) {
      bool same = !f->is_repeated() || r->FieldSize(m, f) == base->GetReflection()->FieldSize(*base, f);
      const int n = f->is_repeated() ? r->FieldSize(m, f) : 1;
      for (int j = 0; same && j < n; ++j) {
        same = ScalarText(m, f, f->is_repeated() ? j : -1) == ScalarText(*base, f, f->is_repeated() ? j : -1);
      }
      if (same) continue;
    }
    *out += pad + f->name() + ":";
    if (f->is_repeated()) {
      *out += " [";
      for (int j = 0; j < r->FieldSize(m, f); ++j) *out += (j == 0 ? "" : ", ") + ScalarText(m, f, j);
      *out += "]\n";
    } else {
      *out += " " + ScalarText(m, f, -1) + "\n";
    }
  }
}

// ---- renamed keys, applied after the document ---------------------------------------------

// The message holding the field of the dotted key `path` (one the schema has), and the field.
const FD* FieldAt(const std::string& path, pb::Message** m) {
  for (std::size_t start = 0;;) {
    const std::size_t dot = path.find('.', start);
    const std::size_t end = dot == std::string::npos ? path.size() : dot;
    const FD* f = (*m)->GetDescriptor()->FindFieldByName(path.substr(start, end - start));
    if (dot == std::string::npos) return f;
    *m = (*m)->GetReflection()->MutableMessage(*m, f);
    start = dot + 1;
  }
}

// Each old key of the document sets its field, with one warning naming them all. An old key at the field's default
// says nothing (a config rendered before the rename holds every old key); old and new keys that give one field
// different values are an error naming both.
Status ApplyRenamed(const Renames& renames, const std::string& source, pb::Message* root) {
  if (renames.found.empty()) return Status::OK();
  std::unique_ptr<pb::Message> defaults(root->New());
  DT_RETURN_IF_ERROR(ApplyDefaults(defaults.get(), ""));
  std::map<std::string, std::string> set_by;  // new key -> the old key that set it
  std::string names;
  for (const Renames::Found& r : renames.found) {
    names += (names.empty() ? "" : ", ") + r.from + " -> " + r.to;
    pb::Message* m = root;
    pb::Message* d = defaults.get();
    const FD* f = FieldAt(r.to, &m);
    FieldAt(r.to, &d);
    std::unique_ptr<pb::Message> scratch(m->New());
    DT_RETURN_IF_ERROR(SetField(*r.value, scratch.get(), f, r.from, r.at));
    const std::string value = ScalarText(*scratch, f, -1);
    const std::string now = ScalarText(*m, f, -1);
    const std::string def = ScalarText(*d, f, -1);
    if (value == def || value == now) continue;
    if (now != def) {
      const std::string other = set_by.count(r.to) != 0 ? set_by[r.to] : r.to;
      return KeyError(r.at, r.from,
                      "renamed to '" + r.to + "', gives " + value + " but '" + other + "' gives " + now +
                          ": keep only '" + r.to + "'");
    }
    DT_RETURN_IF_ERROR(SetField(*r.value, m, f, r.from, r.at));
    set_by[r.to] = r.from;
  }
  DT_LOG_WARN(kRuntime, "{}: deprecated keys, read under their new names: {}", source, names);
  return Status::OK();
}

}  // namespace

Status ParseConfig(const std::string& yaml_text, const std::string& source_name,
                   const std::vector<std::string>& overrides, dtrain::proto::Config* out) {
  out->Clear();
  DT_RETURN_IF_ERROR(ApplyDefaults(out, ""));
  YamlNode root;
  DT_RETURN_IF_ERROR(ParseYaml(yaml_text, source_name, &root));
  if (root.kind != Kind::kMap) {
    return Status::InvalidArgument(Origin{source_name, root.line}.Str() +
                                   ": expected a mapping of sections (model, data, ...) at the top level, got " +
                                   YamlKindName(root.kind));
  }
  Renames renames;
  CollectRenames(out->GetDescriptor(), "", &renames);
  DT_RETURN_IF_ERROR(ApplyMap(root, out, "", source_name, &renames));
  DT_RETURN_IF_ERROR(ApplyRenamed(renames, source_name, out));
  for (const std::string& o : overrides) DT_RETURN_IF_ERROR(ApplyOverride(o, renames, out));
  return Status::OK();
}

Status LoadConfig(const std::string& path, const std::vector<std::string>& overrides, dtrain::proto::Config* out) {
  // O_NONBLOCK: a FIFO named as the config must not block the open forever (it is refused below).
  const int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) {
    const int err = errno;
    if (err == ENOENT) return Status::NotFound("config file not found: " + path);
    if (err == ENXIO) return Status::InvalidArgument("config " + path + " is a socket, not a regular file");
    return Status::IoError("cannot open config file " + path + ": " + std::generic_category().message(err));
  }
  std::unique_ptr<std::FILE, int (*)(std::FILE*)> file(::fdopen(fd, "rb"), &std::fclose);
  if (file == nullptr) {
    const int err = errno;
    ::close(fd);
    return Status::IoError("cannot open config file " + path + ": " + std::generic_category().message(err));
  }
  struct stat st;
  if (::fstat(fd, &st) != 0) {
    return Status::IoError("cannot stat config file " + path + ": " + std::generic_category().message(errno));
  }
  if (S_ISDIR(st.st_mode)) {
    return Status::InvalidArgument("config " + path + " is a directory (expected a YAML file, e.g. configs/mlp.yaml)");
  }
  if (!S_ISREG(st.st_mode)) {
    return Status::InvalidArgument("config " + path + " is " +
                                   (S_ISFIFO(st.st_mode) ? "a FIFO (named pipe)" : "a device") +
                                   ", not a regular file (expected a YAML file, e.g. configs/mlp.yaml)");
  }
  (void)::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) & ~O_NONBLOCK);
  std::string text;
  char buf[1 << 16];
  std::size_t n = 0;
  while ((n = std::fread(buf, 1, sizeof(buf), file.get())) > 0) {
    text.append(buf, n);
    if (text.size() > kYamlMaxInputBytes) {
      return Status::InvalidArgument(path + ": larger than " + std::to_string(kYamlMaxInputBytes) + " bytes");
    }
  }
  if (std::ferror(file.get())) {
    return Status::IoError("cannot read config file " + path + ": " + std::generic_category().message(errno));
  }
  if (!HasContent(text)) {
    return Status::InvalidArgument("config " + path +
                                   " is empty (no keys, only blanks or comments): refusing to train on defaults");
  }
  return ParseConfig(text, path, overrides, out);
}

std::string ConfigToYaml(const dtrain::proto::Config& c) {
  std::string out;
  Render(c, nullptr, 0, &out);
  return out;
}

Status ConfigDiffYaml(const dtrain::proto::Config& c, std::string* out) {
  dtrain::proto::Config defaults;
  DT_RETURN_IF_ERROR(ApplyDefaults(&defaults, ""));
  out->clear();
  Render(c, &defaults, 0, out);
  return Status::OK();
}

std::vector<std::string> ConfigKeys() {
  std::vector<std::string> keys;
  const std::function<void(const pb::Descriptor*, const std::string&)> walk = [&](const pb::Descriptor* d,
                                                                                  const std::string& prefix) {
    for (int i = 0; i < d->field_count(); ++i) {
      const FD* f = d->field(i);
      if (f->type() == FD::TYPE_MESSAGE && !f->is_repeated()) {
        walk(f->message_type(), prefix + f->name() + ".");
      } else {
        keys.push_back(prefix + f->name());
      }
    }
  };
  walk(dtrain::proto::Config::descriptor(), "");
  return keys;
}

}  // namespace dtrain::runtime
