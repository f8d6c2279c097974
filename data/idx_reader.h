#pragma once
// ReadIdx: loads an IDX file (the MNIST / Fashion-MNIST container) of unsigned bytes.
//
// Format: a 4-byte magic 0x00 0x00 0x08 <ndims> (0x08 = unsigned byte; 0x00000801 is a 1-D label
// vector, 0x00000803 a 3-D image stack), then <ndims> big-endian uint32 dims, then exactly
// prod(dims) payload bytes. The file may be gzip-compressed; this is detected from its first two bytes
// (1f 8b), not from the file name.
//
// Errors (each message names the file):
//   NotFound  the file does not exist (the message says which Debian package provides Fashion-MNIST).
//   IoError   the file exists but cannot be opened or read.
//   DataLoss  bad magic, a header whose payload would exceed kMaxIdxPayloadBytes, a payload shorter or
//             longer than prod(dims) (with expected vs got byte counts), a truncated or corrupt gzip
//             stream (CRC and length are checked by zlib), or bytes after the gzip stream.
// Thread-safe: no shared state; concurrent calls on different outputs are fine.

#include <cstdint>
#include <string>
#include <vector>

#include "core/status.h"

namespace dtrain::data {

// Largest payload ReadIdx allocates (1 GiB): a corrupt header cannot request more than this.
inline constexpr int64_t kMaxIdxPayloadBytes = int64_t{1} << 30;

// One decoded IDX array, row-major.
struct IdxArray {
  std::vector<int64_t> dims;  // 1 to 4 dims, from the header
  std::vector<uint8_t> data;  // exactly prod(dims) bytes
};

// Reads `path` (plain or gzip) into *out. On error *out is left empty.
Status ReadIdx(const std::string& path, IdxArray* out);

}  // namespace dtrain::data
