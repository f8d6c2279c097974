#include "core/sealed_bytes.h"

#include <cstdint>
#include <cstdio>
#include <mutex>
#include <set>

#include "core/crc32c.h"

namespace dtrain {
namespace {

std::string Hex(uint32_t v) {
  char buf[16];
  std::snprintf(buf, sizeof(buf), "%08x", v);
  return buf;
}

// Bits that differ between the first bytes of `bytes` and the magic (a short file counts its missing bytes as 8).
int MagicDistance(const std::string& bytes) {
  int bits = 0;
  for (size_t i = 0; i < sizeof(kSealMagic); ++i) {
    if (i >= bytes.size()) {
      bits += 8;
      continue;
    }
    bits +=
        __builtin_popcount(static_cast<unsigned>(static_cast<uint8_t>(bytes[i]) ^ static_cast<uint8_t>(kSealMagic[i])));
  }
  return bits;
}

}  // namespace

std::string Seal(const std::string& payload) {
  const uint32_t crc = Crc32c(payload.data(), payload.size());
  std::string out(kSealMagic, sizeof(kSealMagic));
  for (int i = 0; i < 4; ++i) out.push_back(static_cast<char>((crc >> (8 * i)) & 0xff));
  out += payload;
  return out;
}

Status Unseal(const std::string& name, const std::string& bytes, std::string* payload, bool* legacy) {
  const int distance = MagicDistance(bytes);
  // A bare protobuf message shares at most a few bits with the magic by chance (its first byte is never 0);
  // a header with one or two flipped bits is damage, not an old file.
  if (distance > 2) {
    *legacy = true;
    *payload = bytes;
    return Status::OK();
  }
  *legacy = false;
  if (distance != 0) return Status::DataLoss(name + ": damaged header (the checksum magic has flipped bits)");
  if (bytes.size() < kSealHeaderBytes) {
    return Status::DataLoss(name + ": cut short (" + std::to_string(bytes.size()) + " bytes, the header alone is " +
                            std::to_string(kSealHeaderBytes) + ")");
  }
  uint32_t want = 0;
  for (int i = 0; i < 4; ++i) want |= static_cast<uint32_t>(static_cast<uint8_t>(bytes[8 + i])) << (8 * i);
  const uint32_t got = Crc32c(bytes.data() + kSealHeaderBytes, bytes.size() - kSealHeaderBytes);
  if (got != want) {
    return Status::DataLoss(name + ": checksum mismatch (CRC32C " + Hex(got) + " of " +
                            std::to_string(bytes.size() - kSealHeaderBytes) + " bytes, the header says " + Hex(want) +
                            "): corrupt or truncated");
  }
  payload->assign(bytes, kSealHeaderBytes, std::string::npos);
  return Status::OK();
}

bool FirstLegacyWarning(const std::string& name) {
  static std::mutex mu;
  static std::set<std::string> warned;
  std::lock_guard<std::mutex> lock(mu);
  return warned.insert(name).second;
}

}  // namespace dtrain
