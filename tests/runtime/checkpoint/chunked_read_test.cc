// ReadChunked and CheckpointManager::Load's chunked path over the file:// store: exact bytes for sizes around the
// chunk size, every chunk handed over once, corrupt chunks and files of the wrong size as DataLoss naming the file.

#include "runtime/checkpoint/chunked_read.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <fstream>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "core/crc32c.h"
#include "core/random.h"
#include "runtime/checkpoint/checkpoint.h"
#include "tests/testing/subprocess.h"

namespace dtrain::runtime {
namespace {

using testing::TempDir;

constexpr uint64_t kChunk = 4096;

std::string RandomBytes(size_t n, uint64_t seed) {
  SplitMix64 rng(seed);
  std::string s(n, '\0');
  for (char& c : s) c = static_cast<char>(rng.Next());
  return s;
}

// Sizes around the chunk size: empty, one byte, a chunk less/more one, several chunks with a tail.
const std::vector<size_t> kSizes = {0, 1, kChunk - 1, kChunk, kChunk + 1, 7 * kChunk + 5, 16 * kChunk};

struct AlignedFree {
  void operator()(char* p) const { std::free(p); }
};
using AlignedBuf = std::unique_ptr<char, AlignedFree>;
AlignedBuf Aligned(size_t n) {
  return AlignedBuf(static_cast<char*>(std::aligned_alloc(4096, std::max<size_t>(4096, (n + 4095) / 4096 * 4096))));
}

// Records every chunk handed over; checks each byte is covered exactly once.
struct ChunkLog {
  std::mutex mu;
  std::map<size_t, std::vector<std::pair<uint64_t, uint64_t>>> chunks;  // file -> (offset, size)
  Status Add(size_t file, uint64_t offset, uint64_t size) {
    std::lock_guard<std::mutex> lock(mu);
    chunks[file].emplace_back(offset, size);
    return Status::OK();
  }
  // The chunks of `file` tile [0, size) without gap or overlap.
  bool Tiles(size_t file, uint64_t size) {
    auto v = chunks[file];
    std::sort(v.begin(), v.end());
    uint64_t at = 0;
    for (const auto& [off, n] : v) {
      if (off != at || n == 0 || n > kChunk) return false;
      at += n;
    }
    return at == size;
  }
};

// ReadChunked's sink over one buffer per file (given), logging the chunks handed back filled.
class BufferSink : public ChunkSink {
 public:
  explicit BufferSink(std::vector<char*> dst) : dst_(std::move(dst)) {}
  Status Acquire(size_t file, uint64_t offset, uint64_t, char** out) override {
    ++acquired;
    *out = dst_[file] + offset;
    return Status::OK();
  }
  Status Release(size_t file, uint64_t offset, uint64_t size, char* buf, bool filled) override {
    ++released;
    EXPECT_EQ(buf, dst_[file] + offset);
    return filled ? log.Add(file, offset, size) : Status::OK();
  }
  ChunkLog log;
  std::atomic<int> acquired{0}, released{0};  // every buffer handed out comes back, filled or not

