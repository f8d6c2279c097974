// The bounded XML field extractor used on S3 answers: normal answers, entities, and hostile input.

#include "storage/s3_xml.h"

#include <gtest/gtest.h>

#include <random>
#include <string>

namespace dtrain::storage::detail {
namespace {

TEST(S3XmlTest, ListObjectsV2Answer) {
  const std::string xml =
      "<?xml version=\"1.0\" encoding=\"UTF-8\"?><ListBucketResult><Name>b</Name><IsTruncated>true</IsTruncated>"
      "<Contents><Key>p/a&amp;b</Key><Size>12</Size></Contents><Contents><Key>p/c</Key><Size>0</Size></Contents>"
      "<NextContinuationToken>1/tok==</NextContinuationToken></ListBucketResult>";
  const auto blocks = XmlBlocks(xml, "Contents", 100);
  ASSERT_EQ(blocks.size(), 2u);
  std::string v;
  ASSERT_TRUE(XmlFirst(blocks[0], "Key", &v));
  EXPECT_EQ(v, "p/a&b");
  ASSERT_TRUE(XmlFirst(blocks[1], "Size", &v));
  EXPECT_EQ(v, "0");
  ASSERT_TRUE(XmlFirst(xml, "NextContinuationToken", &v));
  EXPECT_EQ(v, "1/tok==");
  EXPECT_EQ(XmlBlocks(xml, "Contents", 1).size(), 1u);  // max_count bounds the result
  EXPECT_FALSE(XmlFirst(xml, "Missing", &v));
}

std::string Decoded(const std::string& s) {
  std::string out;
  EXPECT_TRUE(XmlDecode(s, &out)) << s;
  return out;
}

TEST(S3XmlTest, Entities) {
  EXPECT_EQ(Decoded("&lt;&gt;&amp;&quot;&apos;"), "<>&\"'");
  EXPECT_EQ(Decoded("&#65;&#x42;&#x439;"), "AB\xd0\xb9");
  EXPECT_EQ(Decoded("&#x1F600;"), "\xf0\x9f\x98\x80");
  EXPECT_EQ(Decoded("a&#1;b"),
            "a\x01"
            "b");  // decoded: rejecting control bytes in keys is s3_list's job
  EXPECT_EQ(Decoded("plain text"), "plain text");
}

// Regression: "&# 65;" decoded to "A" (strtoul skips leading whitespace and takes a sign). XML allows
// only digits there; a malformed reference, a bare '&' or an unknown entity makes the text invalid.
TEST(S3XmlTest, MalformedReferencesAreRejected) {
  std::string out;
  for (const std::string s : {"&# 65;",   "&#x 41;",    "&#+65;",  "&#-65;", "&#x+41;",
                              "&#\t65;",  "&#65 ;",     "&#0x41;", "&",      "a & b",
                              "&;",       "&bogus;",    "&#;",     "&#x;",   "&#0;",
                              "&#xD800;", "&#x110000;", "&#12a;",  "&amp",   "&#99999999999999999999;"}) {
    EXPECT_FALSE(XmlDecode(s, &out)) << "'" << s << "' decoded to '" << out << "'";
  }
  EXPECT_FALSE(XmlFirst("<Key>a&# 65;b</Key>", "Key", &out));  // the field is then absent for callers
}

TEST(S3XmlTest, TruncatedAndNestedInput) {
  std::string v;
  EXPECT_FALSE(XmlFirst("<Key>unterminated", "Key", &v));
  EXPECT_FALSE(XmlFirst("<Key", "Key", &v));
  EXPECT_TRUE(XmlBlocks("</Key><Key>", "Key", 10).empty());
  ASSERT_TRUE(XmlFirst("<Key><Key>x</Key></Key>", "Key", &v));  // first close wins: no nesting support
  EXPECT_EQ(v, "<Key>x");
  ASSERT_TRUE(XmlFirst("<Key></Key>", "Key", &v));
  EXPECT_EQ(v, "");
}

TEST(S3XmlTest, InputBeyondTheLimitIsIgnored) {
  std::string xml(kMaxXmlBytes, ' ');
  xml += "<Key>late</Key>";
  std::string v;
  EXPECT_FALSE(XmlFirst(xml, "Key", &v));
}

TEST(S3XmlTest, RandomBytesNeverCrash) {
  // A cheap fuzz pass: random mixes of the syntax characters, checked for termination and bounds.
  std::mt19937 rng(42);
  const std::string alphabet = "<>/&;#xKey0123456789abcdef Contents";
  for (int i = 0; i < 2000; ++i) {
    std::string s(rng() % 200, ' ');
    for (char& c : s) c = alphabet[rng() % alphabet.size()];
    const auto blocks = XmlBlocks(s, "Key", 50);
    EXPECT_LE(blocks.size(), 50u);
    for (const auto& b : blocks) {
      std::string d;
      if (XmlDecode(b, &d)) {
        EXPECT_LE(d.size(), b.size());
      }
    }
  }
}

}  // namespace
}  // namespace dtrain::storage::detail
