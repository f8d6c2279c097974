#include "storage/sigv4.h"

#include <algorithm>
#include <cctype>
#include <ctime>

#include "storage/sha256.h"

namespace dtrain::storage {
namespace {

std::string Lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

// Trims the ends and folds inner runs of spaces into one (SigV4's header value rule).
std::string TrimValue(const std::string& v) {
  std::string out;
  bool space = false;
  for (char c : v) {
    if (c == ' ' || c == '\t') {
      space = !out.empty();
      continue;
    }
    if (space) out += ' ';
    space = false;
    out += c;
  }
  return out;
}

std::string Scope(const SigV4Key& key, const std::string& date) {
  return date + "/" + key.region + "/" + key.service + "/aws4_request";
}

std::string Raw(const Sha256Digest& d) { return std::string(reinterpret_cast<const char*>(d.data()), d.size()); }

}  // namespace

std::string UriEncode(const std::string& s, bool encode_slash) {
  static const char kHex[] = "0123456789ABCDEF";
  std::string out;
  out.reserve(s.size() * 3);
  for (unsigned char c : s) {
    if (std::isalnum(c) || c == '-' || c == '.' || c == '_' || c == '~' || (c == '/' && !encode_slash)) {
      out += static_cast<char>(c);
    } else {
      out += '%';
      out += kHex[c >> 4];
      out += kHex[c & 15];
    }
  }
  return out;
}

std::string CanonicalQuery(const std::vector<std::pair<std::string, std::string>>& query) {
  std::vector<std::pair<std::string, std::string>> enc;
  for (const auto& [k, v] : query) enc.emplace_back(UriEncode(k, true), UriEncode(v, true));
  std::sort(enc.begin(), enc.end());
  std::string out;
  for (const auto& [k, v] : enc) out += (out.empty() ? "" : "&") + k + "=" + v;
  return out;
}

std::string CanonicalRequest(const SigV4Request& req, std::string* signed_headers) {
  std::vector<std::pair<std::string, std::string>> headers;
  for (const auto& [k, v] : req.headers) headers.emplace_back(Lower(k), TrimValue(v));
  std::sort(headers.begin(), headers.end());
  std::string canon_headers;
  signed_headers->clear();
  for (const auto& [k, v] : headers) {
    canon_headers += k + ":" + v + "\n";
    *signed_headers += (signed_headers->empty() ? "" : ";") + k;
  }
  return req.method + "\n" + UriEncode(req.path.empty() ? "/" : req.path, false) + "\n" + CanonicalQuery(req.query) +
         "\n" + canon_headers + "\n" + *signed_headers + "\n" + req.payload_hash;
}

std::string StringToSign(const std::string& amz_date, const std::string& scope, const std::string& canonical_request) {
  return "AWS4-HMAC-SHA256\n" + amz_date + "\n" + scope + "\n" + Hex(Sha256Of(canonical_request));
}

std::string SigningKey(const SigV4Key& key, const std::string& date) {
  std::string k = Raw(HmacSha256("AWS4" + key.secret_key, date));
  k = Raw(HmacSha256(k, key.region));
  k = Raw(HmacSha256(k, key.service));
  return Raw(HmacSha256(k, "aws4_request"));
}

std::string Signature(const SigV4Request& req, const SigV4Key& key, const std::string& amz_date) {
  std::string signed_headers;
  const std::string date = amz_date.substr(0, 8);
  const std::string sts = StringToSign(amz_date, Scope(key, date), CanonicalRequest(req, &signed_headers));
  return Hex(HmacSha256(SigningKey(key, date), sts));
}

std::string AuthorizationHeader(const SigV4Request& req, const SigV4Key& key, const std::string& amz_date) {
  std::string signed_headers;
  (void)CanonicalRequest(req, &signed_headers);
  return "AWS4-HMAC-SHA256 Credential=" + key.access_key + "/" + Scope(key, amz_date.substr(0, 8)) +
         ",SignedHeaders=" + signed_headers + ",Signature=" + Signature(req, key, amz_date);
}

std::string AmzDateNow() {
  const std::time_t now = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&now, &tm);
  char buf[32];
  std::strftime(buf, sizeof(buf), "%Y%m%dT%H%M%SZ", &tm);
  return buf;
}

}  // namespace dtrain::storage
