// The scheme table (storage/scheme.h): lookup by the URL's scheme, plain paths as file, the unknown-scheme error
// (URL redacted, known schemes named), traits, transfer plans, local directories, and Storage::Open through it.

#include "storage/scheme.h"

#include <gtest/gtest.h>
#include <stdlib.h>

#include <string>

#include "storage/file_storage.h"
#include "storage/s3_storage.h"

namespace dtrain::storage {
namespace {

const Scheme* Find(const std::string& url) {
  const Scheme* s = nullptr;
  const Status st = FindScheme(url, &s);
  EXPECT_TRUE(st.ok()) << url << ": " << st.ToString();
  return s;
}

TEST(SchemeTest, LooksUpByScheme) {
  EXPECT_EQ(Find("s3://bucket/prefix"), &kS3Scheme);
  EXPECT_EQ(Find("s3://bucket"), &kS3Scheme);
  EXPECT_EQ(Find("file:///abs/dir"), &kFileScheme);
  EXPECT_EQ(Find("/abs/dir"), &kFileScheme);  // a plain path is a file path
  EXPECT_EQ(Find("rel/dir"), &kFileScheme);
  EXPECT_EQ(Find("runs/s3:/x"), &kFileScheme);  // no "://": a path, whatever it holds
  EXPECT_STREQ(kS3Scheme.name, "s3");
  EXPECT_STREQ(kFileScheme.name, "file");
}

TEST(SchemeTest, Traits) {
  EXPECT_TRUE(kS3Scheme.traits.remote);
  EXPECT_TRUE(kS3Scheme.traits.needs_owner);
  EXPECT_EQ(kS3Scheme.local_dir, nullptr);
  EXPECT_FALSE(kFileScheme.traits.remote);
  EXPECT_TRUE(kFileScheme.traits.needs_owner);  // two jobs with one file:// checkpoint.url: the second is refused
  EXPECT_NE(kFileScheme.local_dir, nullptr);
}

TEST(SchemeTest, TransferPlans) {
  StorageOptions o;
  o.part_size = 24ull << 20;
  o.parallel_parts = 11;
  const TransferPlan s3 = kS3Scheme.transfer(o);  // ranged GETs of part_size, parallel_parts at once
  EXPECT_EQ(s3.chunk_bytes, 24ull << 20);
  EXPECT_EQ(s3.parallelism, 11);
  const TransferPlan file = kFileScheme.transfer(o);  // local reads ignore the object-store options
  EXPECT_EQ(file.chunk_bytes, 16ull << 20);
  EXPECT_EQ(file.parallelism, 4);
}

TEST(SchemeTest, UnknownSchemeNamesTheUrlAndTheKnownSchemes) {
  const Scheme* s = nullptr;
  Status st = FindScheme("gs://bucket/x", &s);
  EXPECT_EQ(st.code(), Status::Code::kInvalidArgument);
  EXPECT_EQ(st.message(),
            "storage URL 'gs://bucket/x': unknown scheme 'gs' (known: file:///abs/dir or a path, s3://bucket/prefix)");
  st = FindScheme("://x", &s);
  EXPECT_EQ(st.code(), Status::Code::kInvalidArgument);
  EXPECT_NE(st.message().find("no scheme before '://'"), std::string::npos) << st.message();
  EXPECT_EQ(FindScheme("S3://bucket", &s).code(), Status::Code::kInvalidArgument);  // schemes are lower case

  std::unique_ptr<Storage> store;  // Storage::Open goes through the table: the same error
  st = Storage::Open("gs://bucket/x", StorageOptions{}, &store);
  EXPECT_EQ(st.code(), Status::Code::kInvalidArgument);
  EXPECT_NE(st.message().find("unknown scheme 'gs'"), std::string::npos) << st.message();
  EXPECT_EQ(store, nullptr);
}

TEST(SchemeTest, UnknownSchemeErrorRedactsCredentials) {
  const Scheme* s = nullptr;
  const Status st = FindScheme("gs://AKIDEXAMPLE:wJalrXUtnFEMI@bucket/x?X-Amz-Signature=f00dfeed", &s);
  EXPECT_EQ(st.code(), Status::Code::kInvalidArgument);
  for (const char* secret : {"AKIDEXAMPLE", "wJalrXUtnFEMI", "f00dfeed"}) {
    EXPECT_EQ(st.message().find(secret), std::string::npos) << st.message();
  }
  EXPECT_NE(st.message().find("'gs://<redacted>@bucket/x?<redacted>'"), std::string::npos) << st.message();
}

TEST(SchemeTest, S3UrlWithCredentialsIsRefusedWithoutEchoingThem) {
  std::unique_ptr<Storage> store;
  const Status st = Storage::Open("s3://AKIDEXAMPLE:wJalrXUtnFEMI@bucket/x", StorageOptions{}, &store);
  EXPECT_EQ(st.code(), Status::Code::kInvalidArgument);
  EXPECT_EQ(st.message().find("wJalrXUtnFEMI"), std::string::npos) << st.message();
  EXPECT_EQ(st.message().find("AKIDEXAMPLE"), std::string::npos) << st.message();
  EXPECT_NE(st.message().find("AWS_SECRET_ACCESS_KEY"), std::string::npos) << st.message();
}

TEST(SchemeTest, RedactUrl) {
  EXPECT_EQ(RedactUrl("s3://bucket/prefix"), "s3://bucket/prefix");
  EXPECT_EQ(RedactUrl("s3://k:s@bucket/a@b"), "s3://<redacted>@bucket/a@b");  // '@' in a key is kept
  EXPECT_EQ(RedactUrl("s3://k:s@bucket"), "s3://<redacted>@bucket");
  EXPECT_EQ(RedactUrl("s3://bucket/p?sig=1"), "s3://bucket/p?<redacted>");
  EXPECT_EQ(RedactUrl("/data/a@b?c"), "/data/a@b?c");  // a local path is left alone
}

TEST(SchemeTest, LocalDir) {
  std::string dir;
  EXPECT_TRUE(LocalDir("file:///abs/dir", &dir));
  EXPECT_EQ(dir, "/abs/dir");
  EXPECT_TRUE(LocalDir("/abs/dir", &dir));
  EXPECT_EQ(dir, "/abs/dir");
  EXPECT_TRUE(LocalDir("rel/dir", &dir));
  EXPECT_EQ(dir, "rel/dir");
  dir = "unchanged";
  EXPECT_FALSE(LocalDir("s3://bucket/prefix", &dir));
  EXPECT_FALSE(LocalDir("gs://bucket/prefix", &dir));
  EXPECT_EQ(dir, "unchanged");
}

TEST(SchemeTest, KnownSchemes) { EXPECT_EQ(KnownSchemes(), "file:///abs/dir or a path, s3://bucket/prefix"); }

TEST(SchemeTest, FileSchemeOpensThroughTheTable) {
  char tmpl[] = "/tmp/dtrain_scheme_XXXXXX";
  ASSERT_NE(::mkdtemp(tmpl), nullptr);
  const std::string root = std::string(tmpl) + "/store";
  std::unique_ptr<Storage> store;
  ASSERT_TRUE(Storage::Open("file://" + root, StorageOptions{}, &store).ok());
  EXPECT_EQ(store->url(), "file://" + root);
  ASSERT_TRUE(store->Put("a/b", "xyz", 3).ok());
  std::unique_ptr<Storage> again;  // the same directory as a plain path
  ASSERT_TRUE(Storage::Open(root, StorageOptions{}, &again).ok());
  std::string got;
  ASSERT_TRUE(again->Get("a/b", &got).ok());
  EXPECT_EQ(got, "xyz");
  const Status rel = Storage::Open("file://rel/dir", StorageOptions{}, &store);
  EXPECT_EQ(rel.code(), Status::Code::kInvalidArgument);
  EXPECT_EQ(rel.message(), "storage URL 'file://rel/dir': file:// needs an absolute path (file:///abs/dir)");
  ASSERT_EQ(std::system(("rm -rf " + std::string(tmpl)).c_str()), 0);
}

}  // namespace
}  // namespace dtrain::storage
