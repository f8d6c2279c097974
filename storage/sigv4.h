#pragma once
// AWS Signature Version 4 for header-based authentication (the `Authorization` header), as specified in
// "Signature Calculations for the Authorization Header" of the Amazon S3 API reference.
//
//   canonical request = METHOD \n URI \n QUERY \n HEADERS \n SIGNED-HEADERS \n PAYLOAD-HASH
//   string to sign    = AWS4-HMAC-SHA256 \n AMZ-DATE \n DATE/REGION/SERVICE/aws4_request \n hex(sha256(CR))
//   signing key       = HMAC(HMAC(HMAC(HMAC("AWS4" + secret, DATE), REGION), SERVICE), "aws4_request")
//
// Every header in SigV4Request::headers is signed (names lower-cased, values trimmed); the caller puts
// in at least host, x-amz-content-sha256 and x-amz-date (and x-amz-security-token with a session
// token). Pure functions, thread-safe.

#include <string>
#include <utility>
#include <vector>

namespace dtrain::storage {

struct SigV4Request {
  std::string method;  // "GET", "PUT", ...
  std::string path;    // decoded object path, e.g. "/bucket/a b.txt"; URI-encoded here ('/' kept)
  std::vector<std::pair<std::string, std::string>> query;    // decoded; a valueless key has value ""
  std::vector<std::pair<std::string, std::string>> headers;  // any case; all are signed
  std::string payload_hash;                                  // hex sha256 of the body, or "UNSIGNED-PAYLOAD"
};

struct SigV4Key {
  std::string access_key;
  std::string secret_key;
  std::string region;
  std::string service = "s3";
};

// RFC 3986 encoding of SigV4: unreserved bytes (A-Z a-z 0-9 - . _ ~) kept, the rest %XX with
// upper-case hex; '/' kept when encode_slash is false.
std::string UriEncode(const std::string& s, bool encode_slash);

// "a=1&b=&c=x%20y": encoded names and values, sorted by encoded name then value.
std::string CanonicalQuery(const std::vector<std::pair<std::string, std::string>>& query);

// The canonical request; *signed_headers gets "host;x-amz-content-sha256;x-amz-date".
std::string CanonicalRequest(const SigV4Request& req, std::string* signed_headers);

// amz_date is "YYYYMMDDTHHMMSSZ".
std::string StringToSign(const std::string& amz_date, const std::string& scope, const std::string& canonical_request);
std::string SigningKey(const SigV4Key& key, const std::string& date);  // raw 32 bytes
std::string Signature(const SigV4Request& req, const SigV4Key& key, const std::string& amz_date);

// "AWS4-HMAC-SHA256 Credential=AK/DATE/REGION/s3/aws4_request,SignedHeaders=...,Signature=...".
std::string AuthorizationHeader(const SigV4Request& req, const SigV4Key& key, const std::string& amz_date);

// The current UTC time as "YYYYMMDDTHHMMSSZ".
std::string AmzDateNow();

}  // namespace dtrain::storage
