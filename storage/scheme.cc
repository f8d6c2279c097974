#include "storage/scheme.h"

#include <iterator>

#include "core/redact_url.h"
#include "storage/file_storage.h"
#include "storage/s3_storage.h"

namespace dtrain::storage {
namespace {

// Every scheme Storage::Open accepts, one row each (see the header for adding one).
const Scheme* const kSchemes[] = {
    &kFileScheme,
    &kS3Scheme,
};

}  // namespace

Status FindScheme(const std::string& url, const Scheme** out) {
  const size_t sep = url.find("://");
  if (sep == std::string::npos) {
    *out = &kFileScheme;
    return Status::OK();
  }
  const std::string name = url.substr(0, sep);
  for (const Scheme* s : kSchemes) {
    if (name == s->name) {
      *out = s;
      return Status::OK();
    }
  }
  return Status::InvalidArgument(
      "storage URL '" + RedactUrl(url) +
      "': " + (name.empty() ? std::string("no scheme before '://'") : "unknown scheme '" + name + "'") +
      " (known: " + KnownSchemes() + ")");
}

bool LocalDir(const std::string& url, std::string* dir) {
  const Scheme* s = nullptr;
  return FindScheme(url, &s).ok() && s->local_dir != nullptr && s->local_dir(url, dir);
}

std::string KnownSchemes() {
  std::string out;
  for (const Scheme* s : kSchemes) out += (out.empty() ? "" : ", ") + std::string(s->url_form);
  return out;
}

std::string RedactUrl(const std::string& url) { return ::dtrain::RedactUrl(url); }

}  // namespace dtrain::storage
