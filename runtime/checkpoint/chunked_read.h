#pragma once
// ReadChunked: the read half of a checkpoint restore. Every file is cut into chunks of `chunk_bytes`; the chunks of
// all files (file by file, in order) go to a few threads, each reading one chunk straight into the file's buffer
// (Storage::GetRangeInto: on a local disk the cached part from the page cache, the rest with O_DIRECT; on S3 one
// ranged GET) and computing its CRC32C right after, while the bytes are still in the CPU's cache. Each chunk is
// then handed to `on_chunk` (the trainer copies it on to the device while later chunks are read). When every chunk
// is in, the chunk CRCs are combined (Crc32cCombine) into each file's and compared with the expected one.
//
// Errors (the first by chunk order, so the message does not depend on thread timing), every one naming the key:
//   DataLoss  the object is shorter or longer than `size` (at any chunk), or the file's CRC32C differs
//   NotFound  of the store becomes DataLoss "missing"; other store errors pass through (a network failure is not
//             evidence of a bad checkpoint)
// After an error the buffers hold partial data and chunks already handed to on_chunk must be treated as void.
// Thread-safety: on_chunk runs on the reader threads, concurrently for different chunks; the buffers must not be
// touched by others until ReadChunked returns.

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "core/status.h"
#include "storage/storage.h"

namespace dtrain::runtime {

struct ChunkedFile {
  std::string key;      // the object, relative to the store
  uint64_t size = 0;    // bytes expected
  uint32_t crc32c = 0;  // CRC32C expected over the whole object
  char* dst = nullptr;  // `size` bytes; 4 KiB-aligned lets a local disk read straight into it
};

struct ChunkedReadOptions {
  uint64_t chunk_bytes = 16ull << 20;  // > 0; a multiple of 4 KiB keeps O_DIRECT possible for every chunk
  size_t threads = 4;                  // reader threads (the caller's among them)
};

// Called once per chunk: bytes [offset, offset + size) of files[file] are in its buffer and checksummed.
using ChunkFn = std::function<Status(size_t file, uint64_t offset, uint64_t size)>;

Status ReadChunked(storage::Storage* store, const std::vector<ChunkedFile>& files, const ChunkedReadOptions& opts,
                   const ChunkFn& on_chunk);

}  // namespace dtrain::runtime
