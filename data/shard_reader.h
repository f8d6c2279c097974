#pragma once
// ShardReader: random access to the records of one shard file (format: data/shard_format.h,
// docs/data_format.md) through pread, so that any number of threads read one open file without a
// shared file position, and the kernel's page cache serves repeated reads.
//
// Open() reads and checks the header and offset table: magic, version (a newer one is rejected),
// the header CRC32C, and that every record lies inside the file. Read() checks each record's CRC32C.
// Every error is DataLoss (or NotFound / IoError) and its message starts with the file's path.
// Thread-safe: all methods are const after Open().

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/status.h"

namespace dtrain::data {

class ShardReader {
 public:
  // NotFound when the file is missing; DataLoss for a wrong magic, a newer version, a header CRC
  // mismatch, a file shorter than its table says (truncated), or a record outside the file.
  static Status Open(const std::string& path, std::unique_ptr<ShardReader>* out);
  ~ShardReader();
  ShardReader(const ShardReader&) = delete;
  ShardReader& operator=(const ShardReader&) = delete;

  int64_t num_records() const { return static_cast<int64_t>(entries_.size()); }
  uint64_t file_size() const { return file_size_; }
  const std::string& path() const { return path_; }
  // Bytes of record i (0 <= i < num_records()).
  size_t record_size(int64_t i) const { return entries_[i].length; }

  // Reads record i into buf (which holds `cap` >= record_size(i) bytes) and checks its CRC32C.
  // InvalidArgument for a bad i or a short buffer; DataLoss for a short read (the file shrank
  // since Open) or a CRC mismatch; IoError when pread fails.
  Status Read(int64_t i, void* buf, size_t cap) const;
  Status Read(int64_t i, std::vector<uint8_t>* out) const;

 private:
  struct Entry {
    uint64_t offset;
    uint32_t length;
    uint32_t crc32c;
  };
  ShardReader() = default;

  std::string path_;
  int fd_ = -1;
  uint64_t file_size_ = 0;
  std::vector<Entry> entries_;
};

}  // namespace dtrain::data
