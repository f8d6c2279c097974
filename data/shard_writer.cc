#include "data/shard_writer.h"

#include <cstdio>
#include <cstring>
#include <filesystem>

#include "core/check.h"
#include "core/crc32c.h"
#include "data/manifest.h"
#include "data/shard_format.h"

namespace dtrain::data {

Status ShardWriter::Add(const void* data, size_t size) {
  DT_CHECK_ARG(!finished_, path_ << ": Add after Finish");
  DT_CHECK_ARG(size <= shard::kMaxRecordBytes, path_ << ": record of " << size << " bytes exceeds the 1 GiB limit");
  const auto* p = static_cast<const uint8_t*>(data);
  data_.insert(data_.end(), p, p + size);
  lengths_.push_back(static_cast<uint32_t>(size));
  crcs_.push_back(Crc32c(p, size));
  return Status::OK();
}

Status ShardWriter::Finish(proto::ShardEntry* entry) {
  DT_CHECK_ARG(!finished_, path_ << ": Finish called twice");
  finished_ = true;
  const uint64_t n = lengths_.size();
  const uint64_t data_begin = shard::kHeaderBytes + n * shard::kEntryBytes;
  std::vector<uint8_t> file(data_begin + data_.size());
  uint8_t* h = file.data();
  std::memcpy(h, shard::kMagic, sizeof(shard::kMagic));
  shard::Put32(h + 8, shard::kShardVersion);
  shard::Put64(h + 16, n);
  shard::Put64(h + 24, 0);
  uint64_t offset = data_begin;
  for (uint64_t i = 0; i < n; ++i) {
    uint8_t* e = h + shard::kHeaderBytes + i * shard::kEntryBytes;
    shard::Put64(e, offset);
    shard::Put32(e + 8, lengths_[i]);
    shard::Put32(e + 12, crcs_[i]);
    offset += lengths_[i];
  }
  uint32_t hcrc = Crc32c(h, 12);
  hcrc = Crc32cExtend(hcrc, h + 16, data_begin - 16);
  shard::Put32(h + 12, hcrc);
  if (!data_.empty()) std::memcpy(h + data_begin, data_.data(), data_.size());
  std::vector<uint8_t>().swap(data_);
  DT_RETURN_IF_ERROR(WriteFileAtomic(path_, file.data(), file.size()));
  const auto slash = path_.rfind('/');
  entry->set_file(slash == std::string::npos ? path_ : path_.substr(slash + 1));
  entry->set_num_samples(n);
  entry->set_bytes(file.size());
  entry->set_crc32c(Crc32c(file.data(), file.size()));
  return Status::OK();
}

Status DatasetWriter::Create(const std::string& dir, const proto::DatasetSchema& schema, int64_t samples_per_shard,
                             std::unique_ptr<DatasetWriter>* out) {
  DT_CHECK_ARG(samples_per_shard >= 1, "samples_per_shard must be >= 1, got " << samples_per_shard);
  std::unique_ptr<DatasetWriter> w(new DatasetWriter());  // private constructor
  w->manifest_.set_magic(kManifestMagic);
  w->manifest_.set_format_version(kManifestVersion);
  *w->manifest_.mutable_schema() = schema;
  const Status valid = ValidateManifest(dir, w->manifest_);
  if (!valid.ok()) return Status::InvalidArgument(valid.message());
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) return Status::IoError(dir + ": cannot create the dataset directory: " + ec.message());
  w->dir_ = dir;
  w->samples_per_shard_ = samples_per_shard;
  w->record_bytes_ = RecordBytes(schema);
  *out = std::move(w);
  return Status::OK();
}

Status DatasetWriter::Roll() {
  if (shard_ == nullptr) return Status::OK();
  DT_RETURN_IF_ERROR(shard_->Finish(manifest_.add_shards()));
  manifest_.set_total_samples(manifest_.total_samples() + manifest_.shards().rbegin()->num_samples());
  shard_.reset();
  return Status::OK();
}

Status DatasetWriter::Add(const void* data, size_t size) {
  DT_CHECK_ARG(size == record_bytes_, dir_ << ": record of " << size << " bytes, the schema wants " << record_bytes_);
  if (shard_ != nullptr && shard_->num_records() >= samples_per_shard_) DT_RETURN_IF_ERROR(Roll());
  if (shard_ == nullptr) {
    char name[32];
    std::snprintf(name, sizeof(name), "shard-%05d.dts", manifest_.shards_size());
    shard_ = std::make_unique<ShardWriter>(dir_ + "/" + name);
  }
  return shard_->Add(data, size);
}

Status DatasetWriter::Finish(const std::string& source, proto::DatasetManifest* manifest) {
  DT_RETURN_IF_ERROR(Roll());
  manifest_.set_source(source);
  DT_RETURN_IF_ERROR(WriteManifest(dir_, manifest_));
  if (manifest != nullptr) *manifest = manifest_;
  return Status::OK();
}

}  // namespace dtrain::data
