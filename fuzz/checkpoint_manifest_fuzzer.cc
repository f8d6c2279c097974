// Fuzzes the checkpoint manifest reader (CheckpointManager::Load, runtime/checkpoint/checkpoint.h) over an
// in-memory store that enforces the Storage key contract (storage/key_util.h).
// The input is step-00000007/manifest.pb as stored (sealed or bare, core/sealed_bytes.h), or 'S' + a bare
// manifest that is sealed here first (so mutations reach the parser behind a valid checksum); beside it lie
// params.bin (16 bytes) and opt.bin (empty), so mutations of a real manifest reach the size and CRC32C checks.
// Properties: Load returns a Status (no crash, leak or hang); what it accepts has step 7 and exactly the
// listed files, each matching its size and CRC32C; and a sealed manifest that loads no longer loads after any
// one of its bits is flipped (DataLoss).

#include <google/protobuf/stubs/logging.h>

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/check.h"
#include "core/crc32c.h"
#include "core/sealed_bytes.h"
#include "fuzz/fuzz_util.h"
#include "runtime/checkpoint/checkpoint.h"
#include "storage/key_util.h"

namespace {

using dtrain::Status;
using dtrain::storage::ObjectInfo;

constexpr int64_t kStep = 7;

class MemStorage : public dtrain::storage::Storage {
 public:
  Status Put(const std::string& key, const void* data, size_t size) override {
    DT_RETURN_IF_ERROR(dtrain::storage::detail::ValidateKey(url_, key));
    objects_[key].assign(static_cast<const char*>(data), size);
    return Status::OK();
  }
  Status Get(const std::string& key, std::string* out) override {
    DT_RETURN_IF_ERROR(dtrain::storage::detail::ValidateKey(url_, key));
    const auto it = objects_.find(key);
    if (it == objects_.end()) return Status::NotFound(url_ + "/" + key);
    *out = it->second;
    return Status::OK();
  }
  Status GetRange(const std::string& key, uint64_t offset, uint64_t size, std::string* out) override {
    DT_RETURN_IF_ERROR(Get(key, out));
    *out = offset < out->size() ? out->substr(offset, size) : std::string();
    return Status::OK();
  }
  Status Head(const std::string& key, ObjectInfo* out) override {
    std::string data;
    DT_RETURN_IF_ERROR(Get(key, &data));
    *out = {key, data.size()};
    return Status::OK();
  }
  Status List(const std::string& prefix, std::vector<ObjectInfo>* out) override {
    DT_RETURN_IF_ERROR(dtrain::storage::detail::ValidatePrefix(url_, prefix));
    out->clear();
    for (const auto& [key, data] : objects_) {
      if (key.compare(0, prefix.size(), prefix) == 0) out->push_back({key, data.size()});
    }
    return Status::OK();
  }
  Status Delete(const std::string& key) override {
    DT_RETURN_IF_ERROR(dtrain::storage::detail::ValidateKey(url_, key));
    objects_.erase(key);
    return Status::OK();
  }
  const std::string& url() const override { return url_; }

 private:
  std::string url_ = "mem://fuzz";
  std::map<std::string, std::string> objects_;
};

}  // namespace

// Protobuf logs every malformed string it meets; the parser's Status is what is checked here.
extern "C" int LLVMFuzzerInitialize(int*, char***) {
  google::protobuf::SetLogHandler(nullptr);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* bytes, size_t size) {
  auto store = std::make_unique<MemStorage>();
  const std::string dir = dtrain::runtime::CheckpointManager::StepDir(kStep);
  const std::string params = "0123456789abcdef";
  DT_FUZZ_ASSERT(store->Put(dir + "/params.bin", params.data(), params.size()).ok(), "put params.bin");
  DT_FUZZ_ASSERT(store->Put(dir + "/opt.bin", "", 0).ok(), "put opt.bin");
  std::string manifest(reinterpret_cast<const char*>(bytes), size);
  if (!manifest.empty() && manifest[0] == 'S') manifest = dtrain::Seal(manifest.substr(1));
  DT_FUZZ_ASSERT(store->Put(dir + "/manifest.pb", manifest.data(), manifest.size()).ok(), "put manifest.pb");
  dtrain::storage::Storage* raw = store.get();
  dtrain::runtime::CheckpointManager manager(std::move(store), dtrain::runtime::CheckpointOptions());

  dtrain::runtime::LoadedCheckpoint loaded;
  if (!manager.Load(kStep, &loaded).ok()) return 0;
  DT_FUZZ_ASSERT(loaded.manifest.step() == kStep && loaded.dir == dir, "accepted a manifest of another step");
  DT_FUZZ_ASSERT(loaded.files.size() <= static_cast<size_t>(loaded.manifest.files_size()), "extra files");
  for (const auto& f : loaded.manifest.files()) {
    const auto it = loaded.files.find(f.name());
    DT_FUZZ_ASSERT(it != loaded.files.end(), "listed file '" + f.name() + "' not loaded");
    DT_FUZZ_ASSERT(
        it->second.size() == f.size() && ::dtrain::Crc32c(it->second.data(), it->second.size()) == f.crc32c(),
        "file '" + f.name() + "' does not match the manifest");
  }
  if (manifest.size() >= dtrain::kSealHeaderBytes && manifest.compare(0, 8, dtrain::kSealMagic, 8) == 0) {
    const size_t bit = dtrain::Crc32c(manifest.data(), manifest.size()) % (manifest.size() * 8);
    manifest[bit / 8] = static_cast<char>(manifest[bit / 8] ^ (1 << (bit % 8)));
    DT_FUZZ_ASSERT(raw->Put(dir + "/manifest.pb", manifest.data(), manifest.size()).ok(), "put manifest.pb");
    DT_FUZZ_ASSERT(manager.Load(kStep, &loaded).code() == Status::Code::kDataLoss,
                   "a sealed manifest with bit " + std::to_string(bit) + " flipped still loads");
  }
  return 0;
}
