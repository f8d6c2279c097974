#pragma once
// Dataset: a sharded dataset directory opened for random access (format: docs/data_format.md).
//
// Open() reads manifest.pb and opens every shard it lists, checking before any training starts that
// each shard exists (NotFound naming it), has the manifest's byte size (DataLoss "truncated" or
// "size mismatch" naming it) and the manifest's record count, and that every record has the
// schema's size. Whole-file CRC32Cs are checked by Verify() (reads everything) or at Open() with
// `verify_checksums`; each record's own CRC32C is checked on every Read().
// Thread-safe after Open(): Read() may run on many threads at once (pread on shared fds).

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/status.h"
#include "data/shard_reader.h"
#include "proto/shard.pb.h"

namespace dtrain::data {

class Dataset {
 public:
  static Status Open(const std::string& dir, bool verify_checksums, std::unique_ptr<Dataset>* out);

  const proto::DatasetManifest& manifest() const { return manifest_; }
  const proto::DatasetSchema& schema() const { return manifest_.schema(); }
  const std::string& dir() const { return dir_; }
  int64_t size() const { return static_cast<int64_t>(manifest_.total_samples()); }
  uint64_t record_bytes() const { return record_bytes_; }

  // Reads sample `index` (in [0, size())) into buf (record_bytes() bytes). Errors name the shard.
  Status Read(int64_t index, void* buf) const;

  // Reads every shard file whole and compares its size and CRC32C with the manifest; with `check_tokens` (`dtrain
  // data verify`), for a TOKENS dataset also that every token is below the schema's vocab_size (a token beyond the
  // vocabulary would index past the embedding; this reads every record once more). Returns the first failure
  // (DataLoss naming the file) after checking all; `report` (optional) gets one line per shard ("ok" or the error).
  Status Verify(std::vector<std::string>* report = nullptr, bool check_tokens = false) const;

  // Human-readable summary: schema, sample count, shards with sizes and CRCs.
  std::string Describe() const;

 private:
  Dataset() = default;
  Status CheckTokens(size_t shard, const std::string& path) const;  // Verify's token range check of one shard
  std::string dir_;
  proto::DatasetManifest manifest_;
  uint64_t record_bytes_ = 0;
  std::vector<std::unique_ptr<ShardReader>> shards_;
  std::vector<int64_t> starts_;  // starts_[s] = first global index of shard s; back() = size()
};

// CRC32C and size of a whole file, read in 1 MiB chunks. NotFound / IoError name the file.
Status FileCrc32c(const std::string& path, uint32_t* crc, uint64_t* bytes);

}  // namespace dtrain::data
