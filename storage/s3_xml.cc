#include "storage/s3_xml.h"

#include <algorithm>
#include <cstdlib>

namespace dtrain::storage::detail {
namespace {

void AppendUtf8(unsigned long cp, std::string* out) {
  if (cp < 0x80) {
    *out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    *out += static_cast<char>(0xc0 | (cp >> 6));
    *out += static_cast<char>(0x80 | (cp & 0x3f));
  } else if (cp < 0x10000) {
    *out += static_cast<char>(0xe0 | (cp >> 12));
    *out += static_cast<char>(0x80 | ((cp >> 6) & 0x3f));
    *out += static_cast<char>(0x80 | (cp & 0x3f));
  } else {
    *out += static_cast<char>(0xf0 | (cp >> 18));
    *out += static_cast<char>(0x80 | ((cp >> 12) & 0x3f));
    *out += static_cast<char>(0x80 | ((cp >> 6) & 0x3f));
    *out += static_cast<char>(0x80 | (cp & 0x3f));
  }
}

// Decodes one reference body ("amp", "#65", "#x41"); false when malformed.
bool DecodeRef(const std::string& ref, std::string* out) {
  static const struct {
    const char* name;
    char c;
  } kNamed[] = {{"amp", '&'}, {"lt", '<'}, {"gt", '>'}, {"quot", '"'}, {"apos", '\''}};
  for (const auto& n : kNamed) {
    if (ref == n.name) {
      *out += n.c;
      return true;
    }
  }
  if (ref.size() < 2 || ref[0] != '#' || ref.size() > 10) return false;
  const bool hex = ref[1] == 'x' || ref[1] == 'X';
  const std::string digits = ref.substr(hex ? 2 : 1);
  // Digits only: strtoul alone would also take leading whitespace and a sign ("&# 65;", "&#+65;"),
  // which XML does not allow in a character reference.
  if (digits.empty() || digits.find_first_not_of(hex ? "0123456789abcdefABCDEF" : "0123456789") != std::string::npos) {
    return false;
  }
  char* end = nullptr;
  const unsigned long cp = std::strtoul(digits.c_str(), &end, hex ? 16 : 10);
  if (*end != '\0' || cp == 0 || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff)) return false;
  AppendUtf8(cp, out);
  return true;
}

}  // namespace

bool XmlDecode(const std::string& s, std::string* out) {
  out->clear();
  out->reserve(s.size());
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] != '&') {
      *out += s[i];
      continue;
    }
    // A bare '&' is not XML: only a whole reference may follow it.
    const size_t semi = s.find(';', i + 1);
    if (semi == std::string::npos || semi - i > 11 || !DecodeRef(s.substr(i + 1, semi - i - 1), out)) return false;
    i = semi;
  }
  return true;
}

std::vector<std::string> XmlBlocks(const std::string& xml, const std::string& tag, size_t max_count) {
  std::vector<std::string> out;
  const size_t limit = std::min(xml.size(), kMaxXmlBytes);
  const std::string open = "<" + tag + ">";
  const std::string close = "</" + tag + ">";
  size_t pos = 0;
  while (out.size() < max_count) {
    const size_t b = xml.find(open, pos);
    if (b == std::string::npos || b + open.size() > limit) break;
    const size_t e = xml.find(close, b + open.size());
    if (e == std::string::npos || e + close.size() > limit) break;
    out.push_back(xml.substr(b + open.size(), e - b - open.size()));
    pos = e + close.size();
  }
  return out;
}

bool XmlFirst(const std::string& xml, const std::string& tag, std::string* out) {
  const std::vector<std::string> v = XmlBlocks(xml, tag, 1);
  return !v.empty() && XmlDecode(v[0], out);
}

}  // namespace dtrain::storage::detail
