#include "core/crc32c.h"

#include <gtest/gtest.h>

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

}  // namespace
}  // namespace dtrain