 private:
  std::vector<char*> dst_;
};

class ChunkedReadTest : public ::testing::Test {
 protected:
  void SetUp() override { ASSERT_TRUE(storage::Storage::Open("file://" + dir_.path(), {}, &store_).ok()); }
  void Put(const std::string& key, const std::string& bytes) {
    ASSERT_TRUE(store_->Put(key, bytes.data(), bytes.size()).ok());
  }
  TempDir dir_;
  std::unique_ptr<storage::Storage> store_;
};

TEST_F(ChunkedReadTest, ReadsExactlyTheBytesIntoAlignedAndUnalignedBuffers) {
  for (size_t misalign : {size_t{0}, size_t{1}}) {
    std::vector<std::string> contents;
    std::vector<AlignedBuf> buffers;
    std::vector<ChunkedFile> files;
    std::vector<char*> dst;
    for (size_t i = 0; i < kSizes.size(); ++i) {
      contents.push_back(RandomBytes(kSizes[i], 100 + i));
      Put("f" + std::to_string(i), contents.back());
      buffers.push_back(Aligned(kSizes[i] + misalign));
      files.push_back({"f" + std::to_string(i), kSizes[i], Crc32c(contents[i].data(), kSizes[i])});
      dst.push_back(buffers.back().get() + misalign);
    }
    BufferSink sink(dst);
    const Status st = ReadChunked(store_.get(), files, {kChunk, 3}, &sink);
    ASSERT_TRUE(st.ok()) << st.ToString();
    for (size_t i = 0; i < kSizes.size(); ++i) {
      EXPECT_EQ(std::string(dst[i], kSizes[i]), contents[i]) << "size " << kSizes[i] << " misalign " << misalign;
      EXPECT_TRUE(sink.log.Tiles(i, kSizes[i])) << "size " << kSizes[i];
    }
    EXPECT_EQ(sink.log.chunks[6].size(), 16u);  // 16 chunks of the 16-chunk file
  }
}

TEST_F(ChunkedReadTest, CorruptChunkInTheMiddleIsDataLossNamingTheFile) {
  const std::string good = RandomBytes(kChunk, 1), big = RandomBytes(10 * kChunk + 3, 2);
  Put("a.bin", good);
  std::string bad = big;
  bad[5 * kChunk + 17] ^= 0x20;  // one bit in chunk 5 of 11
  Put("b.bin", bad);
  AlignedBuf a = Aligned(good.size()), b = Aligned(big.size());
  const std::vector<ChunkedFile> files = {{"a.bin", good.size(), Crc32c(good.data(), good.size())},
                                          {"b.bin", big.size(), Crc32c(big.data(), big.size())}};
  BufferSink sink({a.get(), b.get()});
  const Status st = ReadChunked(store_.get(), files, {kChunk, 4}, &sink);
  EXPECT_EQ(st.code(), Status::Code::kDataLoss);
  EXPECT_NE(st.message().find("b.bin: CRC32C "), std::string::npos) << st.message();
  EXPECT_NE(st.message().find("(corrupt data)"), std::string::npos) << st.message();
}

TEST_F(ChunkedReadTest, FileShorterOrLongerThanExpectedOrMissingIsDataLoss) {
  const std::string bytes = RandomBytes(3 * kChunk + 1, 3);
  Put("x.bin", bytes);
  AlignedBuf buf = Aligned(bytes.size() + kChunk);
  for (uint64_t expect : {bytes.size() - 1, bytes.size() + 1, bytes.size() + kChunk}) {
    BufferSink sink({buf.get()});
    const Status st = ReadChunked(store_.get(), {{"x.bin", expect, 0}}, {kChunk, 2}, &sink);
    EXPECT_EQ(st.code(), Status::Code::kDataLoss) << expect;
    EXPECT_GT(sink.acquired.load(), 0);
    EXPECT_EQ(sink.acquired.load(), sink.released.load());
    EXPECT_TRUE(sink.log.chunks.empty());  // a size mismatch is seen at every chunk: none handed back filled
    EXPECT_NE(st.message().find("x.bin: " + std::to_string(bytes.size()) + " bytes, the manifest says " +
                                std::to_string(expect)),
              std::string::npos)
        << st.message();
  }
  BufferSink sink({buf.get()});
  const Status st = ReadChunked(store_.get(), {{"gone.bin", 10, 0}}, {kChunk, 2}, &sink);
  EXPECT_EQ(st.code(), Status::Code::kDataLoss);
  EXPECT_NE(st.message().find("gone.bin: missing"), std::string::npos) << st.message();
}

// A sink with aligned buffers of its own, as the trainer's staging buffers (pinned there).
class TestSink : public LoadSink {
 public:
  Status Begin(const proto::CheckpointManifest& m) override {
    ++begins;
    for (int i = 0; i < m.files_size(); ++i) buffers_[i] = Aligned(m.files(i).size());
    return Status::OK();
  }
  Status Acquire(size_t index, uint64_t offset, uint64_t, char** out) override {
    *out = buffers_[index].get() + offset;
    return Status::OK();
  }
  Status Release(size_t index, uint64_t offset, uint64_t size, char*, bool filled) override {
    return filled ? log.Add(index, offset, size) : Status::OK();
  }
  std::string Bytes(size_t index, size_t n) { return std::string(buffers_[index].get(), n); }
  ChunkLog log;
  int begins = 0;

