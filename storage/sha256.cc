#include "storage/sha256.h"

#include <openssl/evp.h>
#include <openssl/hmac.h>

namespace dtrain::storage {

// EVP_sha256 and HMAC fail only when OpenSSL cannot allocate or its provider is missing; the functions
// here have no error path to report that on (their callers sign requests), so such a failure leaves a
// zero digest, which the server then rejects as a bad signature or checksum rather than crashing here.

void Sha256::CtxDeleter::operator()(EVP_MD_CTX* ctx) const { EVP_MD_CTX_free(ctx); }

Sha256::Sha256() : ctx_(EVP_MD_CTX_new()) {
  if (ctx_ && EVP_DigestInit_ex(ctx_.get(), EVP_sha256(), nullptr) != 1) ctx_.reset();
}

void Sha256::Update(const void* data, size_t size) {
  if (ctx_ && size > 0 && EVP_DigestUpdate(ctx_.get(), data, size) != 1) ctx_.reset();
}

Sha256Digest Sha256::Final() {
  Sha256Digest out{};
  unsigned int len = 0;
  if (ctx_ && (EVP_DigestFinal_ex(ctx_.get(), out.data(), &len) != 1 ||
               EVP_DigestInit_ex(ctx_.get(), EVP_sha256(), nullptr) != 1)) {
    ctx_.reset();
  }
  return out;
}

Sha256Digest Sha256Of(const void* data, size_t size) {
  Sha256Digest out{};
  unsigned int len = 0;
  EVP_Digest(data, size, out.data(), &len, EVP_sha256(), nullptr);
  return out;
}

Sha256Digest HmacSha256(const void* key, size_t key_size, const void* msg, size_t msg_size) {
  Sha256Digest out{};
  unsigned int len = 0;
  // HMAC() with a null key pointer would mean "no key"; an empty key is a valid (zero-length) key.
  // Likewise a null message pointer with size 0 is passed as an empty buffer.
  static const unsigned char kEmpty = 0;
  HMAC(EVP_sha256(), key_size ? key : &kEmpty, static_cast<int>(key_size),
       msg_size ? static_cast<const unsigned char*>(msg) : &kEmpty, msg_size, out.data(), &len);
  return out;
}

std::string Hex(const uint8_t* data, size_t size) {
  static const char kDigits[] = "0123456789abcdef";
  std::string out(2 * size, '0');
  for (size_t i = 0; i < size; ++i) {
    out[2 * i] = kDigits[data[i] >> 4];
    out[2 * i + 1] = kDigits[data[i] & 15];
  }
  return out;
}

}  // namespace dtrain::storage
