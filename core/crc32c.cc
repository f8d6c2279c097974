#include "core/crc32c.h"

#include <array>
#include <cstring>

namespace dtrain {
namespace {

constexpr uint32_t kPoly = 0x82F63B78u;  // reflected Castagnoli polynomial

struct Tables {
  std::array<std::array<uint32_t, 256>, 8> t{};
  Tables() {
    for (uint32_t i = 0; i < 256; ++i) {
      uint32_t c = i;
      for (int k = 0; k < 8; ++k) c = (c >> 1) ^ ((c & 1u) ? kPoly : 0u);
      t[0][i] = c;
    }
    for (int s = 1; s < 8; ++s) {
      for (uint32_t i = 0; i < 256; ++i) t[s][i] = (t[s - 1][i] >> 8) ^ t[0][t[s - 1][i] & 0xFFu];
    }
  }
};

const Tables& GetTables() {
  static const Tables tables;  // built once; immutable afterwards
  return tables;
}

// --- GF(2) arithmetic modulo the polynomial, in the reflected bit order (bit 31 is x^0), as zlib's crc32.c.

// a * b mod P.
uint32_t MultModP(uint32_t a, uint32_t b) {
  uint32_t m = 1u << 31, p = 0;
  for (;;) {
    if (a & m) {
      p ^= b;
      if ((a & (m - 1)) == 0) break;
    }
    m >>= 1;
    b = (b & 1u) ? (b >> 1) ^ kPoly : b >> 1;
  }
  return p;
}

// x^(2^k) mod P for k in [0, 32): squaring the previous one.
struct PowerTable {
  std::array<uint32_t, 32> x2n{};
  PowerTable() {
    uint32_t p = 1u << 30;  // x^1
    x2n[0] = p;
    for (int k = 1; k < 32; ++k) x2n[k] = p = MultModP(p, p);
  }
};

// x^(8 * n) mod P: the factor that moves a CRC past n zero bytes.
uint32_t XPow8n(uint64_t n) {
  static const PowerTable table;
  uint32_t p = 1u << 31;  // x^0
  for (unsigned k = 3; n != 0; n >>= 1, ++k) {
    if (n & 1u) p = MultModP(table.x2n[k & 31], p);
  }
  return p;
}

#if defined(__x86_64__)
// Blocks of the interleaved loop: three chains of kBlock bytes each per round. The join after a round moves a CRC
// past kBlock bytes: a multiplication by a constant, linear in the CRC's bits, so four byte tables do it.
constexpr size_t kBlock = 8192;

struct ShiftTable {
  std::array<std::array<uint32_t, 256>, 4> t{};
  ShiftTable() {
    const uint32_t k = XPow8n(kBlock);
    for (int j = 0; j < 4; ++j) {
      for (uint32_t b = 0; b < 256; ++b) t[j][b] = MultModP(k, b << (8 * j));
    }
  }
  uint32_t Shift(uint32_t c) const {
    return t[0][c & 0xFF] ^ t[1][(c >> 8) & 0xFF] ^ t[2][(c >> 16) & 0xFF] ^ t[3][c >> 24];
  }
};

const ShiftTable& GetShiftTable() {
  static const ShiftTable table;  // built once; immutable afterwards
  return table;
}

// One crc32 chain over p[0, n) on the raw register (no inversions).
__attribute__((target("sse4.2"))) uint64_t Chain(uint64_t c, const uint8_t* p, size_t n) {
  while (n >= 8) {
    uint64_t v;
    std::memcpy(&v, p, 8);
    c = __builtin_ia32_crc32di(c, v);
    p += 8;
    n -= 8;
  }
  uint32_t c32 = static_cast<uint32_t>(c);
  while (n-- > 0) c32 = __builtin_ia32_crc32qi(c32, *p++);
  return c32;
}

__attribute__((target("sse4.2"))) uint32_t ExtendOneChain(uint32_t crc, const uint8_t* p, size_t n) {
  return ~static_cast<uint32_t>(Chain(~crc, p, n));
}

// Three chains at once over consecutive blocks a, b, c; their CRCs joined: crc(abc) = shift(shift(a) ^ b) ^ c.
__attribute__((target("sse4.2"))) uint32_t ExtendHardware(uint32_t crc, const uint8_t* p, size_t n) {
  if (n >= 3 * kBlock) {
    const ShiftTable& shift = GetShiftTable();
    do {
      uint64_t c0 = ~crc, c1 = 0xFFFFFFFFu, c2 = 0xFFFFFFFFu;
      const uint8_t* a = p;
      const uint8_t* b = p + kBlock;
      const uint8_t* c = p + 2 * kBlock;
      for (size_t i = 0; i < kBlock; i += 8) {
        uint64_t va, vb, vc;
        std::memcpy(&va, a + i, 8);
        std::memcpy(&vb, b + i, 8);
        std::memcpy(&vc, c + i, 8);
        c0 = __builtin_ia32_crc32di(c0, va);
        c1 = __builtin_ia32_crc32di(c1, vb);
        c2 = __builtin_ia32_crc32di(c2, vc);
      }
      const uint32_t ab = shift.Shift(~static_cast<uint32_t>(c0)) ^ ~static_cast<uint32_t>(c1);
      crc = shift.Shift(ab) ^ ~static_cast<uint32_t>(c2);
      p += 3 * kBlock;
      n -= 3 * kBlock;
    } while (n >= 3 * kBlock);
  }
  return ExtendOneChain(crc, p, n);
}

bool HaveSse42() {
  static const bool have = __builtin_cpu_supports("sse4.2");
  return have;
}
#endif

}  // namespace

namespace detail {
uint32_t Crc32cExtendSoftware(uint32_t crc, const void* data, size_t n) {
  const auto& t = GetTables().t;
  const auto* p = static_cast<const uint8_t*>(data);
  uint32_t c = ~crc;
  while (n >= 8) {  // slicing-by-8: one table lookup per byte, eight bytes per iteration
    uint32_t lo, hi;
    std::memcpy(&lo, p, 4);
    std::memcpy(&hi, p + 4, 4);
    lo ^= c;  // little-endian hosts only (x86-64, aarch64)
    c = t[7][lo & 0xFF] ^ t[6][(lo >> 8) & 0xFF] ^ t[5][(lo >> 16) & 0xFF] ^ t[4][lo >> 24] ^ t[3][hi & 0xFF] ^
        t[2][(hi >> 8) & 0xFF] ^ t[1][(hi >> 16) & 0xFF] ^ t[0][hi >> 24];
    p += 8;
    n -= 8;
  }
  while (n-- > 0) c = (c >> 8) ^ t[0][(c ^ *p++) & 0xFF];
  return ~c;
}
}  // namespace detail

uint32_t Crc32cExtend(uint32_t crc, const void* data, size_t n) {
#if defined(__x86_64__)
  if (HaveSse42()) return ExtendHardware(crc, static_cast<const uint8_t*>(data), n);
#endif
  return detail::Crc32cExtendSoftware(crc, data, n);
}

uint32_t Crc32c(const void* data, size_t n) { return Crc32cExtend(0, data, n); }

uint32_t Crc32cCombine(uint32_t crc_a, uint32_t crc_b, uint64_t len_b) {
  return MultModP(XPow8n(len_b), crc_a) ^ crc_b;
}

namespace detail {
uint32_t Crc32cExtendOneChain(uint32_t crc, const void* data, size_t n) {
#if defined(__x86_64__)
  if (HaveSse42()) return ExtendOneChain(crc, static_cast<const uint8_t*>(data), n);
#endif
  return Crc32cExtendSoftware(crc, data, n);
}
}  // namespace detail

}  // namespace dtrain
