#pragma once
// CRC32C (Castagnoli, reflected polynomial 0x82F63B78), the checksum of iSCSI, ext4, LevelDB and S3.
// Crc32c("123456789") == 0xE3069283. Uses the SSE4.2 crc32 instruction when the CPU has it, else
// a slicing-by-8 table; both give the same value. Thread-safe (the tables are built once, statically).

#include <cstddef>
#include <cstdint>

namespace dtrain {

// CRC32C of data[0, n).
uint32_t Crc32c(const void* data, size_t n);

// Continues a CRC: Crc32cExtend(Crc32c(a), b) == Crc32c(a + b). Crc32cExtend(0, x) == Crc32c(x).
uint32_t Crc32cExtend(uint32_t crc, const void* data, size_t n);

namespace detail {
// The table-driven path alone (for tests comparing it with the hardware path).
uint32_t Crc32cExtendSoftware(uint32_t crc, const void* data, size_t n);
}  // namespace detail

}  // namespace dtrain
