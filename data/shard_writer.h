#pragma once
// Writers of the shard format (docs/data_format.md).
//
// ShardWriter builds one shard file: records are buffered in memory, Finish() writes header, offset
// table and records to a temporary file, fsyncs it and renames it into place (a crash leaves no
// half-written shard under the final name). Keep shards to a few hundred MB: the whole shard is
// held in memory until Finish().
//
// DatasetWriter writes a dataset directory: it rolls a new shard file
// ("shard-00000.dts", "shard-00001.dts", ...) every `samples_per_shard` records and writes
// manifest.pb LAST, so a directory with a manifest is complete.
// Both are thread-compatible (one thread at a time).

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/status.h"
#include "proto/shard.pb.h"

namespace dtrain::data {

class ShardWriter {
 public:
  explicit ShardWriter(std::string path) : path_(std::move(path)) {}

  // InvalidArgument when the record exceeds the format's limit (1 GiB) or after Finish().
  Status Add(const void* data, size_t size);
  int64_t num_records() const { return static_cast<int64_t>(lengths_.size()); }

  // Writes the file; fills `entry` (file name without directory, count, bytes, CRC32C of the file).
  Status Finish(proto::ShardEntry* entry);

 private:
  std::string path_;
  std::vector<uint8_t> data_;
  std::vector<uint32_t> lengths_, crcs_;
  bool finished_ = false;
};

class DatasetWriter {
 public:
  // Creates `dir` (and parents) if needed. InvalidArgument for an invalid schema or
  // samples_per_shard < 1; IoError when the directory cannot be made.
  static Status Create(const std::string& dir, const proto::DatasetSchema& schema, int64_t samples_per_shard,
                       std::unique_ptr<DatasetWriter>* out);

  // Appends one record; its size must be RecordBytes(schema) (InvalidArgument otherwise).
  Status Add(const void* data, size_t size);
  // Finishes the last shard and writes the manifest (with `source` as its free-text origin).
  Status Finish(const std::string& source, proto::DatasetManifest* manifest = nullptr);

 private:
  DatasetWriter() = default;
  Status Roll();  // finishes the open shard, if any

  std::string dir_;
  int64_t samples_per_shard_ = 0;
  uint64_t record_bytes_ = 0;
  proto::DatasetManifest manifest_;
  std::unique_ptr<ShardWriter> shard_;
};

}  // namespace dtrain::data
