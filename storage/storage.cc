#include "storage/storage.h"

#include <algorithm>
#include <cstring>

#include "core/check.h"
#include "storage/fault_storage.h"
#include "storage/scheme.h"

namespace dtrain::storage {

Status Storage::Open(const std::string& url, const StorageOptions& opts, std::unique_ptr<Storage>* out) {
  const Scheme* scheme = nullptr;
  DT_RETURN_IF_ERROR(FindScheme(url, &scheme));
  std::unique_ptr<Storage> store;
  DT_RETURN_IF_ERROR(scheme->open(url, opts, &store));
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
