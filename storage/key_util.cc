#include "storage/key_util.h"

namespace dtrain::storage::detail {
namespace {

// Checks the segments of `s` (already known non-empty unless allow_trailing_slash lets the last be empty).
bool SegmentsOk(const std::string& s, bool allow_trailing_slash, std::string* why) {
  if (!s.empty() && s[0] == '/') {
    *why = "leading '/'";
    return false;
  }
  for (unsigned char c : s) {
    if (c < 0x20 || c == 0x7f) {
      *why = "control character";
      return false;
    }
  }
  size_t begin = 0;
  while (begin <= s.size()) {
    size_t end = s.find('/', begin);
    if (end == std::string::npos) end = s.size();
    const std::string seg = s.substr(begin, end - begin);
    const bool last = end == s.size();
    if (seg.empty() && !(last && allow_trailing_slash)) {
      *why = "empty segment";
      return false;
    }
    if (seg == "." || seg == "..") {
      *why = "'" + seg + "' segment";
      return false;
    }
    begin = end + 1;
  }
  return true;
}

}  // namespace

Status ValidateKey(const std::string& url, const std::string& key) {
  std::string why = "empty key";
  if (!key.empty() && SegmentsOk(key, false, &why)) return Status::OK();
  return Status::InvalidArgument(url + ": bad key '" + key + "': " + why +
                                 " (keys are relative '/'-separated names without '.' or '..')");
}

Status ValidatePrefix(const std::string& url, const std::string& prefix) {
  std::string why;
  if (prefix.empty() || SegmentsOk(prefix, true, &why)) return Status::OK();
  return Status::InvalidArgument(url + ": bad prefix '" + prefix + "': " + why);
}

}  // namespace dtrain::storage::detail
