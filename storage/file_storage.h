#pragma once
// FileStorage: the file:// backend of storage::Storage — keys are relative paths below a root directory.
//
// Put writes `<path>.tmp.<pid>.<n>` next to the target, fsyncs it, renames it over the target and
// fsyncs the directory, so a reader (or a crash) sees the old object or the whole new one. Parent
// directories are created as needed. Names of the form `*.tmp.<digits>.<digits>` are reserved for
// those temporaries: List skips them and Put/Get reject them as keys.
// Thread-safe: no mutable state besides an atomic counter for temporary names.

#include <atomic>
#include <memory>
#include <string>
#include <vector>

#include "storage/storage.h"

namespace dtrain::storage {

class FileStorage : public Storage {
 public:
  // `root` is an absolute or relative directory (created if missing); `url` is kept for messages.
  static Status Open(const std::string& root, const std::string& url, std::unique_ptr<Storage>* out);

  Status Put(const std::string& key, const void* data, size_t size) override;
  Status Get(const std::string& key, std::string* out) override;
  Status GetRange(const std::string& key, uint64_t offset, uint64_t size, std::string* out) override;
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

  const std::string root_;  // no trailing '/'
  const std::string url_;
  std::atomic<uint64_t> tmp_counter_{0};
};

}  // namespace dtrain::storage
