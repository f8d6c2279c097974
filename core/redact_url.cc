#include "core/redact_url.h"

namespace dtrain {

std::string RedactUrl(const std::string& url) {
  const size_t sep = url.find("://");
  if (sep == std::string::npos) return url;  // a local path
  std::string out = url;
  const size_t query = out.find('?', sep);
  if (query != std::string::npos) out = out.substr(0, query) + "?<redacted>";
  const size_t auth = sep + 3;
  const size_t auth_end = out.find('/', auth);
  const size_t at = out.rfind('@', auth_end == std::string::npos ? std::string::npos : auth_end);
  if (at != std::string::npos && at >= auth) out = out.substr(0, auth) + "<redacted>" + out.substr(at);
  return out;
}

}  // namespace dtrain
