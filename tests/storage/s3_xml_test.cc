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

TEST(S3XmlTest, Entities) {
  EXPECT_EQ(XmlDecode("&lt;&gt;&amp;&quot;&apos;"), "<>&\"'");
  EXPECT_EQ(XmlDecode("&#65;&#x42;&#x439;"), "AB\xd0\xb9");
  EXPECT_EQ(XmlDecode("&#x1F600;"), "\xf0\x9f\x98\x80");
  // Malformed or out-of-range references stay verbatim.
  for (const std::string s : {"&", "&;", "&bogus;", "&#;", "&#x;", "&#0;", "&#xD800;", "&#x110000;", "&#12a;", "&amp",
                              "&#99999999999999999999;"}) {
    EXPECT_EQ(XmlDecode(s), s);
  }
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
    for (const auto& b : blocks) EXPECT_LE(XmlDecode(b).size(), 4 * b.size());
  }
}

}  // namespace
}  // namespace dtrain::storage::detail
