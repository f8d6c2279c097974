#include "data/idx_reader.h"

#include <gtest/gtest.h>

#include <numeric>
#include <string>
#include <vector>

#include "data/fashion_mnist.h"
#include "tests/data/idx_fixture.h"

namespace dtrain::data {
namespace {

using fixture::Gzip;
using fixture::IdxBytes;
using fixture::ReadFileBytes;
using fixture::TempDir;
using fixture::WriteFile;

constexpr uint32_t kImagesMagic = 0x00000803;
constexpr uint32_t kLabelsMagic = 0x00000801;

std::vector<uint8_t> Iota(size_t n) {
  std::vector<uint8_t> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = static_cast<uint8_t>(i * 7 + 3);
  return v;
}

bool Contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

// A 3-D array (2 x 3 x 4) round-trips from a plain and from a gzip file, with the same bytes.
TEST(IdxReaderTest, ReadsPlainAndGzip3D) {
  TempDir dir;
  const std::vector<uint8_t> payload = Iota(2 * 3 * 4);
  const std::vector<uint8_t> raw = IdxBytes(kImagesMagic, {2, 3, 4}, payload);
  WriteFile(dir.File("a.idx"), raw);
  WriteFile(dir.File("a.idx.gz"), Gzip(raw));
  for (const std::string name : {"a.idx", "a.idx.gz"}) {
    IdxArray a;
    ASSERT_TRUE(ReadIdx(dir.File(name), &a).ok()) << name;
    EXPECT_EQ(a.dims, (std::vector<int64_t>{2, 3, 4})) << name;
    EXPECT_EQ(a.data, payload) << name;
  }
}

// Gzip is detected by content: a gzip file without ".gz" in its name still decodes.
TEST(IdxReaderTest, DetectsGzipByMagicNotName) {
  TempDir dir;
  const std::vector<uint8_t> payload = {0, 9, 255, 1, 2};
  WriteFile(dir.File("labels.bin"), Gzip(IdxBytes(kLabelsMagic, {5}, payload)));
  IdxArray a;
  ASSERT_TRUE(ReadIdx(dir.File("labels.bin"), &a).ok());
  EXPECT_EQ(a.dims, (std::vector<int64_t>{5}));
  EXPECT_EQ(a.data, payload);
}

// Dims above 2^24 exercise all four big-endian bytes.
TEST(IdxReaderTest, DimsAreBigEndian) {
  TempDir dir;
  WriteFile(dir.File("e.idx"), IdxBytes(0x00000802, {1, 0x01020304}, {}));
  IdxArray a;
  const Status st = ReadIdx(dir.File("e.idx"), &a);
  // 1 * 16909060 bytes declared, 0 present: the message carries the decoded dims.
  ASSERT_EQ(st.code(), Status::Code::kDataLoss);
  EXPECT_TRUE(Contains(st.message(), "[1,16909060]")) << st.message();
  EXPECT_TRUE(Contains(st.message(), "need 16909060 bytes, got 0")) << st.message();
}

TEST(IdxReaderTest, MissingFileIsNotFoundWithPackageHint) {
  TempDir dir;
  IdxArray a;
  const Status st = ReadIdx(dir.File("nope-idx1-ubyte.gz"), &a);
  EXPECT_EQ(st.code(), Status::Code::kNotFound);
  EXPECT_TRUE(Contains(st.message(), dir.File("nope-idx1-ubyte.gz"))) << st.message();
  EXPECT_TRUE(Contains(st.message(), "apt-get install dataset-fashion-mnist")) << st.message();
}

TEST(IdxReaderTest, TruncatedPlainPayloadIsDataLossWithCounts) {
  TempDir dir;
  std::vector<uint8_t> raw = IdxBytes(kImagesMagic, {2, 3, 4}, Iota(24));
  raw.resize(raw.size() - 5);
  WriteFile(dir.File("t.idx"), raw);
  IdxArray a;
  const Status st = ReadIdx(dir.File("t.idx"), &a);
  EXPECT_EQ(st.code(), Status::Code::kDataLoss);
  EXPECT_TRUE(Contains(st.message(), dir.File("t.idx"))) << st.message();
  EXPECT_TRUE(Contains(st.message(), "need 24 bytes, got 19")) << st.message();
  EXPECT_TRUE(a.data.empty());
}

TEST(IdxReaderTest, TruncatedHeaderIsDataLoss) {
  TempDir dir;
  WriteFile(dir.File("h.idx"), {0x00, 0x00, 0x08, 0x03, 0x00, 0x00});
  WriteFile(dir.File("empty.idx"), {});
  IdxArray a;
  Status st = ReadIdx(dir.File("h.idx"), &a);
  EXPECT_EQ(st.code(), Status::Code::kDataLoss);
  EXPECT_TRUE(Contains(st.message(), "expected 12 dim bytes, got 2")) << st.message();
  st = ReadIdx(dir.File("empty.idx"), &a);
  EXPECT_EQ(st.code(), Status::Code::kDataLoss);
  EXPECT_TRUE(Contains(st.message(), dir.File("empty.idx"))) << st.message();
}

TEST(IdxReaderTest, TrailingBytesAreDataLoss) {
  TempDir dir;
  std::vector<uint8_t> raw = IdxBytes(kLabelsMagic, {4}, {1, 2, 3, 4});
  raw.push_back(5);
  WriteFile(dir.File("p.idx"), raw);
  WriteFile(dir.File("p.idx.gz"), Gzip(raw));
  // Two valid gzip members back to back: bytes after the first stream are rejected too.
  std::vector<uint8_t> two = Gzip(IdxBytes(kLabelsMagic, {1}, {7}));
  const std::vector<uint8_t> second = Gzip({8});
  two.insert(two.end(), second.begin(), second.end());
  WriteFile(dir.File("two.gz"), two);
  for (const std::string name : {"p.idx", "p.idx.gz", "two.gz"}) {
    IdxArray a;
    const Status st = ReadIdx(dir.File(name), &a);
    EXPECT_EQ(st.code(), Status::Code::kDataLoss) << name;
    EXPECT_TRUE(Contains(st.message(), dir.File(name))) << st.message();
    EXPECT_TRUE(Contains(st.message(), "trailing bytes")) << st.message();
  }
}

TEST(IdxReaderTest, WrongMagicIsDataLoss) {
  TempDir dir;
  WriteFile(dir.File("f32.idx"), IdxBytes(0x00000D01, {1}, {0, 0, 0, 0}));  // float32 IDX: unsupported
  WriteFile(dir.File("text.idx"), {'h', 'e', 'l', 'l', 'o'});
  WriteFile(dir.File("dims0.idx"), IdxBytes(0x00000800, {}, {}));
  for (const std::string name : {"f32.idx", "text.idx", "dims0.idx"}) {
    IdxArray a;
    const Status st = ReadIdx(dir.File(name), &a);
    EXPECT_EQ(st.code(), Status::Code::kDataLoss) << name;
    EXPECT_TRUE(Contains(st.message(), dir.File(name))) << st.message();
    EXPECT_TRUE(Contains(st.message(), "bad IDX magic")) << st.message();
  }
}

// A corrupt header asking for ~2.8e14 bytes is refused before any allocation.
TEST(IdxReaderTest, HugeDimsAreRefused) {
  TempDir dir;
  WriteFile(dir.File("big.idx"), IdxBytes(kImagesMagic, {65535, 65535, 65535}, {1, 2, 3}));
  IdxArray a;
  const Status st = ReadIdx(dir.File("big.idx"), &a);
  EXPECT_EQ(st.code(), Status::Code::kDataLoss);
  EXPECT_TRUE(Contains(st.message(), "payload cap")) << st.message();
  EXPECT_TRUE(Contains(st.message(), "[65535,65535,65535]")) << st.message();
}

TEST(IdxReaderTest, CorruptGzipIsDataLoss) {
  TempDir dir;
  const std::vector<uint8_t> gz = Gzip(IdxBytes(kImagesMagic, {4, 8, 8}, Iota(256)));
  // Cut inside the deflate data, cut only the 8-byte CRC/length trailer, flip a CRC byte.
  std::vector<uint8_t> cut_mid(gz.begin(), gz.begin() + gz.size() / 2);
  std::vector<uint8_t> cut_trailer(gz.begin(), gz.end() - 8);
  std::vector<uint8_t> bad_crc = gz;
  bad_crc[bad_crc.size() - 8] ^= 0xFF;
  WriteFile(dir.File("mid.gz"), cut_mid);
  WriteFile(dir.File("trailer.gz"), cut_trailer);
  WriteFile(dir.File("crc.gz"), bad_crc);
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"mid.gz", "truncated"}, {"trailer.gz", "gzip stream truncated"}, {"crc.gz", "incorrect data check"}};
  for (const auto& [name, what] : cases) {
    IdxArray a;
    const Status st = ReadIdx(dir.File(name), &a);
    EXPECT_EQ(st.code(), Status::Code::kDataLoss) << name;
    EXPECT_TRUE(Contains(st.message(), dir.File(name))) << st.message();
    EXPECT_TRUE(Contains(st.message(), what)) << st.message();
  }
}

