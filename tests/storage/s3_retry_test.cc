// S3Storage's retry and error policy against a scripted fake HTTP server on loopback (no signature
// checks here: tests/storage/s3_storage_test.cc covers signing against real RGW). Also checks what
// goes on the wire: the signed headers and the payload hash.

#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "storage/s3_storage.h"
#include "storage/sha256.h"
#include "tests/testing/fake_http_server.h"

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

std::unique_ptr<Storage> OpenAt(const FakeServer& server, int max_retries) {
  StorageOptions opts;
  opts.endpoint = server.endpoint();
  opts.access_key = "AKIDTEST";
  opts.secret_key = "never-in-a-message-0123456789";
  opts.max_retries = max_retries;
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

TEST(S3RetryTest, PersistentServerErrorGivesIoErrorAfterAllAttempts) {
  FakeServer server({Answer(500, "InternalError")});
  auto s = OpenAt(server, 2);
  std::string got;
  const Status st = s->Get("k", &got);
  EXPECT_EQ(st.code(), Status::Code::kIoError);
  EXPECT_NE(st.message().find("s3://bkt/pre/k: HTTP 500 InternalError: m (after 3 attempts)"), std::string::npos)
      << st.message();
  EXPECT_EQ(server.requests().size(), 3u);
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
