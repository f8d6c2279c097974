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
// The hardware path runs three independent crc32 chains over three blocks at once (the instruction's latency
// is three cycles, its throughput one per cycle) and joins them with Crc32cCombine.
uint32_t Crc32cExtend(uint32_t crc, const void* data, size_t n);

// The CRC of a concatenation from the CRCs of its parts: Crc32cCombine(Crc32c(a), Crc32c(b), len(b)) ==
// Crc32c(a + b), in O(log len(b)) steps (GF(2) polynomial arithmetic, as zlib's crc32_combine). Lets chunks of
// a file be checksummed on different threads, each right after it is read, and the file's CRC be put together.
uint32_t Crc32cCombine(uint32_t crc_a, uint32_t crc_b, uint64_t len_b);

namespace detail {
// The table-driven path alone (for tests comparing it with the hardware path).
uint32_t Crc32cExtendSoftware(uint32_t crc, const void* data, size_t n);
// The hardware path with one crc32 chain (the reference for the interleaved one; tests and benchmarks). Falls back
// to the software path on a CPU without SSE4.2.
uint32_t Crc32cExtendOneChain(uint32_t crc, const void* data, size_t n);
}  // namespace detail

}  // namespace dtrain