TEST(IdxReaderTest, DirectoryIsIoError) {
  TempDir dir;
  IdxArray a;
  const Status st = ReadIdx(dir.path(), &a);
  EXPECT_EQ(st.code(), Status::Code::kIoError) << st.ToString();
  EXPECT_TRUE(Contains(st.message(), dir.path())) << st.message();
}

// --- the real files ------------------------------------------------------------------------------

std::string RealFile(const std::string& name) { return std::string(kFashionMnistDir) + "/" + name; }

TEST(IdxReaderTest, RealT10kHeaders) {
  IdxArray labels, images;
  const Status st = ReadIdx(RealFile("t10k-labels-idx1-ubyte.gz"), &labels);
  if (st.code() == Status::Code::kNotFound) GTEST_SKIP() << "no Fashion-MNIST: " << st.message();
  ASSERT_TRUE(st.ok()) << st.ToString();
  EXPECT_EQ(labels.dims, (std::vector<int64_t>{10000}));
  // The first t10k labels are a fact of the data set: ankle boot, pullover, trouser, trouser, shirt.
  EXPECT_EQ(std::vector<uint8_t>(labels.data.begin(), labels.data.begin() + 5), (std::vector<uint8_t>{9, 2, 1, 1, 6}));
  ASSERT_TRUE(ReadIdx(RealFile("t10k-images-idx3-ubyte.gz"), &images).ok());
  EXPECT_EQ(images.dims, (std::vector<int64_t>{10000, 28, 28}));
  EXPECT_EQ(std::accumulate(images.data.begin(), images.data.begin() + 784, int64_t{0}), 33456);
}

// A truncated copy of a real .gz file (cut at 60%) is DataLoss naming the copy and the byte counts.
TEST(IdxReaderTest, RealFileTruncatedCopy) {
  const std::vector<uint8_t> gz = ReadFileBytes(RealFile("t10k-labels-idx1-ubyte.gz"));
  if (gz.empty()) GTEST_SKIP() << "no Fashion-MNIST at " << kFashionMnistDir;
  TempDir dir;
  WriteFile(dir.File("t10k-labels-idx1-ubyte.gz"), std::vector<uint8_t>(gz.begin(), gz.begin() + gz.size() * 6 / 10));
  IdxArray a;
  const Status st = ReadIdx(dir.File("t10k-labels-idx1-ubyte.gz"), &a);
  EXPECT_EQ(st.code(), Status::Code::kDataLoss);
  EXPECT_TRUE(Contains(st.message(), dir.File("t10k-labels-idx1-ubyte.gz"))) << st.message();
  EXPECT_TRUE(Contains(st.message(), "need 10000 bytes, got ")) << st.message();
}

}  // namespace
}  // namespace dtrain::data
