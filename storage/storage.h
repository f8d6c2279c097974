#pragma once
// Storage: a flat key -> bytes object store behind one small interface, so checkpoints (and the data
// loader's remote shards) work the same on local disk and on S3-compatible object storage.
//
// URLs (Storage::Open), one scheme each (storage/scheme.h: the table, the traits, adding a scheme):
//   file:///abs/dir or /abs/dir or rel/dir   local directory; keys are relative paths below it
//   s3://bucket/prefix                       AWS S3, Alibaba OSS, MinIO, Ceph RGW (storage/s3_storage.h);
//                                            keys are object names below `prefix/`
// An unknown scheme is InvalidArgument naming the URL and the known schemes.
// With DTRAIN_STORAGE_FAULT set, Open wraps the store in a FaultStorage that fails, hangs or truncates
// the calls it selects (storage/fault_storage.h; for tests of failure handling only).
//
// Contract, for every backend:
//   - Put is atomic: a reader sees the whole new object or nothing/the old one, never a torn one
//     (file: write tmp, fsync, rename, fsync dir; s3: single PUT or multipart completed last).
//   - Keys use '/' separators, no leading '/', no "." or ".." segments (InvalidArgument otherwise).
//   - Errors name the URL and key, never credentials. NotFound for a missing key.
//   - Thread-safe: several threads may call any method at once (the async checkpoint writer uploads
//     while the trainer lists).

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/status.h"

namespace dtrain::storage {

struct ObjectInfo {
  std::string key;  // relative to the store's root/prefix
  uint64_t size = 0;
};

// Options that the config or the environment supply (S3 reads AWS_* env vars when these are empty).
struct StorageOptions {
  std::string endpoint;                        // e.g. http://127.0.0.1:7480; empty = AWS default for the region
  std::string region;                          // empty = AWS_REGION / AWS_DEFAULT_REGION / us-east-1
  std::string access_key;                      // empty = AWS_ACCESS_KEY_ID
  std::string secret_key;                      // empty = AWS_SECRET_ACCESS_KEY
  std::string session_token;                   // empty = AWS_SESSION_TOKEN
  bool path_style = true;                      // false = virtual-host addressing (bucket.endpoint)
  uint64_t multipart_threshold = 64ull << 20;  // objects at least this big use multipart upload
  uint64_t part_size = 16ull << 20;            // >= 5 MiB (S3's minimum part size); also GetInto's range size
  int parallel_parts = 8;                      // parts (uploads) or ranges (GetInto) in flight, one connection each
  // S3: sign bodies as x-amz-content-sha256: UNSIGNED-PAYLOAD instead of their SHA-256 (saves hashing ~1 GB/s
  // of CPU per core). The server then checks nothing of the bytes it stores: meant for https endpoints, where
  // TLS protects them in flight; checkpoints keep their CRC32C check on load either way.
  bool unsigned_payload = false;
  // S3 retries (storage/s3_retry.h): on 5xx, 408, 429, throttling codes, timeouts; full-jitter backoff
  // (100 ms base, 20 s cap). Retrying stops after max_retries retries or once retry_budget_s seconds
  // have passed since the call's first attempt, whichever comes first.
  int max_retries = 20;
  double retry_budget_s = 60;  // in [0, 86400]
};

class Storage {
 public:
  virtual ~Storage() = default;

  static Status Open(const std::string& url, const StorageOptions& opts, std::unique_ptr<Storage>* out);

  virtual Status Put(const std::string& key, const void* data, size_t size) = 0;
  virtual Status Get(const std::string& key, std::string* out) = 0;
  // Bytes [offset, offset + size) of the object; fewer at its end.
  virtual Status GetRange(const std::string& key, uint64_t offset, uint64_t size, std::string* out) = 0;
  // Reads the object into `dst` (caller-owned, `size` bytes; no copy through a temporary where the
  // backend can avoid it: s3 fetches parallel ranged GETs straight into it). *object_size gets the
  // object's real size; min(size, *object_size) bytes of dst are written, so the caller, which knows
  // the size to expect, sees a mismatch. NotFound for a missing key. The default reads through Get.
  virtual Status GetInto(const std::string& key, void* dst, uint64_t size, uint64_t* object_size);
  // Reads bytes [offset, offset + size) of the object into `dst` (caller-owned, `size` bytes), fewer at its end:
  // *got gets how many were written, *object_size the object's whole size (so a caller reading a file in chunks
  // on several threads sees a size mismatch at any chunk). NotFound for a missing key. file:// reads what the
  // page cache holds from there and the rest with O_DIRECT when dst and offset are aligned to 4 KiB; s3:// sends
  // one ranged GET written straight into dst. The default goes through Head and GetRange.
  virtual Status GetRangeInto(const std::string& key, uint64_t offset, void* dst, uint64_t size, uint64_t* got,
                              uint64_t* object_size);
  virtual Status Head(const std::string& key, ObjectInfo* out) = 0;
  // Every object whose key starts with `prefix`, sorted by key.
  virtual Status List(const std::string& prefix, std::vector<ObjectInfo>* out) = 0;
  // Deleting a missing key is OK (idempotent).
  virtual Status Delete(const std::string& key) = 0;

  // The URL this store was opened with (for messages).
  virtual const std::string& url() const = 0;
};

}  // namespace dtrain::storage