 private:
  std::map<size_t, AlignedBuf> buffers_;
};

std::unique_ptr<CheckpointManager> OpenManager(const std::string& dir) {
  CheckpointOptions o;
  o.restore_chunk_bytes = kChunk;
  o.restore_threads = 3;
  std::unique_ptr<CheckpointManager> m;
  EXPECT_TRUE(CheckpointManager::Open("file://" + dir, {}, o, &m).ok());
  return m;
}

TEST(ChunkedLoad, LoadIntoASinkAndIntoStringsGiveTheSavedBytes) {
  TempDir dir;
  auto m = OpenManager(dir.path());
  std::vector<std::string> contents;
  std::vector<CheckpointBlob> blobs;
  for (size_t i = 0; i < kSizes.size(); ++i) contents.push_back(RandomBytes(kSizes[i], 200 + i));
  for (size_t i = 0; i < kSizes.size(); ++i) {
    blobs.push_back({"file" + std::to_string(i) + ".bin", contents[i].data(), contents[i].size(),
                     static_cast<int64_t>(contents[i].size() / 4)});
  }
  proto::CheckpointManifest man;
  man.set_step(5);
  ASSERT_TRUE(m->Save(man, blobs).ok());

  TestSink sink;
  LoadedCheckpoint ck;
  Status st = m->Load(5, &ck, &sink);
  ASSERT_TRUE(st.ok()) << st.ToString();
  EXPECT_TRUE(ck.files.empty());  // the sink holds them
  EXPECT_EQ(sink.begins, 1);
  ASSERT_EQ(ck.manifest.files_size(), static_cast<int>(kSizes.size()));
  for (size_t i = 0; i < kSizes.size(); ++i) {
    EXPECT_EQ(sink.Bytes(i, kSizes[i]), contents[i]) << "size " << kSizes[i];
    EXPECT_TRUE(sink.log.Tiles(i, kSizes[i])) << "size " << kSizes[i];
  }
  st = m->Load(5, &ck);
  ASSERT_TRUE(st.ok()) << st.ToString();
  for (size_t i = 0; i < kSizes.size(); ++i) EXPECT_EQ(ck.files["file" + std::to_string(i) + ".bin"], contents[i]);
}

TEST(ChunkedLoad, CorruptChunkMeansNothingLoadedAndTheFileNamed) {
  TempDir dir;
  auto m = OpenManager(dir.path());
  const std::string a = RandomBytes(3 * kChunk, 7), b = RandomBytes(9 * kChunk + 100, 8);
  proto::CheckpointManifest man;
  man.set_step(9);
  ASSERT_TRUE(m->Save(man, {{"params.bin", a.data(), a.size(), 0}, {"exp_avg.bin", b.data(), b.size(), 0}}).ok());
  const std::string path = dir.path() + "/step-00000009/exp_avg.bin";
  {
    std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(4 * kChunk + 9);
    f.put(static_cast<char>(b[4 * kChunk + 9] ^ 0x01));
  }
  LoadedCheckpoint ck;
  Status st = m->Load(9, &ck);
  EXPECT_EQ(st.code(), Status::Code::kDataLoss);
  EXPECT_NE(st.message().find("step-00000009/exp_avg.bin: CRC32C"), std::string::npos) << st.message();
  EXPECT_TRUE(ck.files.empty());
  EXPECT_TRUE(ck.dir.empty());
  TestSink sink;
  st = m->Load(9, &ck, &sink);
  EXPECT_EQ(st.code(), Status::Code::kDataLoss);
  EXPECT_TRUE(ck.dir.empty());
  // Truncated by one byte: named with both sizes, before anything is read.
  ASSERT_EQ(::truncate(path.c_str(), static_cast<off_t>(b.size() - 1)), 0);
  st = m->Load(9, &ck);
  EXPECT_EQ(st.code(), Status::Code::kDataLoss);
  EXPECT_NE(st.message().find("exp_avg.bin: " + std::to_string(b.size() - 1) + " bytes, the manifest says " +
                              std::to_string(b.size())),
            std::string::npos)
      << st.message();
}

}  // namespace
}  // namespace dtrain::runtime
