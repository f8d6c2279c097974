#include "core/crc32c.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "core/random.h"

namespace dtrain {
namespace {

TEST(Crc32cTest, KnownVectors) {
  EXPECT_EQ(Crc32c("123456789", 9), 0xE3069283u);  // the standard check value of CRC-32C
  EXPECT_EQ(Crc32c("", 0), 0u);
  const std::vector<uint8_t> zeros(32, 0x00), ones(32, 0xFF);  // RFC 3720 B.4 vectors
  EXPECT_EQ(Crc32c(zeros.data(), 32), 0x8A9136AAu);
  EXPECT_EQ(Crc32c(ones.data(), 32), 0x62A8AB43u);
  EXPECT_EQ(detail::Crc32cExtendSoftware(0, "123456789", 9), 0xE3069283u);
}

TEST(Crc32cTest, ExtendEqualsWholeAndSoftwareEqualsDefaultPath) {
  SplitMix64 rng(7);
  std::vector<uint8_t> buf(10007);
  for (auto& b : buf) b = static_cast<uint8_t>(rng.Next());
  const uint32_t whole = Crc32c(buf.data(), buf.size());
  EXPECT_EQ(detail::Crc32cExtendSoftware(0, buf.data(), buf.size()), whole);
  for (size_t cut : {size_t{0}, size_t{1}, size_t{7}, size_t{8}, size_t{4096}, buf.size()}) {
    EXPECT_EQ(Crc32cExtend(Crc32c(buf.data(), cut), buf.data() + cut, buf.size() - cut), whole) << "cut " << cut;
  }
  buf[5000] ^= 0x01;  // one flipped bit changes the checksum
  EXPECT_NE(Crc32c(buf.data(), buf.size()), whole);
}

// The interleaved hardware loop (three chains over 8 KiB blocks, joined by shifts) against the one-chain and the
// table-driven paths, for lengths around the round size (3 x 8 KiB) and unaligned starts.
TEST(Crc32cTest, InterleavedEqualsOneChainAndSoftware) {
  SplitMix64 rng(11);
  std::vector<uint8_t> buf(3 * 3 * 8192 + 4099);
  for (auto& b : buf) b = static_cast<uint8_t>(rng.Next());
  for (size_t start : {size_t{0}, size_t{1}, size_t{5}}) {
    for (size_t n : {size_t{0}, size_t{1}, size_t{24575}, size_t{24576}, size_t{24577}, size_t{49152}, size_t{53251},
                     buf.size() - 5}) {
      const uint8_t* p = buf.data() + start;
      const uint32_t want = detail::Crc32cExtendSoftware(0x1234u, p, n);
      EXPECT_EQ(Crc32cExtend(0x1234u, p, n), want) << "start " << start << " n " << n;
      EXPECT_EQ(detail::Crc32cExtendOneChain(0x1234u, p, n), want) << "start " << start << " n " << n;
    }
  }
}

// Chunk CRCs combined in order equal the one-pass CRC, for many ways of cutting a buffer (the restore path
// checksums each chunk on the thread that read it).
TEST(Crc32cTest, CombineOfChunksEqualsOnePass) {
  SplitMix64 rng(3);
  std::vector<uint8_t> buf(200003);
  for (auto& b : buf) b = static_cast<uint8_t>(rng.Next());
  const uint32_t whole = Crc32c(buf.data(), buf.size());
  EXPECT_EQ(Crc32cCombine(whole, Crc32c(nullptr, 0), 0), whole);
  EXPECT_EQ(Crc32cCombine(0, whole, buf.size()), whole);  // an empty first part
  for (size_t chunk : {size_t{1}, size_t{7}, size_t{4096}, size_t{65536}, size_t{99999}, size_t{200002}}) {
    uint32_t crc = 0;
    for (size_t at = 0; at < buf.size(); at += chunk) {
      const size_t n = std::min(chunk, buf.size() - at);
      crc = Crc32cCombine(crc, Crc32c(buf.data() + at, n), n);
    }
    EXPECT_EQ(crc, whole) << "chunk " << chunk;
  }
  for (int i = 0; i < 200; ++i) {  // random two-way cuts
    const size_t cut = static_cast<size_t>(rng.Next() % (buf.size() + 1));
    EXPECT_EQ(Crc32cCombine(Crc32c(buf.data(), cut), Crc32c(buf.data() + cut, buf.size() - cut), buf.size() - cut),
              whole)
        << "cut " << cut;
  }
  // A length beyond 4 GiB (the shift's exponent table wraps): combining with a CRC over that many zero bytes,
  // built by doubling, equals extending byte-wise would be too slow; check associativity instead.
  const uint64_t big = (uint64_t{5} << 30) + 3;
  const uint32_t a = Crc32c("abc", 3), b = Crc32c("defg", 4);
  EXPECT_EQ(Crc32cCombine(Crc32cCombine(a, b, 4), whole, big), Crc32cCombine(a, Crc32cCombine(b, whole, big), 4 + big));
}

}  // namespace
}  // namespace dtrain
