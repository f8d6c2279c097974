// Seal/Unseal (core/sealed_bytes.h): round trip, every single-bit flip and every cut is DataLoss
// naming the file, a bare (pre-seal) payload reads as legacy.

#include "core/sealed_bytes.h"

#include <gtest/gtest.h>

#include <string>

namespace dtrain {
namespace {

TEST(SealedBytes, RoundTripAndLayout) {
  const std::string payload = "\x08\x01\x10\x07 a manifest";
  const std::string sealed = Seal(payload);
  ASSERT_EQ(sealed.size(), payload.size() + kSealHeaderBytes);
  EXPECT_EQ(sealed.substr(0, 8), std::string(kSealMagic, 8));
  std::string out;
  bool legacy = true;
  ASSERT_TRUE(Unseal("m.pb", sealed, &out, &legacy).ok());
  EXPECT_FALSE(legacy);
  EXPECT_EQ(out, payload);
  // An empty payload seals too (CRC32C of nothing is 0).
  ASSERT_TRUE(Unseal("m.pb", Seal(""), &out, &legacy).ok());
  EXPECT_EQ(out, "");
  EXPECT_FALSE(legacy);
}

TEST(SealedBytes, EveryBitFlipIsDataLossNamingTheFile) {
  const std::string sealed = Seal("\x08\x01\x10\x07\x1a\x05hello");
  for (size_t i = 0; i < sealed.size(); ++i) {
    for (int b = 0; b < 8; ++b) {
      std::string bad = sealed;
      bad[i] = static_cast<char>(bad[i] ^ (1 << b));
      std::string out;
      bool legacy = false;
      const Status st = Unseal("dir/manifest.pb", bad, &out, &legacy);
      ASSERT_EQ(st.code(), Status::Code::kDataLoss) << "byte " << i << " bit " << b;
      EXPECT_NE(st.message().find("dir/manifest.pb"), std::string::npos) << st.message();
    }
  }
}

TEST(SealedBytes, EveryCutIsDataLoss) {
  const std::string sealed = Seal("\x08\x01\x10\x07\x1a\x05hello");
  for (size_t n = 8; n < sealed.size(); ++n) {
    std::string out;
    bool legacy = false;
    EXPECT_EQ(Unseal("m.pb", sealed.substr(0, n), &out, &legacy).code(), Status::Code::kDataLoss) << n;
  }
}

TEST(SealedBytes, BarePayloadIsLegacy) {
  const std::string bare = "\x08\x01\x10\x07\x1a\x05hello";  // a protobuf message never starts with byte 0
  std::string out;
  bool legacy = false;
  ASSERT_TRUE(Unseal("m.pb", bare, &out, &legacy).ok());
  EXPECT_TRUE(legacy);
  EXPECT_EQ(out, bare);
}

}  // namespace
}  // namespace dtrain
