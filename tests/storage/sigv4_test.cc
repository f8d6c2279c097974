// SHA-256 (FIPS 180-2 vectors), HMAC-SHA256 (RFC 4231 vectors) and SigV4 against the worked
// examples of AWS's "Signature Calculations for the Authorization Header" (S3 API reference).

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

TEST(Sha256Test, Fips180Vectors) {
  EXPECT_EQ(Hex(Sha256Of("abc")), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  EXPECT_EQ(Hex(Sha256Of("")), kEmptySha);
  EXPECT_EQ(Hex(Sha256Of("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq")),
            "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
  const std::string million(1000000, 'a');
  EXPECT_EQ(Hex(Sha256Of(million)), "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
}

TEST(Sha256Test, IncrementalEqualsOneShotAtEverySplit) {
  std::string msg(200, '\0');
  for (size_t i = 0; i < msg.size(); ++i) msg[i] = static_cast<char>(i * 31 + 7);
  const Sha256Digest want = Sha256Of(msg);
  for (size_t split = 0; split <= msg.size(); split += 13) {
    Sha256 h;
    h.Update(msg.data(), split);
    h.Update(msg.data() + split, msg.size() - split);
    EXPECT_EQ(Hex(h.Final()), Hex(want)) << "split " << split;
  }
}

TEST(HmacSha256Test, Rfc4231Vectors) {
  EXPECT_EQ(Hex(HmacSha256(std::string(20, '\x0b'), "Hi There")),
            "b0344c61d8db38535ca8afceaf0bf12b881dc200c9833da726e9376c2e32cff7");
  EXPECT_EQ(Hex(HmacSha256("Jefe", "what do ya want for nothing?")),
            "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843");
  EXPECT_EQ(Hex(HmacSha256(std::string(20, '\xaa'), std::string(50, '\xdd'))),
            "773ea91e36800e46854db8ebd09181a72959098b3ef8c122d9635514ced565fe");
  // Test case 6: a key longer than the block size is hashed first.
  EXPECT_EQ(Hex(HmacSha256(std::string(131, '\xaa'), "Test Using Larger Than Block-Size Key - Hash Key First")),
            "60e431591ee0b67f0d8a26aacbf5b77f8e0bc6213728c5140546040f0ee37f54");
  EXPECT_EQ(Hex(HmacSha256(std::string(131, '\xaa'),
                           "This is a test using a larger than block-size key and a larger than block-size data. "
                           "The key needs to be hashed before being used by the HMAC algorithm.")),
            "9b09ffa71b942fcb27635fbcd5b0e944bfdc63644f0713938a7f51535c3a35e2");
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
