// SigV4 against the worked examples of AWS's "Signature Calculations for the Authorization Header"
// (S3 API reference). SHA-256 and HMAC themselves: sha256_test.cc.

#include "storage/sigv4.h"

#include <gtest/gtest.h>

#include <string>

#include "storage/sha256.h"

namespace dtrain::storage {
namespace {

const char kEmptySha[] = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855";
const char kDate[] = "20130524T000000Z";
const char kHost[] = "examplebucket.s3.amazonaws.com";

SigV4Key ExampleKey() {
  return {"AKIAIOSFODNN7EXAMPLE", "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY", "us-east-1", "s3"};
}

TEST(SigV4Test, UriEncodeAndCanonicalQuery) {
  EXPECT_EQ(UriEncode("a b+c/d~e_f.g-h", false), "a%20b%2Bc/d~e_f.g-h");
  EXPECT_EQ(UriEncode("a/b=&?", true), "a%2Fb%3D%26%3F");
  EXPECT_EQ(UriEncode("\xc3\xa9", true), "%C3%A9");
  EXPECT_EQ(CanonicalQuery({{"uploads", ""}}), "uploads=");
  EXPECT_EQ(CanonicalQuery({{"uploadId", "a/b+c=="}, {"partNumber", "2"}}), "partNumber=2&uploadId=a%2Fb%2Bc%3D%3D");
  EXPECT_EQ(CanonicalQuery({{"prefix", "J"}, {"max-keys", "2"}, {"list-type", "2"}}),
            "list-type=2&max-keys=2&prefix=J");
}

// Example "GET Object": range header signed, empty payload.
TEST(SigV4Test, AwsExampleGetObject) {
  SigV4Request req{
      "GET",
      "/test.txt",
      {},
      {{"Host", kHost}, {"Range", "bytes=0-9"}, {"x-amz-content-sha256", kEmptySha}, {"x-amz-date", kDate}},
      kEmptySha};
  std::string signed_headers;
  const std::string canonical = CanonicalRequest(req, &signed_headers);
  EXPECT_EQ(canonical, std::string("GET\n/test.txt\n\nhost:examplebucket.s3.amazonaws.com\nrange:bytes=0-9\n") +
                           "x-amz-content-sha256:" + kEmptySha + "\nx-amz-date:20130524T000000Z\n\n" +
                           "host;range;x-amz-content-sha256;x-amz-date\n" + kEmptySha);
  EXPECT_EQ(StringToSign(kDate, "20130524/us-east-1/s3/aws4_request", canonical),
            "AWS4-HMAC-SHA256\n20130524T000000Z\n20130524/us-east-1/s3/aws4_request\n"
            "7344ae5b7ee6c3e7e6b0fe0640412a37625d1fbfff95c48bbb2dc43964946972");
  EXPECT_EQ(AuthorizationHeader(req, ExampleKey(), kDate),
            "AWS4-HMAC-SHA256 Credential=AKIAIOSFODNN7EXAMPLE/20130524/us-east-1/s3/aws4_request,"
            "SignedHeaders=host;range;x-amz-content-sha256;x-amz-date,"
            "Signature=f0e8bdb87c964420e857bd35b5d6ed310bd44f0170aba48dd91039c6036bdb41");
}

// Example "PUT Object": '$' in the key, a body hash, extra signed headers.
TEST(SigV4Test, AwsExamplePutObject) {
  const std::string body = "Welcome to Amazon S3.";
  const std::string hash = Sha256Hex(body.data(), body.size());
  EXPECT_EQ(hash, "44ce7dd67c959e0d3524ffac1771dfbba87d2b6b4b4e99e42034a8b803f8b072");
  SigV4Request req{"PUT",
                   "/test$file.text",
                   {},
                   {{"Host", kHost},
                    {"Date", "Fri, 24 May 2013 00:00:00 GMT"},
                    {"x-amz-content-sha256", hash},
                    {"x-amz-date", kDate},
                    {"x-amz-storage-class", "REDUCED_REDUNDANCY"}},
                   hash};
  std::string signed_headers;
  const std::string canonical = CanonicalRequest(req, &signed_headers);
  EXPECT_EQ(canonical.substr(0, canonical.find('\n', 4)), "PUT\n/test%24file.text");
  EXPECT_EQ(signed_headers, "date;host;x-amz-content-sha256;x-amz-date;x-amz-storage-class");
  const std::string sts = StringToSign(kDate, "20130524/us-east-1/s3/aws4_request", canonical);
  EXPECT_EQ(sts.substr(sts.rfind('\n') + 1), "9e0e90d9c76de8fa5b200d8c849cd5b8dc7a3be3951ddb7f6a76b4158342019d");
  EXPECT_EQ(Signature(req, ExampleKey(), kDate), "98ad721746da40c64f1a55b78f14c238d841ea1380cd77a1b5971af0ece108bd");
}

// Example "GET Bucket Lifecycle": a valueless query key is signed as "lifecycle=".
TEST(SigV4Test, AwsExampleGetBucketLifecycle) {
  SigV4Request req{"GET",
                   "/",
                   {{"lifecycle", ""}},
                   {{"host", kHost}, {"x-amz-content-sha256", kEmptySha}, {"x-amz-date", kDate}},
                   kEmptySha};
  EXPECT_EQ(Signature(req, ExampleKey(), kDate), "fea454ca298b7da1c68078a5d1bdbfbbe0d65c699e0f91ac7a200a0136783543");
}

// Example "Get Bucket (List Objects)": query parameters given out of order are signed sorted.
TEST(SigV4Test, AwsExampleListObjects) {
  SigV4Request req{"GET",
                   "/",
                   {{"prefix", "J"}, {"max-keys", "2"}},
                   {{"host", kHost}, {"x-amz-content-sha256", kEmptySha}, {"x-amz-date", kDate}},
                   kEmptySha};
  EXPECT_EQ(Signature(req, ExampleKey(), kDate), "34b48302e7b5fa45bde8084f4b7868a86f0a534bc59db6670ed5711ef69dc6f7");
}

TEST(SigV4Test, AmzDateFormat) {
  const std::string d = AmzDateNow();
  ASSERT_EQ(d.size(), 16u);
  EXPECT_EQ(d[8], 'T');
  EXPECT_EQ(d[15], 'Z');
  EXPECT_GE(d.substr(0, 4), "2024");
}

}  // namespace
}  // namespace dtrain::storage
