// SHA-256 (FIPS 180-2 vectors) and HMAC-SHA256 (RFC 4231 vectors) through storage/sha256.h, which
// wraps OpenSSL's libcrypto.

#include "storage/sha256.h"

#include <gtest/gtest.h>

#include <string>

namespace dtrain::storage {
namespace {

const char kEmptySha[] = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855";

TEST(Sha256Test, Fips180Vectors) {
  EXPECT_EQ(Hex(Sha256Of("abc")), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  EXPECT_EQ(Hex(Sha256Of("")), kEmptySha);
  EXPECT_EQ(Hex(Sha256Of("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq")),
            "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
  const std::string million(1000000, 'a');
  EXPECT_EQ(Hex(Sha256Of(million)), "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
}

TEST(Sha256Test, IncrementalEqualsOneShotAtEverySplit) {
  std::string msg(200, '\0');
  for (size_t i = 0; i < msg.size(); ++i) msg[i] = static_cast<char>(i * 31 + 7);
  const Sha256Digest want = Sha256Of(msg);
  for (size_t split = 0; split <= msg.size(); split += 13) {
    Sha256 h;
    h.Update(msg.data(), split);
    h.Update(msg.data() + split, msg.size() - split);
    EXPECT_EQ(Hex(h.Final()), Hex(want)) << "split " << split;
  }
}

TEST(HmacSha256Test, Rfc4231Vectors) {
  EXPECT_EQ(Hex(HmacSha256(std::string(20, '\x0b'), "Hi There")),
            "b0344c61d8db38535ca8afceaf0bf12b881dc200c9833da726e9376c2e32cff7");
  EXPECT_EQ(Hex(HmacSha256("Jefe", "what do ya want for nothing?")),
            "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843");
  EXPECT_EQ(Hex(HmacSha256(std::string(20, '\xaa'), std::string(50, '\xdd'))),
            "773ea91e36800e46854db8ebd09181a72959098b3ef8c122d9635514ced565fe");
  // Test case 6: a key longer than the block size is hashed first.
  EXPECT_EQ(Hex(HmacSha256(std::string(131, '\xaa'), "Test Using Larger Than Block-Size Key - Hash Key First")),
            "60e431591ee0b67f0d8a26aacbf5b77f8e0bc6213728c5140546040f0ee37f54");
  EXPECT_EQ(Hex(HmacSha256(std::string(131, '\xaa'),
                           "This is a test using a larger than block-size key and a larger than block-size data. "
                           "The key needs to be hashed before being used by the HMAC algorithm.")),
            "9b09ffa71b942fcb27635fbcd5b0e944bfdc63644f0713938a7f51535c3a35e2");
}

TEST(HmacSha256Test, EmptyKeyAndEmptyMessage) {
  EXPECT_EQ(Hex(HmacSha256("", "")), "b613679a0814d9ec772f95d778c35fc5ff1697c493715653c6c712144292c5ad");
  EXPECT_EQ(Hex(HmacSha256(nullptr, 0, nullptr, 0)), Hex(HmacSha256("", "")));
  EXPECT_EQ(Sha256Hex(nullptr, 0), kEmptySha);
}

TEST(Sha256Test, FinalStartsTheNextHash) {
  Sha256 h;
  h.Update("abc", 3);
  EXPECT_EQ(Hex(h.Final()), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  EXPECT_EQ(Hex(h.Final()), kEmptySha);
  h.Update("abc", 3);
  EXPECT_EQ(Hex(h.Final()), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
}

}  // namespace
}  // namespace dtrain::storage
