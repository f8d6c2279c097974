// FileStorage (file://): round trip, atomic Put under concurrent readers, listing, key rules, errors.

#include "storage/file_storage.h"

#include <dirent.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

namespace dtrain::storage {
namespace {

class FileStorageTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/dtrain_file_storage_XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    ASSERT_TRUE(Storage::Open("file://" + dir_ + "/root", StorageOptions{}, &store_).ok());
  }
  void TearDown() override { ASSERT_EQ(std::system(("rm -rf " + dir_).c_str()), 0); }

  Status Put(const std::string& key, const std::string& value) { return store_->Put(key, value.data(), value.size()); }

  // Every name in a directory tree (to catch leftover temporaries).
  static void Names(const std::string& dir, std::vector<std::string>* out) {
    DIR* d = ::opendir(dir.c_str());
    if (d == nullptr) return;
    while (const dirent* e = ::readdir(d)) {
      const std::string n = e->d_name;
      if (n == "." || n == "..") continue;
      out->push_back(n);
      if (e->d_type == DT_DIR) Names(dir + "/" + n, out);
    }
    ::closedir(d);
  }

  std::string dir_;
  std::unique_ptr<Storage> store_;
};

TEST_F(FileStorageTest, RoundTripRangeHeadAndOverwrite) {
  ASSERT_TRUE(Put("a/b/c.bin", "0123456789").ok());
  std::string got;
  ASSERT_TRUE(store_->Get("a/b/c.bin", &got).ok());
  EXPECT_EQ(got, "0123456789");
  ASSERT_TRUE(store_->GetRange("a/b/c.bin", 3, 4, &got).ok());
  EXPECT_EQ(got, "3456");
  ASSERT_TRUE(store_->GetRange("a/b/c.bin", 8, 100, &got).ok());  // clamped at the end
  EXPECT_EQ(got, "89");
  ASSERT_TRUE(store_->GetRange("a/b/c.bin", 50, 5, &got).ok());
  EXPECT_EQ(got, "");
  ObjectInfo info;
  ASSERT_TRUE(store_->Head("a/b/c.bin", &info).ok());
  EXPECT_EQ(info.key, "a/b/c.bin");
  EXPECT_EQ(info.size, 10u);
  ASSERT_TRUE(Put("a/b/c.bin", "xy").ok());
  ASSERT_TRUE(store_->Get("a/b/c.bin", &got).ok());
  EXPECT_EQ(got, "xy");
  ASSERT_TRUE(Put("empty", "").ok());
  ASSERT_TRUE(store_->Get("empty", &got).ok());
  EXPECT_EQ(got.size(), 0u);
  // Binary bytes, NUL included.
  std::string bin(4096, '\0');
  for (size_t i = 0; i < bin.size(); ++i) bin[i] = static_cast<char>(i * 7);
  ASSERT_TRUE(Put("bin", bin).ok());
  ASSERT_TRUE(store_->Get("bin", &got).ok());
  EXPECT_EQ(got, bin);
}

TEST_F(FileStorageTest, GetIntoReadsIntoTheBufferAndReportsTheRealSize) {
  std::string v((3u << 20) + 77, '\0');  // larger than one write chunk is not needed: the bytes are what counts
  for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<char>(i * 131 + (i >> 9));
  ASSERT_TRUE(Put("d/v.bin", v).ok());
  std::string buf(v.size(), 'x');
  uint64_t size = 0;
  ASSERT_TRUE(store_->GetInto("d/v.bin", buf.data(), buf.size(), &size).ok());
  EXPECT_EQ(size, v.size());
  EXPECT_TRUE(buf == v);
  std::string small(10, 'x');  // a shorter buffer: its bytes, and the real size to compare with
  ASSERT_TRUE(store_->GetInto("d/v.bin", small.data(), small.size(), &size).ok());
  EXPECT_EQ(size, v.size());
  EXPECT_EQ(small, v.substr(0, 10));
  std::string big(v.size() + 5, 'x');  // a longer one: the object's bytes, the rest untouched
  ASSERT_TRUE(store_->GetInto("d/v.bin", big.data(), big.size(), &size).ok());
  EXPECT_EQ(size, v.size());
  EXPECT_EQ(big.substr(0, v.size()), v);
  EXPECT_EQ(big.substr(v.size()), "xxxxx");
  EXPECT_EQ(store_->GetInto("d/none.bin", big.data(), big.size(), &size).code(), Status::Code::kNotFound);
}

