#pragma once
// SHA-256 (FIPS 180-4) and HMAC-SHA256 (RFC 2104), for SigV4 request signing and payload hashes.
// Our own small implementation so that the storage layer needs no crypto library. Not constant-time
// beyond what HMAC needs; do not use for anything but signing and checksums.

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>

namespace dtrain::storage {

using Sha256Digest = std::array<uint8_t, 32>;

// Incremental hasher: Update any number of times, then Final once.
class Sha256 {
 public:
  Sha256();
  void Update(const void* data, size_t size);
  Sha256Digest Final();

 private:
  void Block(const uint8_t* p);
  uint32_t h_[8];
  uint8_t buf_[64];
  size_t buf_len_ = 0;
  uint64_t total_ = 0;
};

Sha256Digest Sha256Of(const void* data, size_t size);
inline Sha256Digest Sha256Of(const std::string& s) { return Sha256Of(s.data(), s.size()); }
Sha256Digest HmacSha256(const void* key, size_t key_size, const void* msg, size_t msg_size);
inline Sha256Digest HmacSha256(const std::string& key, const std::string& msg) {
  return HmacSha256(key.data(), key.size(), msg.data(), msg.size());
}

// Lower-case hex of bytes.
std::string Hex(const uint8_t* data, size_t size);
inline std::string Hex(const Sha256Digest& d) { return Hex(d.data(), d.size()); }
inline std::string Sha256Hex(const void* data, size_t size) { return Hex(Sha256Of(data, size)); }

}  // namespace dtrain::storage
