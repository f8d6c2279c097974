#pragma once
// The S3 retry policy, after the AWS SDKs' "standard" retry mode:
//   - what is retried: transport failures (connection refused/reset, timeouts, partial transfers: see
//     IsRetryableCurlCode), HTTP 408, 429 and 5xx (but 501 Not Implemented), and any answer whose
//     XML error code is a throttling or transient one (SlowDown, Throttling, ThrottlingException,
//     RequestTimeout, InternalError, ... — kRetryableErrorCodes in s3_retry.cc). Everything else —
//     403 AccessDenied/SignatureDoesNotMatch, 404, 400, RequestTimeTooSkewed (a wrong local clock does
//     not heal by waiting) — fails at once;
//   - how long to wait before retry n (0-based): full jitter, uniform in [0, min(cap, base * 2^n)],
//     base 100 ms and cap 20 s as in the SDKs;
//   - when to stop: after max_retries retries, or when the retry budget (wall time since the first
//     attempt) is spent; the last wait is cut to what is left of the budget.
// The SDKs' client-wide retry quota (a token bucket) is not modelled: each call has its own budget.
// Pure functions; BackoffMs draws from the generator it is given.

#include <cstdint>
#include <random>
#include <string>

#include "storage/http_client.h"

namespace dtrain::storage::detail {

constexpr int64_t kRetryBaseMs = 100;
constexpr int64_t kRetryCapMs = 20000;

// The <Code> of an S3 XML error body ("" when there is none), at most 64 bytes.
std::string S3ErrorCode(const HttpResponse& r);

// Why a failed answer is worth retrying, for the log ("HTTP 503 SlowDown", "HTTP 400 RequestTimeout",
// "curl error 7: Failed to connect to ..."), or "" when it must not be retried. A 2xx is never retried.
std::string RetryReason(const HttpResponse& r);

// min(cap_ms, base_ms * 2^retry): the ceiling of retry `retry`'s wait.
int64_t BackoffCeilingMs(int retry, int64_t base_ms = kRetryBaseMs, int64_t cap_ms = kRetryCapMs);

// A full-jitter wait for retry `retry`: uniform in [0, BackoffCeilingMs(retry, base_ms, cap_ms)].
int64_t BackoffMs(int retry, std::mt19937_64* rng, int64_t base_ms = kRetryBaseMs, int64_t cap_ms = kRetryCapMs);

}  // namespace dtrain::storage::detail