// Pages of `path` in the page cache (mincore over a mapping of the whole file).
size_t ResidentPages(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY);
  struct stat st;
  if (fd < 0 || ::fstat(fd, &st) != 0 || st.st_size == 0) return 0;
  void* map = ::mmap(nullptr, static_cast<size_t>(st.st_size), PROT_READ, MAP_SHARED, fd, 0);
  ::close(fd);
  const size_t pages = (static_cast<size_t>(st.st_size) + 4095) / 4096;
  std::vector<unsigned char> vec(pages);
  size_t resident = 0;
  if (map != MAP_FAILED && ::mincore(map, static_cast<size_t>(st.st_size), vec.data()) == 0) {
    for (unsigned char v : vec) resident += v & 1u;
  }
  if (map != MAP_FAILED) ::munmap(map, static_cast<size_t>(st.st_size));
  return resident;
}

// GetRangeInto: exact bytes at every offset and alignment, cold (evicted from the page cache: read with O_DIRECT
// into an aligned buffer, so the cache stays empty) and warm, the object's size at each call, short at the end.
TEST_F(FileStorageTest, GetRangeIntoColdAndWarmAlignedAndNot) {
  std::string value(5 * 4096 + 123, '\0');
  for (size_t i = 0; i < value.size(); ++i) value[i] = static_cast<char>((i * 131) ^ (i >> 9));
  ASSERT_TRUE(Put("d/obj", value).ok());
  const std::string path = dir_ + "/root/d/obj";
  const int fd = ::open(path.c_str(), O_RDONLY);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED), 0);  // Put fsynced: clean pages, dropped
  ::close(fd);
  const bool evicted = ResidentPages(path) == 0;
  void* raw = nullptr;
  ASSERT_EQ(::posix_memalign(&raw, 4096, 8 * 4096), 0);
  char* buf = static_cast<char*>(raw);
  uint64_t got = 0, size = 0;
  Status st = store_->GetRangeInto("d/obj", 4096, buf, 2 * 4096, &got, &size);
  ASSERT_TRUE(st.ok()) << st.ToString();
  EXPECT_EQ(got, 2u * 4096);
  EXPECT_EQ(size, value.size());
  EXPECT_EQ(std::string(buf, got), value.substr(4096, 2 * 4096));
  if (evicted) EXPECT_EQ(ResidentPages(path), 0u) << "an aligned cold read went through the page cache";
  // Unaligned destination and offset, a range past the end (cut short), one starting past the end (empty).
  for (uint64_t offset : {uint64_t{0}, uint64_t{1}, uint64_t{4095}, uint64_t{3 * 4096}, uint64_t{5 * 4096 + 100}}) {
    for (size_t shift : {size_t{0}, size_t{3}}) {
      st = store_->GetRangeInto("d/obj", offset, buf + shift, 2 * 4096 + 7, &got, &size);
      ASSERT_TRUE(st.ok()) << st.ToString();
      const uint64_t want = std::min<uint64_t>(2 * 4096 + 7, value.size() - offset);
      EXPECT_EQ(got, want) << offset;
      EXPECT_EQ(std::string(buf + shift, got), value.substr(offset, want)) << offset << " " << shift;
    }
  }
  st = store_->GetRangeInto("d/obj", value.size() + 5, buf, 100, &got, &size);
  ASSERT_TRUE(st.ok()) << st.ToString();
  EXPECT_EQ(got, 0u);
  EXPECT_EQ(size, value.size());
  EXPECT_EQ(store_->GetRangeInto("d/none", 0, buf, 100, &got, &size).code(), Status::Code::kNotFound);
  std::free(raw);
}

