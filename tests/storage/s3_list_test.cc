// The checks on each page of an S3 listing (storage/s3_list.h): a hostile or broken server cannot hand
// the checkpoint code a key outside the store, a path-like key, control bytes, or an absurd size.

#include "storage/s3_list.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace dtrain::storage::detail {
namespace {

const char kWhat[] = "s3://bkt/pre (list 'step-')";

std::string Page(const std::vector<std::pair<std::string, std::string>>& contents, const std::string& tail = "") {
  std::string xml = "<?xml version=\"1.0\"?><ListBucketResult><Name>bkt</Name>";
  for (const auto& [key, size] : contents)
    xml += "<Contents><Key>" + key + "</Key><Size>" + size + "</Size></Contents>";
  return xml + tail + "</ListBucketResult>";
}

Status Parse(const std::string& xml, ListPage* page) {
  return ParseListPage(xml, kWhat, "pre/step-", "pre/", 1000, page);
}

// The error for `xml`, which must be an IoError naming the listing.
std::string ErrorFor(const std::string& xml) {
  ListPage page;
  const Status st = Parse(xml, &page);
  EXPECT_EQ(st.code(), Status::Code::kIoError) << st.ToString();
  EXPECT_NE(st.message().find(kWhat), std::string::npos) << st.message();
  return st.message();
}

TEST(S3ListTest, GoodPageGivesRelativeKeysSizesAndTheToken) {
  ListPage page;
  const Status st =
      Parse(Page({{"pre/step-00000010/manifest.pb", "120"}, {"pre/step-00000010/a&amp;b.bin", "9007199254740993"}},
                 "<IsTruncated>true</IsTruncated><NextContinuationToken>1/t&amp;k==</NextContinuationToken>"),
            &page);
  ASSERT_TRUE(st.ok()) << st.ToString();
  ASSERT_EQ(page.objects.size(), 2u);
  EXPECT_EQ(page.objects[0].key, "step-00000010/manifest.pb");
  EXPECT_EQ(page.objects[0].size, 120u);
  EXPECT_EQ(page.objects[1].key, "step-00000010/a&b.bin");
  EXPECT_EQ(page.objects[1].size, 9007199254740993u);  // exact beyond 2^53: parsed as an integer
  EXPECT_TRUE(page.truncated);
  EXPECT_EQ(page.next_token, "1/t&k==");
  ASSERT_TRUE(Parse(Page({}, "<IsTruncated>false</IsTruncated>"), &page).ok());
  EXPECT_TRUE(page.objects.empty());
  EXPECT_FALSE(page.truncated);
}

TEST(S3ListTest, DirectoryMarkersAreLeftOut) {
  ListPage page;
  ASSERT_TRUE(ParseListPage(Page({{"pre/", "0"}, {"pre/step-1/", "0"}, {"pre/step-1/x", "3"}}), kWhat, "pre/", "pre/",
                            1000, &page)
                  .ok());
  ASSERT_EQ(page.objects.size(), 1u);
  EXPECT_EQ(page.objects[0].key, "step-1/x");
  // A "marker" with data is not a marker: its key is invalid (empty last segment).
  EXPECT_NE(ErrorFor(Page({{"pre/step-1/", "5"}})).find("key 'pre/step-1/', not a valid storage key: empty segment"),
            std::string::npos);
}

TEST(S3ListTest, KeyOutsideTheRequestedPrefixIsAnErrorNamingIt) {
  for (const std::string key : {"other/step-1", "pre/ckpt-1", "pre", "step-1", "PRE/step-1"}) {
    const std::string msg = ErrorFor(Page({{"pre/step-1", "1"}, {key, "1"}}));
    EXPECT_NE(msg.find("key '" + key + "', outside the requested prefix 'pre/step-'"), std::string::npos) << msg;
  }
}

TEST(S3ListTest, PathLikeAndControlByteKeysAreErrorsNamingThem) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"pre/step-1/../../etc/passwd", "key 'pre/step-1/../../etc/passwd', not a valid storage key: '..' segment"},
      {"pre/step-1/./x", "'.' segment"},
      {"pre/step-1//x", "empty segment"},
      {"pre/step-1/a&#x1;b", "key 'pre/step-1/a\\x01b', not a valid storage key: control character"},
      {"pre/step-1/a&#10;b", "key 'pre/step-1/a\\x0ab'"},
      {std::string("pre/step-1/a\0b", 14), "key 'pre/step-1/a\\x00b'"},
      {"pre/step-1/\x7f", "key 'pre/step-1/\\x7f'"},
  };
  for (const auto& [key, want] : cases) {
    const std::string msg = ErrorFor(Page({{key, "1"}}));
    EXPECT_NE(msg.find(want), std::string::npos) << msg;
    EXPECT_EQ(msg.find('\0'), std::string::npos);
  }
}

TEST(S3ListTest, AbsurdlyLongKeyIsAnError) {
  const std::string ok = "pre/step-" + std::string(kMaxS3KeyBytes - 9, 'k');
  ListPage page;
  ASSERT_TRUE(Parse(Page({{ok, "1"}}), &page).ok());
  const std::string msg = ErrorFor(Page({{ok + "k", "1"}}));
  EXPECT_NE(msg.find("has a key of 1025 bytes (S3 allows 1024): key 'pre/step-kkk"), std::string::npos) << msg;
  EXPECT_NE(msg.find("... (1025 bytes)"), std::string::npos) << msg;  // the message itself stays short
  EXPECT_LT(msg.size(), 400u);
}

TEST(S3ListTest, MissingOrMalformedFieldsAreErrors) {
  EXPECT_NE(ErrorFor(Page({}, "<Contents><Size>1</Size></Contents>")).find("an entry without a valid <Key>"),
            std::string::npos);
  EXPECT_NE(ErrorFor(Page({{"pre/step-&# 65;", "1"}})).find("an entry without a valid <Key>"), std::string::npos);
  for (const std::string size : {"", "-1", "+1", " 1", "1e3", "0x10", "9223372036854775808", "99999999999999999999"}) {
    const std::string msg = ErrorFor(Page({{"pre/step-1", size}}));
    EXPECT_NE(msg.find("key 'pre/step-1' without a valid <Size> (got '" + size + "')"), std::string::npos) << msg;
  }
  EXPECT_NE(ErrorFor(Page({}, "<Contents><Key>pre/step-1</Key></Contents>")).find("without a valid <Size>"),
            std::string::npos);
}

}  // namespace
}  // namespace dtrain::storage::detail
