#pragma once
// FileStorage: the file:// backend of storage::Storage — keys are relative paths below a root directory.
//
// Put writes `<path>.tmp.<pid>.<n>` next to the target in 64 MiB writes, asking the kernel to start writing
// each back at once (sync_file_range), so the disk works while later chunks are copied and the closing fsync
// waits for the tail only; then it fsyncs the file, renames it over the target and fsyncs the directory, so a reader
// (or a crash) sees the old object or the whole new one. Parent directories are created as needed. Names of the form
// `*.tmp.<digits>.<digits>` are reserved for those temporaries: List skips them and Put/Get reject them as keys.
// Thread-safe: no mutable state besides an atomic counter for temporary names.

#include <atomic>
#include <memory>
#include <string>
#include <vector>

#include "storage/scheme.h"
#include "storage/storage.h"

namespace dtrain::storage {

class FileStorage : public Storage {
 public:
  // `root` is an absolute or relative directory (created if missing); `url` is kept for messages.
  static Status Open(const std::string& root, const std::string& url, std::unique_ptr<Storage>* out);

  Status Put(const std::string& key, const void* data, size_t size) override;
  Status Get(const std::string& key, std::string* out) override;
  Status GetRange(const std::string& key, uint64_t offset, uint64_t size, std::string* out) override;
  Status GetInto(const std::string& key, void* dst, uint64_t size, uint64_t* object_size) override;
  // What the page cache holds of the range is copied from it (found with mincore: no disk I/O); the rest is read
  // with O_DIRECT where dst and the offset are 4 KiB-aligned (the disk writes into dst, no page-cache copy, and
  // the cache is not filled with bytes read once), else (or when the file system refuses O_DIRECT) with pread.
  Status GetRangeInto(const std::string& key, uint64_t offset, void* dst, uint64_t size, uint64_t* got,
                      uint64_t* object_size) override;
  Status Head(const std::string& key, ObjectInfo* out) override;
  Status List(const std::string& prefix, std::vector<ObjectInfo>* out) override;
  Status Delete(const std::string& key) override;
  const std::string& url() const override { return url_; }

 private:
  FileStorage(std::string root, std::string url) : root_(std::move(root)), url_(std::move(url)) {}
  Status CheckKey(const std::string& key) const;
  Status Error(const std::string& key, const std::string& what, int err) const;
  // Reads [offset, offset + size) (clamped to the file's end) into *out.
  Status ReadRange(const std::string& key, uint64_t offset, uint64_t size, std::string* out);
  // Opens `key` for reading; *fd and *size (the file's) on success.
  Status OpenForRead(const std::string& key, int* fd, uint64_t* size) const;
  // Reads n bytes at offset of the open `fd` into dst.
  Status PreadAll(const std::string& key, int fd, char* dst, uint64_t n, uint64_t offset) const;

  const std::string root_;  // no trailing '/'
  const std::string url_;
  std::atomic<uint64_t> tmp_counter_{0};
};

// The file scheme: file:///abs/dir or a plain path (absolute or relative); local, no owner object.
extern const Scheme kFileScheme;

}  // namespace dtrain::storage
