#pragma once
// SHA-256 (FIPS 180-4) and HMAC-SHA256 (RFC 2104), for SigV4 request signing and payload hashes.
// A thin layer over OpenSSL's libcrypto (EVP_sha256, HMAC); this header keeps the storage layer's
// callers free of OpenSSL types. All functions are thread-safe; a Sha256 object is not.

#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

typedef struct evp_md_ctx_st EVP_MD_CTX;

namespace dtrain::storage {

using Sha256Digest = std::array<uint8_t, 32>;

// Incremental hasher: Update any number of times, then Final, which also starts the next hash (of
// the empty input). Move-only; owns its OpenSSL context.
class Sha256 {
 public:
  Sha256();
  void Update(const void* data, size_t size);
  Sha256Digest Final();

 private:
  struct CtxDeleter {
    void operator()(EVP_MD_CTX* ctx) const;
  };
  std::unique_ptr<EVP_MD_CTX, CtxDeleter> ctx_;
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
