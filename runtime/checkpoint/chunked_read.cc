#include "runtime/checkpoint/chunked_read.h"

#include <algorithm>
#include <cstdio>

#include "core/check.h"
#include "core/crc32c.h"
#include "core/parallel_for.h"

namespace dtrain::runtime {
namespace {

std::string Hex(uint32_t v) {
  char buf[16];
  std::snprintf(buf, sizeof(buf), "%08x", v);
  return buf;
}

struct Chunk {
  size_t file = 0;
  uint64_t offset = 0;
  uint64_t size = 0;
};

std::string SizeMismatch(const ChunkedFile& f, uint64_t real) {
  return f.key + ": " + std::to_string(real) + " bytes, the manifest says " + std::to_string(f.size);
}

// Reads chunk k into `buf` and checks what the store says of the object's size.
Status ReadChunk(storage::Storage* store, const ChunkedFile& f, const Chunk& k, char* buf) {
  uint64_t got = 0, object_size = 0;
  const Status st = store->GetRangeInto(f.key, k.offset, buf, k.size, &got, &object_size);
  if (st.code() == Status::Code::kNotFound) return Status::DataLoss(f.key + ": missing (listed in the manifest)");
  DT_RETURN_IF_ERROR(st);
  // The object's size at every chunk: one that grew or shrank after the listing is caught wherever it is read.
  if (object_size != f.size) return Status::DataLoss(SizeMismatch(f, object_size));
  if (got != k.size) {
    return Status::DataLoss(f.key + ": " + std::to_string(got) + " bytes at offset " + std::to_string(k.offset) +
                            ", expected " + std::to_string(k.size) + " (the file changed while it was read)");
  }
  return Status::OK();
}

}  // namespace

Status ReadChunked(storage::Storage* store, const std::vector<ChunkedFile>& files, const ChunkedReadOptions& opts,
                   ChunkSink* sink) {
  if (opts.chunk_bytes == 0) return Status::InvalidArgument("ReadChunked: chunk_bytes must be > 0");
  std::vector<Chunk> chunks;
  for (size_t i = 0; i < files.size(); ++i) {
    for (uint64_t at = 0; at < files[i].size; at += opts.chunk_bytes) {
      chunks.push_back({i, at, std::min(opts.chunk_bytes, files[i].size - at)});
    }
  }
  std::vector<uint32_t> crcs(chunks.size(), 0);
  DT_RETURN_IF_ERROR(ParallelFor(chunks.size(), std::max<size_t>(1, opts.threads), [&](size_t c) -> Status {
    const Chunk& k = chunks[c];
    char* buf = nullptr;
    DT_RETURN_IF_ERROR(sink->Acquire(k.file, k.offset, k.size, &buf));
    const Status st = ReadChunk(store, files[k.file], k, buf);
    if (st.ok()) crcs[c] = Crc32c(buf, k.size);  // while the chunk is still in cache
    const Status released = sink->Release(k.file, k.offset, k.size, buf, st.ok());
    return st.ok() ? released : st;
  }));
  // Each file's CRC from its chunks' (in order; a file's chunks are consecutive).
  std::vector<uint32_t> file_crc(files.size(), 0);
  for (size_t c = 0; c < chunks.size(); ++c) {
    uint32_t& crc = file_crc[chunks[c].file];
    crc = Crc32cCombine(crc, crcs[c], chunks[c].size);
  }
  for (size_t i = 0; i < files.size(); ++i) {
    if (file_crc[i] != files[i].crc32c) {
      return Status::DataLoss(files[i].key + ": CRC32C " + Hex(file_crc[i]) + ", the manifest says " +
                              Hex(files[i].crc32c) + " (corrupt data)");
    }
  }
  return Status::OK();
}

}  // namespace dtrain::runtime
