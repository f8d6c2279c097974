#include "storage/s3_list.h"

#include <cerrno>
#include <cstdio>
#include <cstdlib>

#include "storage/key_util.h"
#include "storage/s3_xml.h"

namespace dtrain::storage::detail {
namespace {

// A decimal size below 2^63 (it is used as an int64 further on); false otherwise.
bool ParseSize(const std::string& s, uint64_t* out) {
  if (s.empty() || s.size() > 19 || s.find_first_not_of("0123456789") != std::string::npos) return false;
  errno = 0;
  const unsigned long long v = std::strtoull(s.c_str(), nullptr, 10);
  if (errno != 0 || v > static_cast<unsigned long long>(INT64_MAX)) return false;
  *out = v;
  return true;
}

}  // namespace

std::string EscapeForMessage(const std::string& s, size_t max_bytes) {
  std::string out;
  for (size_t i = 0; i < s.size() && i < max_bytes; ++i) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    if (c >= 0x20 && c < 0x7f && c != '\\') {
      out += static_cast<char>(c);
    } else {
      char buf[8];
      std::snprintf(buf, sizeof(buf), "\\x%02x", c);
      out += buf;
    }
  }
  if (s.size() > max_bytes) out += "... (" + std::to_string(s.size()) + " bytes)";
  return out;
}

Status ParseListPage(const std::string& xml, const std::string& what, const std::string& full_prefix,
                     const std::string& strip, size_t max_keys, ListPage* page) {
  page->objects.clear();
  page->truncated = false;
  page->next_token.clear();
  const std::string bad = what + ": the server's listing ";
  for (const std::string& block : XmlBlocks(xml, "Contents", max_keys)) {
    std::string name, size_text;
    if (!XmlFirst(block, "Key", &name)) {
      return Status::IoError(bad + "has an entry without a valid <Key>: <Contents>" + EscapeForMessage(block) +
                             "</Contents>");
    }
    const std::string shown = "key '" + EscapeForMessage(name) + "'";
    uint64_t size = 0;
    if (!XmlFirst(block, "Size", &size_text) || !ParseSize(size_text, &size)) {
      return Status::IoError(bad + "gives " + shown + " without a valid <Size> (got '" + EscapeForMessage(size_text) +
                             "')");
    }
    if (name.size() > kMaxS3KeyBytes) {
      return Status::IoError(bad + "has a key of " + std::to_string(name.size()) + " bytes (S3 allows " +
                             std::to_string(kMaxS3KeyBytes) + "): " + shown);
    }
    if (name.compare(0, full_prefix.size(), full_prefix) != 0) {
      return Status::IoError(bad + "gives " + shown + ", outside the requested prefix '" +
                             EscapeForMessage(full_prefix) + "'");
    }
    const std::string key = name.substr(strip.size());              // full_prefix starts with strip
    if (size == 0 && (key.empty() || key.back() == '/')) continue;  // a directory marker
    const Status valid = ValidateKey(what, key);
    if (!valid.ok()) {
      // ValidateKey's reason, without its echo of the raw (unescaped) key.
      const std::string echo = what + ": bad key '" + key + "': ";
      const std::string& msg = valid.message();
      const std::string why = msg.compare(0, echo.size(), echo) == 0 ? msg.substr(echo.size()) : msg;
      return Status::IoError(bad + "gives " + shown + ", not a valid storage key: " + EscapeForMessage(why));
    }
    page->objects.push_back({key, size});
  }
  std::string truncated;
  page->truncated = XmlFirst(xml, "IsTruncated", &truncated) && truncated == "true";
  if (page->truncated && !XmlFirst(xml, "NextContinuationToken", &page->next_token)) page->next_token.clear();
  return Status::OK();
}

}  // namespace dtrain::storage::detail
