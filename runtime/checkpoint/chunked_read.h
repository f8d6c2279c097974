#pragma once
// ReadChunked: the read half of a checkpoint restore. Every file is cut into chunks of `chunk_bytes`; the chunks of
// all files (file by file, in order) go to a few threads, each asking the ChunkSink where the chunk goes, reading it
// straight there (Storage::GetRangeInto: on a local disk the cached part from the page cache, the rest with O_DIRECT;
// on S3 one ranged GET) and computing its CRC32C right after, while the bytes are still in the CPU's cache. The chunk
// is then handed back to the sink (the trainer's copies it on to the device while later chunks are read). When every
// chunk is in, the chunk CRCs are combined (Crc32cCombine) into each file's and compared with the expected one.
//
// Errors (the first by chunk order, so the message does not depend on thread timing), every one naming the key:
//   DataLoss  the object is shorter or longer than `size` (at any chunk), or the file's CRC32C differs
//   NotFound  of the store becomes DataLoss "missing"; other store errors pass through (a network failure is not
//             evidence of a bad checkpoint)
// After an error, chunks already handed back filled must be treated as void.
// Thread-safety: the sink is called on the reader threads, concurrently for different chunks.

#include <cstdint>
#include <string>
#include <vector>

#include "core/status.h"
#include "storage/storage.h"

namespace dtrain::runtime {

struct ChunkedFile {
  std::string key;      // the object, relative to the store
  uint64_t size = 0;    // bytes expected
  uint32_t crc32c = 0;  // CRC32C expected over the whole object
};

struct ChunkedReadOptions {
  uint64_t chunk_bytes = 16ull << 20;  // > 0; a multiple of 4 KiB keeps O_DIRECT possible for every chunk
  size_t threads = 4;                  // reader threads (the caller's among them)
};

// Where the chunks go. Both calls come from the reader threads, concurrently for different chunks.
class ChunkSink {
 public:
  virtual ~ChunkSink() = default;
  // The buffer that bytes [offset, offset + size) of files[file] are read into: `size` bytes at *out, not touched
  // by others until Release (4 KiB-aligned lets a local disk read straight into it). An error ends the read.
  virtual Status Acquire(size_t file, uint64_t offset, uint64_t size, char** out) = 0;
  // Once after every Acquire that succeeded, with its buffer: `filled` when the chunk's bytes are in it and their
  // CRC32C is computed (compared with the file's only once the whole file is in), false when its read failed.
  virtual Status Release(size_t file, uint64_t offset, uint64_t size, char* buf, bool filled) = 0;
};

Status ReadChunked(storage::Storage* store, const std::vector<ChunkedFile>& files, const ChunkedReadOptions& opts,
                   ChunkSink* sink);

}  // namespace dtrain::runtime
