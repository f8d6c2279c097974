#include "storage/s3_retry.h"

#include <algorithm>
#include <array>

#include "storage/s3_xml.h"

namespace dtrain::storage::detail {
namespace {

// Throttling and transient error codes of the AWS SDKs' standard retry mode (botocore's
// retries/standard.py, the Java SDK's RetryUtils), plus S3's own InternalError and ServiceUnavailable.
constexpr std::array<const char*, 19> kRetryableErrorCodes = {
    "Throttling",
    "ThrottlingException",
    "ThrottledException",
    "RequestThrottledException",
    "TooManyRequestsException",
    "ProvisionedThroughputExceededException",
    "TransactionInProgressException",
    "RequestLimitExceeded",
    "BandwidthLimitExceeded",
    "LimitExceededException",
    "RequestThrottled",
    "SlowDown",
    "PriorRequestNotComplete",
    "EC2ThrottledException",
    "RequestTimeout",
    "RequestTimeoutException",
    "InternalError",
    "ServiceUnavailable",
    "IDPCommunicationError",
};

bool IsRetryableStatus(long status) { return status == 408 || status == 429 || (status >= 500 && status != 501); }

}  // namespace

std::string S3ErrorCode(const HttpResponse& r) {
  std::string code;
  if (!XmlFirst(r.body, "Code", &code)) code.clear();
  return code.substr(0, 64);
}

std::string RetryReason(const HttpResponse& r) {
  if (r.status == 0) {
    if (r.too_large || !IsRetryableCurlCode(r.curl_code)) return "";
    return "curl error " + std::to_string(r.curl_code) + ": " + r.curl_error;
  }
  if (r.status >= 200 && r.status < 300) return "";
  const std::string code = S3ErrorCode(r);
  const bool code_retryable =
      std::find(kRetryableErrorCodes.begin(), kRetryableErrorCodes.end(), code) != kRetryableErrorCodes.end();
  if (!code_retryable && !IsRetryableStatus(r.status)) return "";
  return "HTTP " + std::to_string(r.status) + (code.empty() ? "" : " " + code);
}

int64_t BackoffCeilingMs(int retry, int64_t base_ms, int64_t cap_ms) {
  // base * 2^retry without overflow: stop doubling once the cap is reached.
  int64_t ceiling = std::min(base_ms, cap_ms);
  for (int i = 0; i < retry && ceiling < cap_ms; ++i) ceiling = std::min(cap_ms, ceiling * 2);
  return ceiling;
}

int64_t BackoffMs(int retry, std::mt19937_64* rng, int64_t base_ms, int64_t cap_ms) {
  return std::uniform_int_distribution<int64_t>(0, BackoffCeilingMs(retry, base_ms, cap_ms))(*rng);
}

}  // namespace dtrain::storage::detail
