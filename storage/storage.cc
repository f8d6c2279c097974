#include "storage/storage.h"

#include <algorithm>
#include <cstring>

#include "core/check.h"
#include "storage/fault_storage.h"
#include "storage/file_storage.h"
#include "storage/s3_storage.h"

namespace dtrain::storage {
namespace {

Status OpenBackend(const std::string& url, const StorageOptions& opts, std::unique_ptr<Storage>* out) {
  static const std::string kFile = "file://";
  static const std::string kS3 = "s3://";
  if (url.compare(0, kS3.size(), kS3) == 0) return S3Storage::Open(url, opts, out);
  if (url.compare(0, kFile.size(), kFile) == 0) {
    const std::string path = url.substr(kFile.size());
    if (path.empty() || path[0] != '/') {
      return Status::InvalidArgument("storage URL '" + url + "': file:// needs an absolute path (file:///abs/dir)");
    }
    return FileStorage::Open(path, url, out);
  }
  if (url.find("://") != std::string::npos) {
    return Status::InvalidArgument("storage URL '" + url + "': unknown scheme (file:// or s3://)");
  }
  return FileStorage::Open(url, url, out);
}

}  // namespace

Status Storage::Open(const std::string& url, const StorageOptions& opts, std::unique_ptr<Storage>* out) {
  std::unique_ptr<Storage> store;
  DT_RETURN_IF_ERROR(OpenBackend(url, opts, &store));
  // Tests of failure handling: DTRAIN_STORAGE_FAULT wraps the store (storage/fault_storage.h).
  DT_RETURN_IF_ERROR(FaultStorage::WrapFromEnv(&store));
  *out = std::move(store);
  return Status::OK();
}

Status Storage::GetInto(const std::string& key, void* dst, uint64_t size, uint64_t* object_size) {
  std::string bytes;
  DT_RETURN_IF_ERROR(Get(key, &bytes));
  *object_size = bytes.size();
  std::memcpy(dst, bytes.data(), std::min<uint64_t>(size, bytes.size()));
  return Status::OK();
}

Status Storage::GetRangeInto(const std::string& key, uint64_t offset, void* dst, uint64_t size, uint64_t* got,
                             uint64_t* object_size) {
  ObjectInfo info;
  DT_RETURN_IF_ERROR(Head(key, &info));
  *object_size = info.size;
  std::string bytes;
  if (size > 0 && offset < info.size) DT_RETURN_IF_ERROR(GetRange(key, offset, size, &bytes));
  *got = std::min<uint64_t>(size, bytes.size());
  std::memcpy(dst, bytes.data(), *got);
  return Status::OK();
}

}  // namespace dtrain::storage
