// S3Storage against a real S3 server on loopback: Ceph RGW started once for this binary by
// scripts/s3_test_server.sh (skipped, with the reason, when the ceph packages are not installed).
// RGW verifies SigV4, so these tests also prove the signing end to end.

#include "storage/s3_storage.h"

#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "tests/testing/log_capture.h"
#include "tests/testing/s3_server.h"
#include "tests/testing/subprocess.h"

namespace dtrain::storage {
namespace {

using testing::CreateS3TestBucket;
using testing::LogCapture;
using testing::S3Server;
using testing::S3TestOptions;
using testing::S3TestPattern;

const ::testing::Environment* const g_env =
    ::testing::AddGlobalTestEnvironment(new testing::S3ServerEnvironment);  // RGW, once for this binary

// ---- helpers --------------------------------------------------------------------------------

class S3StorageTest : public ::testing::Test {
 protected:
  void SetUp() override {
    DT_REQUIRE_S3_SERVER();
    opts_ = S3TestOptions(/*max_retries=*/2);
    ASSERT_TRUE(CreateS3TestBucket("dtrain-test").ok());
    const std::string name = ::testing::UnitTest::GetInstance()->current_test_info()->name();
    ASSERT_TRUE(Open("s3://dtrain-test/" + name, &store_).ok());
  }

  Status Open(const std::string& url, std::unique_ptr<Storage>* out) { return Storage::Open(url, opts_, out); }
  S3Storage* s3() { return static_cast<S3Storage*>(store_.get()); }
  Status Put(const std::string& key, const std::string& v) { return store_->Put(key, v.data(), v.size()); }