TEST_F(FileStorageTest, PutOfSeveralWriteChunksIsByteExact) {
  std::string v((130u << 20) + 3, '\0');  // three 64 MiB write chunks, the last one short
  for (size_t i = 0; i < v.size(); i += 4096) v[i] = static_cast<char>(i / 4096);
  v.back() = 'z';
  ASSERT_TRUE(Put("big.bin", v).ok());
  std::string got;
  ASSERT_TRUE(store_->Get("big.bin", &got).ok());
  ASSERT_EQ(got.size(), v.size());
  EXPECT_TRUE(got == v);
}

TEST_F(FileStorageTest, ListIsRecursiveSortedAndPrefixed) {
  for (const char* k : {"ckpt/step-00020/b", "ckpt/step-00010/a", "ckpt/latest", "ckpt/step-00010/sub/c", "other"}) {
    ASSERT_TRUE(Put(k, k).ok());
  }
  std::vector<ObjectInfo> all;
  ASSERT_TRUE(store_->List("", &all).ok());
  ASSERT_EQ(all.size(), 5u);
  EXPECT_EQ(all[0].key, "ckpt/latest");
  EXPECT_EQ(all[1].key, "ckpt/step-00010/a");
  EXPECT_EQ(all[2].key, "ckpt/step-00010/sub/c");
  EXPECT_EQ(all[3].key, "ckpt/step-00020/b");
  EXPECT_EQ(all[4].key, "other");
  EXPECT_EQ(all[2].size, std::string("ckpt/step-00010/sub/c").size());
  std::vector<ObjectInfo> some;
  ASSERT_TRUE(store_->List("ckpt/step-", &some).ok());  // a partial segment matches too
  ASSERT_EQ(some.size(), 3u);
  EXPECT_EQ(some[0].key, "ckpt/step-00010/a");
  ASSERT_TRUE(store_->List("ckpt/step-00020/", &some).ok());
  ASSERT_EQ(some.size(), 1u);
  EXPECT_EQ(some[0].key, "ckpt/step-00020/b");
  ASSERT_TRUE(store_->List("nothing/here", &some).ok());
  EXPECT_TRUE(some.empty());
}

TEST_F(FileStorageTest, DeleteIsIdempotentAndPrunesEmptyDirs) {
  ASSERT_TRUE(Put("d/e/f", "1").ok());
  ASSERT_TRUE(store_->Delete("d/e/f").ok());
  ASSERT_TRUE(store_->Delete("d/e/f").ok());
  ASSERT_TRUE(store_->Delete("never/was").ok());
  std::string got;
  EXPECT_EQ(store_->Get("d/e/f", &got).code(), Status::Code::kNotFound);
  std::vector<std::string> names;
  Names(dir_ + "/root", &names);
  EXPECT_TRUE(names.empty()) << names.size() << " names left, first " << names[0];
}

TEST_F(FileStorageTest, BadKeysAreInvalidArgument) {
  std::string got;
  for (const char* k : {"", "/abs", "a/../b", "..", "./a", "a//b", "a/", "a/.", "x.tmp.12.3"}) {
    const Status s = Put(k, "v");
    EXPECT_EQ(s.code(), Status::Code::kInvalidArgument) << "key '" << k << "': " << s.ToString();
    EXPECT_EQ(store_->Get(k, &got).code(), Status::Code::kInvalidArgument) << k;
    EXPECT_EQ(store_->Delete(k).code(), Status::Code::kInvalidArgument) << k;
  }
  std::vector<ObjectInfo> list;
  EXPECT_EQ(store_->List("../", &list).code(), Status::Code::kInvalidArgument);
  EXPECT_TRUE(Put("a..b/c.d", "fine").ok());  // dots inside a name are fine
}

