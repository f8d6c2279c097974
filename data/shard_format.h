#pragma once
// Constants and byte-level helpers of the shard file format (docs/data_format.md), shared by
// data/shard_writer.cc and data/shard_reader.cc. All integers are little-endian.
//
//   0   char[8]  magic "DTSHARD1"
//   8   u32      version (kShardVersion)
//   12  u32      header CRC32C: over bytes [0, 12) followed by [16, 32 + 16 * N) (this field skipped)
//   16  u64      N, the number of records
//   24  u64      reserved, 0
//   32  N x {u64 offset, u32 length, u32 crc32c}   record i lies at [offset, offset + length)
//   32 + 16 N    the records, back to back in index order

#include <cstdint>
#include <cstring>

namespace dtrain::data::shard {

inline constexpr char kMagic[8] = {'D', 'T', 'S', 'H', 'A', 'R', 'D', '1'};
inline constexpr uint32_t kShardVersion = 1;
inline constexpr uint64_t kHeaderBytes = 32;
inline constexpr uint64_t kEntryBytes = 16;
// Largest record a reader accepts (a corrupt table cannot make it allocate more).
inline constexpr uint64_t kMaxRecordBytes = uint64_t{1} << 30;

inline void Put32(uint8_t* p, uint32_t v) { std::memcpy(p, &v, 4); }  // little-endian hosts only
inline void Put64(uint8_t* p, uint64_t v) { std::memcpy(p, &v, 8); }
inline uint32_t Get32(const uint8_t* p) {
  uint32_t v;
  std::memcpy(&v, p, 4);
  return v;
}
inline uint64_t Get64(const uint8_t* p) {
  uint64_t v;
  std::memcpy(&v, p, 8);
  return v;
}

}  // namespace dtrain::data::shard