  StorageOptions opts_;
  std::unique_ptr<Storage> store_;
};

TEST_F(S3StorageTest, PutGetRangeHeadDelete) {
  const std::string v = S3TestPattern(100000, 1);
  ASSERT_TRUE(Put("a/b.bin", v).ok());
  std::string got;
  ASSERT_TRUE(store_->Get("a/b.bin", &got).ok());
  EXPECT_EQ(got, v);
  ASSERT_TRUE(store_->GetRange("a/b.bin", 1000, 10, &got).ok());
  EXPECT_EQ(got, v.substr(1000, 10));
  ASSERT_TRUE(store_->GetRange("a/b.bin", 99995, 100, &got).ok());  // clamped at the end
  EXPECT_EQ(got, v.substr(99995));
  const Status past = store_->GetRange("a/b.bin", 200000, 5, &got);  // past the end: nothing
  ASSERT_TRUE(past.ok()) << past.ToString();
  EXPECT_EQ(got, "");
  ObjectInfo info;
  ASSERT_TRUE(store_->Head("a/b.bin", &info).ok());
  EXPECT_EQ(info.key, "a/b.bin");
  EXPECT_EQ(info.size, 100000u);
  ASSERT_TRUE(Put("empty", "").ok());
  ASSERT_TRUE(store_->Get("empty", &got).ok());
  EXPECT_EQ(got, "");
  ASSERT_TRUE(store_->Delete("a/b.bin").ok());
  ASSERT_TRUE(store_->Delete("a/b.bin").ok());  // idempotent
  const Status missing = store_->Get("a/b.bin", &got);
  EXPECT_EQ(missing.code(), Status::Code::kNotFound) << missing.ToString();
  EXPECT_NE(missing.message().find("s3://dtrain-test/PutGetRangeHeadDelete/a/b.bin"), std::string::npos)
      << missing.message();
  EXPECT_EQ(store_->Head("a/b.bin", &info).code(), Status::Code::kNotFound);
  EXPECT_EQ(Put("../x", "v").code(), Status::Code::kInvalidArgument);
}

TEST_F(S3StorageTest, KeysWithCharactersThatNeedEncoding) {
  for (const std::string k : {"dir/a b+c=d&e.bin", "ключ/x%41y", "t~i_l-d.e/(1)!*'$"}) {
    ASSERT_TRUE(Put(k, k).ok()) << k;
    std::string got;
    ASSERT_TRUE(store_->Get(k, &got).ok()) << k;
    EXPECT_EQ(got, k);
  }
  std::vector<ObjectInfo> list;
  ASSERT_TRUE(store_->List("", &list).ok());
  ASSERT_EQ(list.size(), 3u);
  EXPECT_EQ(list[0].key, "dir/a b+c=d&e.bin");  // XML entities decoded
}

TEST_F(S3StorageTest, ListPaginatesAndStaysInsideThePrefix) {
  std::unique_ptr<Storage> sibling;
  ASSERT_TRUE(Open("s3://dtrain-test/ListPaginatesAndStaysInsideThePrefix2", &sibling).ok());
  ASSERT_TRUE(sibling->Put("x", "1", 1).ok());  // shares the string prefix, not the directory
  for (int i = 6; i >= 0; --i) ASSERT_TRUE(Put("ckpt/k" + std::to_string(i), std::string(i, 'x')).ok());
  ASSERT_TRUE(Put("other", "o").ok());
  s3()->set_list_page_size(2);  // 8 objects -> 4 pages with continuation tokens
  std::vector<ObjectInfo> all;
  ASSERT_TRUE(store_->List("", &all).ok());
  ASSERT_EQ(all.size(), 8u);
  for (int i = 0; i < 7; ++i) {
    EXPECT_EQ(all[i].key, "ckpt/k" + std::to_string(i));
    EXPECT_EQ(all[i].size, static_cast<uint64_t>(i));
  }
  EXPECT_EQ(all[7].key, "other");
  std::vector<ObjectInfo> some;
  ASSERT_TRUE(store_->List("ckpt/k", &some).ok());
  EXPECT_EQ(some.size(), 7u);
  ASSERT_TRUE(store_->List("none/", &some).ok());
  EXPECT_TRUE(some.empty());
}

TEST_F(S3StorageTest, MultipartUploadIsByteExact) {
  opts_.multipart_threshold = 5u << 20;
  opts_.part_size = 5u << 20;
  opts_.parallel_parts = 3;
  ASSERT_TRUE(Open("s3://dtrain-test/MultipartUploadIsByteExact", &store_).ok());
  const std::string v = S3TestPattern((12u << 20) + 12345, 7);  // parts of 5, 5 and 2 MiB + 12345 B
  const auto t0 = std::chrono::steady_clock::now();
  ASSERT_TRUE(Put("big.bin", v).ok());
  std::printf("multipart PUT of %zu bytes: %.2f s\n", v.size(),
              std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  ObjectInfo info;
  ASSERT_TRUE(store_->Head("big.bin", &info).ok());
  EXPECT_EQ(info.size, v.size());
  std::string got;
  ASSERT_TRUE(store_->Get("big.bin", &got).ok());
  ASSERT_EQ(got.size(), v.size());
  EXPECT_TRUE(got == v);
  ASSERT_TRUE(store_->GetRange("big.bin", (5u << 20) - 100, 200, &got).ok());  // across a part boundary
  EXPECT_EQ(got, v.substr((5u << 20) - 100, 200));
  std::vector<std::string> uploads;
  ASSERT_TRUE(s3()->ListMultipartUploads("", &uploads).ok());
  EXPECT_TRUE(uploads.empty());
}

TEST_F(S3StorageTest, UnsignedPayloadMultipartIsAcceptedAndByteExact) {
  opts_.multipart_threshold = opts_.part_size = 5u << 20;
  opts_.unsigned_payload = true;
  ASSERT_TRUE(Open("s3://dtrain-test/UnsignedPayload", &store_).ok());
  const std::string v = S3TestPattern((11u << 20) + 5, 17);
  const Status st = Put("big.bin", v);
  ASSERT_TRUE(st.ok()) << st.ToString();
  std::string got;
  ASSERT_TRUE(store_->Get("big.bin", &got).ok());
  EXPECT_TRUE(got == v);
}

TEST_F(S3StorageTest, FailedPartAbortsTheUpload) {
  opts_.multipart_threshold = 5u << 20;
  opts_.part_size = 5u << 20;
  ASSERT_TRUE(Open("s3://dtrain-test/FailedPartAbortsTheUpload", &store_).ok());
  s3()->set_failing_part_for_testing(2);
  const Status st = Put("big.bin", S3TestPattern(11u << 20, 3));
  EXPECT_EQ(st.code(), Status::Code::kIoError) << st.ToString();
  EXPECT_NE(st.message().find("part 2/3"), std::string::npos) << st.message();
  std::vector<std::string> uploads;
  ASSERT_TRUE(s3()->ListMultipartUploads("", &uploads).ok());
  EXPECT_TRUE(uploads.empty()) << uploads.size() << " uploads left";
  std::string got;
  EXPECT_EQ(store_->Get("big.bin", &got).code(), Status::Code::kNotFound);
}

TEST_F(S3StorageTest, PartCutMidUploadIsRetriedAndTheObjectIsExact) {
  opts_.multipart_threshold = opts_.part_size = 5u << 20;
  opts_.parallel_parts = 3;
  ASSERT_TRUE(Open("s3://dtrain-test/PartCutMidUploadIsRetried", &store_).ok());
  s3()->set_part_cut_for_testing(2, 2);  // part 2's first two attempts lose their connection halfway through
  LogCapture logs;
  const std::string v = S3TestPattern((14u << 20) + 999, 11);
  const Status st = Put("big.bin", v);
  ASSERT_TRUE(st.ok()) << st.ToString();
  const std::string text = logs.text();
  size_t retries = 0;
  for (size_t at = text.find("(part 2/3): curl error 55: connection cut after"); at != std::string::npos;
       at = text.find("(part 2/3): curl error 55: connection cut after", at + 1)) {
    ++retries;
  }
  EXPECT_EQ(retries, 2u) << text;
  EXPECT_EQ(text.find("(part 1/3)"), std::string::npos) << text;
  std::string got;
  ASSERT_TRUE(store_->Get("big.bin", &got).ok());
  EXPECT_TRUE(got == v);
  std::vector<std::string> uploads;
  ASSERT_TRUE(s3()->ListMultipartUploads("", &uploads).ok());
  EXPECT_TRUE(uploads.empty());
}

TEST_F(S3StorageTest, PartCutMoreOftenThanRetriesAbortsTheUpload) {
  opts_.multipart_threshold = opts_.part_size = 5u << 20;
  opts_.max_retries = 1;
  ASSERT_TRUE(Open("s3://dtrain-test/PartCutAborts", &store_).ok());
  s3()->set_part_cut_for_testing(3, 5);
  const Status st = Put("big.bin", S3TestPattern(12u << 20, 5));
  EXPECT_EQ(st.code(), Status::Code::kIoError) << st.ToString();
  EXPECT_NE(st.message().find("part 3/3"), std::string::npos) << st.message();
  EXPECT_NE(st.message().find("after 2 attempts"), std::string::npos) << st.message();
  std::vector<std::string> uploads;
  ASSERT_TRUE(s3()->ListMultipartUploads("", &uploads).ok());
  EXPECT_TRUE(uploads.empty()) << uploads.size() << " uploads left";
  std::string got;
  EXPECT_EQ(store_->Get("big.bin", &got).code(), Status::Code::kNotFound);
}

TEST_F(S3StorageTest, ParallelRangedGetIntoEqualsTheBytes) {
  opts_.part_size = 5u << 20;  // ranges of 5 MiB, 4 at a time
  opts_.parallel_parts = 4;
  ASSERT_TRUE(Open("s3://dtrain-test/ParallelRangedGetInto", &store_).ok());
  const std::string v = S3TestPattern((23u << 20) + 4321, 13);  // 5 ranges, the last one short
  ASSERT_TRUE(Put("obj.bin", v).ok());
  std::string buf(v.size(), 'x');
  uint64_t size = 0;
  const Status st = store_->GetInto("obj.bin", buf.data(), buf.size(), &size);
  ASSERT_TRUE(st.ok()) << st.ToString();
  EXPECT_EQ(size, v.size());
  EXPECT_TRUE(buf == v);
  // RGW's access log: five GETs of the object (one per range), not one of the whole. (RGW writes the log from
  // its own thread: wait up to 5 s for the lines to arrive.)
  const std::string get = "\"GET /dtrain-test/ParallelRangedGetInto/obj.bin HTTP";
  size_t gets = 0;
  for (int wait = 0; wait < 50 && gets < 5; ++wait) {
    if (wait > 0) std::this_thread::sleep_for(std::chrono::milliseconds(100));
    const std::string log = testing::ReadFile(S3Server().dir + "/log/client.rgw.local.log");
    gets = 0;
    for (size_t at = log.find(get); at != std::string::npos; at = log.find(get, at + 1)) ++gets;
  }
  EXPECT_EQ(gets, 5u);
  // A buffer shorter or longer than the object: its bytes, and the object's real size for the caller to compare.
  std::string small((10u << 20) + 1, 'x');
  ASSERT_TRUE(store_->GetInto("obj.bin", small.data(), small.size(), &size).ok());
  EXPECT_EQ(size, v.size());
  EXPECT_TRUE(small == v.substr(0, small.size()));
  std::string big(v.size() + (6u << 20), 'x');  // its last range lies wholly past the object's end
  const Status past = store_->GetInto("obj.bin", big.data(), big.size(), &size);
  ASSERT_TRUE(past.ok()) << past.ToString();
  EXPECT_EQ(size, v.size());
  EXPECT_TRUE(big.substr(0, v.size()) == v);
  EXPECT_EQ(big.find_first_not_of('x', v.size()), std::string::npos);
  EXPECT_EQ(store_->GetInto("none.bin", big.data(), big.size(), &size).code(), Status::Code::kNotFound);
  ASSERT_TRUE(Put("empty", "").ok());
  ASSERT_TRUE(store_->GetInto("empty", buf.data(), 0, &size).ok());
  EXPECT_EQ(size, 0u);
}

// GetRangeInto (the checkpoint restore's chunks): one ranged GET straight into the buffer, the object's size at
// every call, short at the end, empty past it, NotFound for a missing key.
TEST_F(S3StorageTest, GetRangeIntoReadsOneRangeAndReportsTheObjectSize) {
  ASSERT_TRUE(Open("s3://dtrain-test/GetRangeInto", &store_).ok());
  const std::string v = S3TestPattern(100000, 17);
  ASSERT_TRUE(Put("obj.bin", v).ok());
  std::string buf(40000, 'x');
  uint64_t got = 0, size = 0;
  for (uint64_t offset : {uint64_t{0}, uint64_t{12345}, uint64_t{70000}, uint64_t{99999}}) {
    const Status st = store_->GetRangeInto("obj.bin", offset, buf.data(), buf.size(), &got, &size);
    ASSERT_TRUE(st.ok()) << st.ToString();
    const uint64_t want = std::min<uint64_t>(buf.size(), v.size() - offset);
    EXPECT_EQ(got, want) << offset;
    EXPECT_EQ(size, v.size()) << offset;
    EXPECT_TRUE(buf.compare(0, want, v, offset, want) == 0) << offset;
  }
  const Status past = store_->GetRangeInto("obj.bin", v.size() + 10, buf.data(), 100, &got, &size);
  ASSERT_TRUE(past.ok()) << past.ToString();
  EXPECT_EQ(got, 0u);
  EXPECT_EQ(size, v.size());
  EXPECT_EQ(store_->GetRangeInto("none.bin", 0, buf.data(), 100, &got, &size).code(), Status::Code::kNotFound);
}

TEST_F(S3StorageTest, WrongSecretIsAClearAuthErrorWithoutTheSecret) {
  const std::string planted = "PLANTEDsecretZZ9" + S3Server().secret.substr(0, 8);
  opts_.secret_key = planted;
  LogCapture logs;
  ASSERT_TRUE(Open("s3://dtrain-test/auth", &store_).ok());
  std::vector<Status> statuses;
  statuses.push_back(Put("k", "v"));
  std::string got;
  statuses.push_back(store_->Get("k", &got));
  std::vector<ObjectInfo> list;
  statuses.push_back(store_->List("", &list));
  statuses.push_back(store_->Delete("k"));
  opts_.multipart_threshold = opts_.part_size = 5u << 20;
  ASSERT_TRUE(Open("s3://dtrain-test/auth", &store_).ok());
  statuses.push_back(Put("big", S3TestPattern(6u << 20, 1)));
  const Status& put = statuses[0];
  // A configuration error (exit 2: `dtrain launch --max-restarts` does not try again with the same secret), naming
  // the variable to fix and the endpoint with where it came from.
  EXPECT_EQ(put.code(), Status::Code::kInvalidArgument) << put.ToString();
  EXPECT_NE(put.message().find("S3 rejected the credentials for s3://dtrain-test/auth: SignatureDoesNotMatch"),
            std::string::npos)
      << put.message();
  EXPECT_NE(put.message().find("check AWS_SECRET_ACCESS_KEY"), std::string::npos) << put.message();
  EXPECT_NE(put.message().find("endpoint " + S3Server().endpoint + " (storage.endpoint), region us-east-1"),
            std::string::npos)
      << put.message();
  for (const Status& s : statuses) {
    EXPECT_EQ(s.code(), Status::Code::kInvalidArgument) << s.ToString();
    EXPECT_EQ(s.message().find(planted), std::string::npos) << s.message();
    EXPECT_EQ(s.message().find("Signature="), std::string::npos) << s.message();
  }
  EXPECT_EQ(logs.text().find(planted), std::string::npos) << logs.text();
}

TEST_F(S3StorageTest, UnknownAccessKeyNamesTheKeyVariable) {
  opts_.access_key = "NOSUCHACCESSKEY00000";
  ASSERT_TRUE(Open("s3://dtrain-test/auth", &store_).ok());
  const Status st = Put("k", "v");
  EXPECT_EQ(st.code(), Status::Code::kInvalidArgument) << st.ToString();
  EXPECT_NE(st.message().find("InvalidAccessKeyId — check AWS_ACCESS_KEY_ID"), std::string::npos) << st.message();
  EXPECT_NE(st.message().find("endpoint " + S3Server().endpoint + " (storage.endpoint)"), std::string::npos)
      << st.message();
}

TEST_F(S3StorageTest, CredentialsAndEndpointFromEnvironment) {
  ::setenv("AWS_ENDPOINT_URL", S3Server().endpoint.c_str(), 1);
  ::setenv("AWS_ACCESS_KEY_ID", S3Server().access.c_str(), 1);
  ::setenv("AWS_SECRET_ACCESS_KEY", S3Server().secret.c_str(), 1);
  ::setenv("AWS_REGION", "us-east-1", 1);
  std::unique_ptr<Storage> s;
  const Status open = Storage::Open("s3://dtrain-test/env/", StorageOptions{}, &s);
  for (const char* v : {"AWS_ENDPOINT_URL", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_REGION"}) ::unsetenv(v);
  ASSERT_TRUE(open.ok()) << open.ToString();
  ASSERT_TRUE(s->Put("k", "env", 3).ok());
  std::string got;
  ASSERT_TRUE(store_->Get("../env/k", &got).code() == Status::Code::kInvalidArgument);
  ASSERT_TRUE(s->Get("k", &got).ok());
  EXPECT_EQ(got, "env");
  std::unique_ptr<Storage> none;
  EXPECT_EQ(Storage::Open("s3://dtrain-test/env", StorageOptions{}, &none).code(), Status::Code::kInvalidArgument);

  // A wrong secret in the environment: the message names the endpoint's variable, not storage.endpoint.
  ::setenv("AWS_ENDPOINT_URL", S3Server().endpoint.c_str(), 1);
  ::setenv("AWS_ACCESS_KEY_ID", S3Server().access.c_str(), 1);
  ::setenv("AWS_SECRET_ACCESS_KEY", "wrong-env-secret-0123456789", 1);
  std::unique_ptr<Storage> wrong;
  const Status open_wrong = Storage::Open("s3://dtrain-test/env/", StorageOptions{}, &wrong);
  for (const char* v : {"AWS_ENDPOINT_URL", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"}) ::unsetenv(v);
  ASSERT_TRUE(open_wrong.ok()) << open_wrong.ToString();
  const Status st = wrong->Put("k", "env", 3);
  EXPECT_EQ(st.code(), Status::Code::kInvalidArgument) << st.ToString();
  EXPECT_NE(st.message().find("SignatureDoesNotMatch — check AWS_SECRET_ACCESS_KEY"), std::string::npos)
      << st.message();
  EXPECT_NE(st.message().find("endpoint " + S3Server().endpoint + " (AWS_ENDPOINT_URL)"), std::string::npos)
      << st.message();
  EXPECT_EQ(st.message().find("wrong-env-secret"), std::string::npos) << st.message();
}

TEST_F(S3StorageTest, VirtualHostAddressing) {
  // RGW runs with `rgw dns name = localhost`; libcurl resolves *.localhost to loopback itself.
  opts_.path_style = false;
  opts_.endpoint = "http://localhost:" + S3Server().endpoint.substr(S3Server().endpoint.rfind(':') + 1);
  ASSERT_TRUE(Open("s3://dtrain-test/vhost", &store_).ok());
  const Status put = Put("k", "virtual");
  ASSERT_TRUE(put.ok()) << put.ToString();
  opts_.path_style = true;
  std::unique_ptr<Storage> path_style;
  ASSERT_TRUE(Open("s3://dtrain-test/vhost", &path_style).ok());
  std::string got;
  ASSERT_TRUE(path_style->Get("k", &got).ok());
  EXPECT_EQ(got, "virtual");
}

TEST_F(S3StorageTest, ConcurrentCallsFromManyThreads) {
  std::vector<std::thread> threads;
  std::atomic<int> failures{0};
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 8; ++i) {
        const std::string k = "t" + std::to_string(t) + "/k" + std::to_string(i);
        const std::string v = S3TestPattern(1000 + 37 * i, t * 100 + i);
        std::string got;
        if (!Put(k, v).ok() || !store_->Get(k, &got).ok() || got != v) ++failures;
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(failures.load(), 0);
  std::vector<ObjectInfo> list;
  ASSERT_TRUE(store_->List("", &list).ok());
  EXPECT_EQ(list.size(), 32u);
}

TEST_F(S3StorageTest, ServerDownRetriesThenIoErrorInBoundedTime) {
  // A loopback port with nothing listening: connect is refused at once, every attempt.
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(addr);
  ASSERT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&addr), len), 0);
  ASSERT_EQ(::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len), 0);
  ::close(fd);
  opts_.endpoint = "http://127.0.0.1:" + std::to_string(ntohs(addr.sin_port));
  opts_.max_retries = 3;
  LogCapture logs;
  ASSERT_TRUE(Open("s3://dtrain-test/down", &store_).ok());
  const auto t0 = std::chrono::steady_clock::now();
  const Status st = Put("k", "v");
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_EQ(st.code(), Status::Code::kIoError) << st.ToString();
  EXPECT_NE(st.message().find("cannot reach S3 endpoint " + opts_.endpoint), std::string::npos) << st.message();
  EXPECT_NE(st.message().find("after 4 attempts"), std::string::npos) << st.message();
  // Backoff ceilings 100, 200, 400 ms: at most 0.7 s of sleeping plus three refused connects.
  EXPECT_LT(secs, 2.0);
  size_t retries = 0;
  for (size_t p = logs.text().find("retry "); p != std::string::npos; p = logs.text().find("retry ", p + 1)) ++retries;
  EXPECT_EQ(retries, 3u) << logs.text();
}

}  // namespace
}  // namespace dtrain::storage
