// S3Storage's retry and error policy against a scripted fake HTTP server on loopback (no signature
// checks here: tests/storage/s3_storage_test.cc covers signing against real RGW). Also checks what
// goes on the wire: the signed headers and the payload hash.

#include "storage/s3_retry.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <random>
#include <string>
#include <vector>

#include "storage/s3_storage.h"
#include "storage/sha256.h"
#include "tests/testing/fake_http_server.h"
#include "tests/testing/log_capture.h"

namespace dtrain::storage {
namespace {

// Answers each connection with the next scripted response (the last one repeats).
class FakeServer : public testing::FakeHttpServer {
 public:
  explicit FakeServer(std::vector<std::string> responses)
      : FakeHttpServer(
            [r = std::move(responses)](size_t i, const std::string&) { return r[std::min(i, r.size() - 1)]; }) {}
};

std::string Answer(int status, const std::string& code = "", const std::string& extra_headers = "") {
  const std::string body = code.empty() ? "" : "<Error><Code>" + code + "</Code><Message>m</Message></Error>";
  return testing::HttpAnswer(status, body, extra_headers);
}

std::unique_ptr<Storage> OpenAt(const FakeServer& server, int max_retries, double retry_budget_s = 60) {
  StorageOptions opts;
  opts.endpoint = server.endpoint();
  opts.access_key = "AKIDTEST";
  opts.secret_key = "never-in-a-message-0123456789";
  opts.max_retries = max_retries;
  opts.retry_budget_s = retry_budget_s;
  std::unique_ptr<Storage> s;
  EXPECT_TRUE(Storage::Open("s3://bkt/pre", opts, &s).ok());
  return s;
}

TEST(S3RetryTest, SlowDownAnd503AreRetriedThenSucceed) {
  FakeServer server({Answer(503, "SlowDown"), Answer(500, "InternalError"), Answer(200)});
  auto s = OpenAt(server, 3);
  const std::string body = "hello";
  const Status st = s->Put("dir/k", body.data(), body.size());
  ASSERT_TRUE(st.ok()) << st.ToString();
  const auto reqs = server.requests();
  ASSERT_EQ(reqs.size(), 3u);
  for (const std::string& r : reqs) {
    EXPECT_EQ(r.rfind("PUT /bkt/pre/dir/k HTTP/1.1\r\n", 0), 0u) << r;
    EXPECT_NE(r.find("x-amz-content-sha256: " + Sha256Hex(body.data(), body.size())), std::string::npos) << r;
    EXPECT_NE(r.find("SignedHeaders=host;x-amz-content-sha256;x-amz-date,Signature="), std::string::npos) << r;
    EXPECT_NE(r.find("Credential=AKIDTEST/"), std::string::npos) << r;
    EXPECT_EQ(r.find("never-in-a-message"), std::string::npos);  // the secret is never sent
    EXPECT_EQ(r.substr(r.size() - 5), "hello");
  }
}

TEST(S3RetryTest, UnsignedPayloadSendsNoBodyHash) {
  FakeServer server({Answer(200)});
  StorageOptions opts;
  opts.endpoint = server.endpoint();
  opts.access_key = "AKIDTEST";
  opts.secret_key = "never-in-a-message-0123456789";
  opts.unsigned_payload = true;
  std::unique_ptr<Storage> s;
  ASSERT_TRUE(Storage::Open("s3://bkt/pre", opts, &s).ok());
  const std::string body = "hello";
  ASSERT_TRUE(s->Put("k", body.data(), body.size()).ok());
  const auto reqs = server.requests();
  ASSERT_EQ(reqs.size(), 1u);
  EXPECT_NE(reqs[0].find("x-amz-content-sha256: UNSIGNED-PAYLOAD\r\n"), std::string::npos) << reqs[0];
  EXPECT_EQ(reqs[0].find(Sha256Hex(body.data(), body.size())), std::string::npos) << reqs[0];
  EXPECT_NE(reqs[0].find("SignedHeaders=host;x-amz-content-sha256;x-amz-date,Signature="), std::string::npos);
  EXPECT_EQ(reqs[0].substr(reqs[0].size() - 5), "hello");
}

TEST(S3RetryTest, PersistentServerErrorGivesIoErrorAfterAllAttempts) {
  FakeServer server({Answer(500, "InternalError")});
  auto s = OpenAt(server, 2);
  std::string got;
  const Status st = s->Get("k", &got);
  EXPECT_EQ(st.code(), Status::Code::kIoError);
  EXPECT_NE(st.message().find("s3://bkt/pre/k: HTTP 500 InternalError: m (after 3 attempts in "), std::string::npos)
      << st.message();
  EXPECT_NE(st.message().find(" s; stopped by max_retries: max_retries 2, retry budget 60 s)"), std::string::npos)
      << st.message();
  EXPECT_EQ(server.requests().size(), 3u);
}

// The AWS SDK standard policy: a 503 SlowDown is throttling; twice, then the PUT goes through. Each
// retry is one warning naming the object, the reason and the attempt, and never the secret.
TEST(S3RetryTest, SlowDownTwiceThenSuccessLogsEachRetryOnce) {
  FakeServer server({Answer(503, "SlowDown"), Answer(503, "SlowDown"), Answer(200)});
  auto s = OpenAt(server, 5);
  testing::LogCapture logs;
  const Status st = s->Put("k", "v", 1);
  ASSERT_TRUE(st.ok()) << st.ToString();
  EXPECT_EQ(server.requests().size(), 3u);
  const std::string text = logs.text();
  EXPECT_NE(text.find("s3: PUT s3://bkt/pre/k: HTTP 503 SlowDown; retry 1 of at most 5 in "), std::string::npos)
      << text;
  EXPECT_NE(text.find("s3: PUT s3://bkt/pre/k: HTTP 503 SlowDown; retry 2 of at most 5 in "), std::string::npos)
      << text;
  EXPECT_EQ(text.find("retry 3 "), std::string::npos) << text;
  EXPECT_EQ(text.find("never-in-a-message"), std::string::npos) << text;
}

// Throttling and transient answers beyond 5xx: 408, 429, and error codes in the body of a 400.
TEST(S3RetryTest, ThrottlingCodesAnd408And429AreRetried) {
  FakeServer server({Answer(408), Answer(429), Answer(400, "RequestTimeout"), Answer(400, "ThrottlingException"),
                     Answer(400, "Throttling"), Answer(200)});
  auto s = OpenAt(server, 5);
  const Status st = s->Delete("k");
  ASSERT_TRUE(st.ok()) << st.ToString();
  EXPECT_EQ(server.requests().size(), 6u);
}

TEST(S3RetryTest, AccessDeniedAndClockSkewAreNotRetried) {
  {
    FakeServer server({Answer(403, "AccessDenied"), Answer(200)});
    const Status st = OpenAt(server, 5)->Put("k", "v", 1);
    EXPECT_EQ(st.code(), Status::Code::kInvalidArgument) << st.ToString();  // a config error: exit 2
    EXPECT_NE(st.message().find("s3://bkt/pre/k: access denied (HTTP 403 AccessDenied: m)"), std::string::npos)
        << st.message();
    EXPECT_EQ(server.requests().size(), 1u);
  }
  {
    FakeServer server({Answer(403, "RequestTimeTooSkewed"), Answer(200)});
    const Status st = OpenAt(server, 5)->Put("k", "v", 1);
    EXPECT_EQ(st.code(), Status::Code::kFailedPrecondition) << st.ToString();
    EXPECT_NE(st.message().find("RequestTimeTooSkewed): this machine's clock differs"), std::string::npos)
        << st.message();
    EXPECT_EQ(server.requests().size(), 1u);
  }
}

// The budget, not the retry count, ends a long outage: with 0.5 s of budget and 1000 retries allowed,
// the call gives up after about 0.5 s (the last wait is cut to what is left), having retried.
TEST(S3RetryTest, RetryBudgetEndsRetries) {
  FakeServer server({Answer(503, "SlowDown")});
  auto s = OpenAt(server, 1000, /*retry_budget_s=*/0.5);
  const auto t0 = std::chrono::steady_clock::now();
  const Status st = s->Put("k", "v", 1);
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_EQ(st.code(), Status::Code::kIoError) << st.ToString();
  EXPECT_NE(st.message().find("HTTP 503 SlowDown: m (after "), std::string::npos) << st.message();
  EXPECT_NE(st.message().find("stopped by retry budget: max_retries 1000, retry budget 0.5 s)"), std::string::npos)
      << st.message();
  EXPECT_GE(secs, 0.5);
  EXPECT_LT(secs, 2.0);
  // Ceilings 100, 200, 400 ms... fit at least two attempts in 0.5 s, and far fewer than 1001.
  EXPECT_GE(server.requests().size(), 2u);
  EXPECT_LT(server.requests().size(), 100u);
}

TEST(S3RetryTest, OpenRejectsARetryBudgetOutOfRange) {
  StorageOptions opts;
  opts.endpoint = "http://127.0.0.1:1";
  opts.access_key = "a";
  opts.secret_key = "b";
  opts.retry_budget_s = 1e300;  // would overflow the clock
  std::unique_ptr<Storage> s;
  EXPECT_EQ(Storage::Open("s3://b", opts, &s).code(), Status::Code::kInvalidArgument);
  opts.retry_budget_s = -1;
  const Status st = Storage::Open("s3://b", opts, &s);
  EXPECT_EQ(st.code(), Status::Code::kInvalidArgument);
  EXPECT_NE(st.message().find("retry_budget_s in [0, 86400]"), std::string::npos) << st.message();
}

// Full jitter: retry n waits uniformly in [0, min(20 s, 100 ms * 2^n)].
TEST(S3RetryPolicyTest, BackoffCeilingsDoubleFrom100MsUpTo20s) {
  const int64_t want[] = {100, 200, 400, 800, 1600, 3200, 6400, 12800, 20000, 20000};
  for (int n = 0; n < 10; ++n) EXPECT_EQ(detail::BackoffCeilingMs(n), want[n]) << n;
  EXPECT_EQ(detail::BackoffCeilingMs(1000), 20000);  // no overflow for large n
  EXPECT_EQ(detail::BackoffCeilingMs(3, /*base_ms=*/10, /*cap_ms=*/50), 50);
}

TEST(S3RetryPolicyTest, JitterStaysWithinBoundsAndSpreadsOverThem) {
  std::mt19937_64 rng(42);
  for (int n : {0, 3, 8, 30}) {
    const int64_t ceiling = detail::BackoffCeilingMs(n);
    int64_t lo = ceiling, hi = 0;
    double sum = 0;
    const int kSamples = 20000;
    for (int i = 0; i < kSamples; ++i) {
      const int64_t w = detail::BackoffMs(n, &rng);
      ASSERT_GE(w, 0);
      ASSERT_LE(w, ceiling);
      lo = std::min(lo, w);
      hi = std::max(hi, w);
      sum += static_cast<double>(w);
    }
    // Uniform on [0, c]: the extremes come within 1% of both ends, the mean within 2% of c/2.
    EXPECT_LE(lo, ceiling / 100) << n;
    EXPECT_GE(hi, ceiling - ceiling / 100) << n;
    EXPECT_NEAR(sum / kSamples, ceiling / 2.0, ceiling * 0.02) << n;
  }
}

TEST(S3RetryPolicyTest, RetryReasonNamesStatusCodeOrCurlError) {
  detail::HttpResponse r;
  r.status = 503;
  r.body = "<Error><Code>SlowDown</Code></Error>";
  EXPECT_EQ(detail::RetryReason(r), "HTTP 503 SlowDown");
  r.status = 501;
  r.body = "<Error><Code>NotImplemented</Code></Error>";
  EXPECT_EQ(detail::RetryReason(r), "");
  r.status = 404;
  r.body = "<Error><Code>NoSuchKey</Code></Error>";
  EXPECT_EQ(detail::RetryReason(r), "");
  r.status = 200;
  EXPECT_EQ(detail::RetryReason(r), "");
  r.status = 0;
  r.body.clear();
  r.curl_code = 7;  // CURLE_COULDNT_CONNECT
  r.curl_error = "Failed to connect to 127.0.0.1 port 1";
  EXPECT_EQ(detail::RetryReason(r), "curl error 7: Failed to connect to 127.0.0.1 port 1");
  r.curl_code = 6;  // CURLE_COULDNT_RESOLVE_HOST: a wrong endpoint, not an outage
  EXPECT_EQ(detail::RetryReason(r), "");
}

TEST(S3RetryTest, ClientErrorsAreNotRetried) {
  FakeServer server({Answer(400, "InvalidRequest")});
  auto s = OpenAt(server, 5);
  const Status st = s->Put("k", "v", 1);
  EXPECT_EQ(st.code(), Status::Code::kIoError);
  EXPECT_NE(st.message().find("HTTP 400 InvalidRequest"), std::string::npos) << st.message();
  EXPECT_EQ(server.requests().size(), 1u);
}

TEST(S3RetryTest, NotFoundAndIdempotentDelete) {
  FakeServer server({Answer(404, "NoSuchKey")});
  auto s = OpenAt(server, 5);
  std::string got;
  const Status st = s->Get("gone", &got);
  EXPECT_EQ(st.code(), Status::Code::kNotFound);
  EXPECT_NE(st.message().find("s3://bkt/pre/gone"), std::string::npos) << st.message();
  EXPECT_TRUE(s->Delete("gone").ok());
  ObjectInfo info;
  EXPECT_EQ(s->Head("gone", &info).code(), Status::Code::kNotFound);
  EXPECT_EQ(server.requests().size(), 3u);
}

TEST(S3RetryTest, SessionTokenIsSentAndSigned) {
  FakeServer server({Answer(200)});
  StorageOptions opts;
  opts.endpoint = server.endpoint();
  opts.access_key = "ASIATEST";
  opts.secret_key = "s";
  opts.session_token = "tok/en+1";
  std::unique_ptr<Storage> s;
  ASSERT_TRUE(Storage::Open("s3://bkt", opts, &s).ok());
  ASSERT_TRUE(s->Delete("k").ok());
  const auto reqs = server.requests();
  ASSERT_EQ(reqs.size(), 1u);
  EXPECT_EQ(reqs[0].rfind("DELETE /bkt/k HTTP/1.1\r\n", 0), 0u) << reqs[0];
  EXPECT_NE(reqs[0].find("x-amz-security-token: tok/en+1\r\n"), std::string::npos) << reqs[0];
  EXPECT_NE(reqs[0].find("SignedHeaders=host;x-amz-content-sha256;x-amz-date;x-amz-security-token,"), std::string::npos)
      << reqs[0];
}

std::string ListAnswer(const std::string& keys_xml, const std::string& tail = "") {
  const std::string body = "<ListBucketResult>" + keys_xml + tail + "</ListBucketResult>";
  return testing::HttpAnswer(200, body);
}

// Regression: List passed on any key the server returned below the store's prefix, "../" segments
// and control bytes included, and silently dropped keys outside it.
TEST(S3RetryTest, ListRejectsKeysThatCannotBeOursNamingThem) {
  FakeServer server(
      {ListAnswer("<Contents><Key>pre/step-1/manifest.pb</Key><Size>3</Size></Contents>"
                  "<Contents><Key>pre/step-1/../../../etc/passwd</Key><Size>4</Size></Contents>")});
  auto s = OpenAt(server, 0);
  std::vector<ObjectInfo> got;
  const Status st = s->List("step-", &got);
  EXPECT_EQ(st.code(), Status::Code::kIoError);
  EXPECT_NE(st.message().find("s3://bkt/pre (list 'step-'): the server's listing gives key "
                              "'pre/step-1/../../../etc/passwd', not a valid storage key: '..' segment"),
            std::string::npos)
      << st.message();
  ASSERT_EQ(server.requests().size(), 1u);
  EXPECT_EQ(server.requests()[0].rfind("GET /bkt?list-type=2&max-keys=1000&prefix=pre%2Fstep- HTTP/1.1\r\n", 0), 0u)
      << server.requests()[0];
}

TEST(S3RetryTest, ListRejectsAKeyOutsideThePrefixAndAKeyListedTwice) {
  {
    FakeServer server({ListAnswer("<Contents><Key>elsewhere/step-1</Key><Size>3</Size></Contents>")});
    std::vector<ObjectInfo> got;
    const Status st = OpenAt(server, 0)->List("step-", &got);
    EXPECT_EQ(st.code(), Status::Code::kIoError);
    EXPECT_NE(st.message().find("key 'elsewhere/step-1', outside the requested prefix 'pre/step-'"), std::string::npos)
        << st.message();
  }
  {
    // Two pages that both hold step-1: a server that repeats itself across continuation tokens.
    const std::string one = "<Contents><Key>pre/step-1</Key><Size>3</Size></Contents>";
    FakeServer server(
        {ListAnswer(one, "<IsTruncated>true</IsTruncated><NextContinuationToken>t</NextContinuationToken>"),
         ListAnswer(one)});
    std::vector<ObjectInfo> got;
    const Status st = OpenAt(server, 0)->List("", &got);
    EXPECT_EQ(st.code(), Status::Code::kIoError);
    EXPECT_NE(st.message().find("gives key 'step-1' twice"), std::string::npos) << st.message();
  }
  {
    // The good case through the same path: a directory marker left out, keys relative and sorted.
    FakeServer server(
        {ListAnswer("<Contents><Key>pre/b</Key><Size>2</Size></Contents><Contents><Key>pre/</Key>"
                    "<Size>0</Size></Contents><Contents><Key>pre/a</Key><Size>1</Size></Contents>")});
    std::vector<ObjectInfo> got;
    const Status st = OpenAt(server, 0)->List("", &got);
    ASSERT_TRUE(st.ok()) << st.ToString();
    ASSERT_EQ(got.size(), 2u);
    EXPECT_EQ(got[0].key, "a");
    EXPECT_EQ(got[0].size, 1u);
    EXPECT_EQ(got[1].key, "b");
  }
}

TEST(S3RetryTest, OpenRejectsBadSettings) {
  StorageOptions opts;
  opts.endpoint = "http://127.0.0.1:1";
  opts.access_key = "a";
  opts.secret_key = "b";
  std::unique_ptr<Storage> s;
  EXPECT_EQ(Storage::Open("s3://Bad_Bucket!", opts, &s).code(), Status::Code::kInvalidArgument);
  EXPECT_EQ(Storage::Open("s3://b/../x", opts, &s).code(), Status::Code::kInvalidArgument);
  opts.part_size = 1 << 20;
  EXPECT_EQ(Storage::Open("s3://b", opts, &s).code(), Status::Code::kInvalidArgument);
  opts.part_size = 5 << 20;
  opts.endpoint = "ftp://host";
  EXPECT_EQ(Storage::Open("s3://b", opts, &s).code(), Status::Code::kInvalidArgument);
}

}  // namespace
}  // namespace dtrain::storage
