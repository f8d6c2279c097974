#pragma once
// Big-endian integer encoding for the TCP rendezvous and TcpCommunicator frames (comm/tcp_*.cc).
// Header-only helpers; pure functions.

#include <cstddef>
#include <cstdint>

namespace dtrain::comm::detail {

inline void PutU32(uint32_t v, unsigned char* p) {
  for (int i = 0; i < 4; ++i) p[i] = static_cast<unsigned char>(v >> (24 - 8 * i));
}
inline uint32_t GetU32(const unsigned char* p) {
  uint32_t v = 0;
  for (int i = 0; i < 4; ++i) v = (v << 8) | p[i];
  return v;
}
inline void PutU64(uint64_t v, unsigned char* p) {
  PutU32(static_cast<uint32_t>(v >> 32), p);
  PutU32(static_cast<uint32_t>(v), p + 4);
}
inline uint64_t GetU64(const unsigned char* p) { return (static_cast<uint64_t>(GetU32(p)) << 32) | GetU32(p + 4); }

}  // namespace dtrain::comm::detail