TEST_F(FileStorageTest, NotFoundNamesUrlAndKey) {
  std::string got;
  const Status s = store_->Get("no/such", &got);
  EXPECT_EQ(s.code(), Status::Code::kNotFound);
  EXPECT_NE(s.message().find("file://" + dir_ + "/root"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("no/such"), std::string::npos) << s.message();
  ObjectInfo info;
  EXPECT_EQ(store_->Head("no/such", &info).code(), Status::Code::kNotFound);
  ASSERT_TRUE(Put("dir/x", "1").ok());
  EXPECT_EQ(store_->Get("dir", &got).code(), Status::Code::kNotFound);  // a directory is no object
  EXPECT_EQ(store_->url(), "file://" + dir_ + "/root");
}

TEST_F(FileStorageTest, ConcurrentReadersSeeOldOrWholeNewObject) {
  // Two 8 MiB versions filled with different bytes; readers must see one of them whole, or NotFound.
  const size_t n = 8u << 20;
  const std::string v1(n, 'a'), v2(n, 'b');
  std::atomic<bool> done{false};
  std::atomic<int> reads{0}, torn{0}, errors{0};
  std::vector<std::thread> readers;
  for (int t = 0; t < 2; ++t) {
    readers.emplace_back([&] {
      std::string got;
      while (!done.load()) {
        const Status s = store_->Get("big", &got);
        if (s.code() == Status::Code::kNotFound) continue;
        if (!s.ok()) {
          ++errors;
          continue;
        }
        ++reads;
        if (got != v1 && got != v2) ++torn;
      }
    });
  }
  for (int i = 0; i < 6; ++i) ASSERT_TRUE(store_->Put("big", (i % 2 ? v2 : v1).data(), n).ok());
  done = true;
  for (auto& t : readers) t.join();
  EXPECT_GT(reads.load(), 0);
  EXPECT_EQ(torn.load(), 0);
  EXPECT_EQ(errors.load(), 0);
  std::vector<std::string> names;
  Names(dir_ + "/root", &names);
  ASSERT_EQ(names.size(), 1u);  // no temporaries left behind
  EXPECT_EQ(names[0], "big");
}

TEST_F(FileStorageTest, ConcurrentWritersOfDistinctKeys) {
  std::vector<std::thread> writers;
  for (int t = 0; t < 4; ++t) {
    writers.emplace_back([&, t] {
      for (int i = 0; i < 25; ++i) {
        const std::string k = "w" + std::to_string(t) + "/k" + std::to_string(i);
        EXPECT_TRUE(Put(k, k).ok());
      }
    });
  }
  for (auto& w : writers) w.join();
  std::vector<ObjectInfo> list;
  ASSERT_TRUE(store_->List("", &list).ok());
  EXPECT_EQ(list.size(), 100u);
}

TEST(StorageOpenTest, UrlForms) {
  std::unique_ptr<Storage> s;
  EXPECT_EQ(Storage::Open("file://relative", StorageOptions{}, &s).code(), Status::Code::kInvalidArgument);
  EXPECT_EQ(Storage::Open("gs://bucket", StorageOptions{}, &s).code(), Status::Code::kInvalidArgument);
  char tmpl[] = "/tmp/dtrain_open_XXXXXX";
  ASSERT_NE(::mkdtemp(tmpl), nullptr);
  const std::string dir = tmpl;
  ASSERT_TRUE(Storage::Open(dir + "/plain/", StorageOptions{}, &s).ok());  // a bare path, created
  ASSERT_TRUE(s->Put("k", "v", 1).ok());
  std::string got;
  ASSERT_TRUE(s->Get("k", &got).ok());
  EXPECT_EQ(got, "v");
  EXPECT_EQ(s->url(), dir + "/plain/");
  ASSERT_EQ(std::system(("rm -rf " + dir).c_str()), 0);
}

}  // namespace
}  // namespace dtrain::storage
