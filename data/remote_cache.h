#pragma once
// Remote datasets: a local, size-bounded cache of sharded datasets kept in object storage (a URL of a remote scheme,
// storage/scheme.h: s3://bucket/prefix).
//
// FetchDataset(url) makes the dataset at `url` (manifest.pb + shard files, docs/data_format.md)
// available as a local directory that data::Dataset opens with pread, page-cache friendly:
//   1. manifest.pb is read from the store and validated (DataLoss naming the URL otherwise).
//   2. Each shard already in the cache with the manifest's size and a "<file>.ok" marker holding the
//      manifest's CRC32C is reused as is; any other shard is downloaded with parallel range GETs
//      (`range_bytes` each, `threads` at a time, each retried by the storage client), its size and
//      CRC32C checked against the manifest (DataLoss naming the object on a mismatch), written to a
//      temporary file and renamed into place, then marked ".ok".
//   3. Before downloading, shards of OTHER cached datasets are evicted least recently used first
//      (by the mtime of their dataset directory, touched on every use) until the cache holds at most
//      `limit_bytes`. A dataset that alone exceeds the limit is refused (FailedPrecondition naming
//      data.cache_limit_mb): the loader reads samples in a global random order, so a partial cache
//      would re-download shards continuously.
// Layout: <cache_dir>/remote/<16 hex digits of the URL's hash>/{manifest.pb, shards, *.ok, url}.
// Concurrency: ranks of one node fetching the same dataset serialise on an flock() of the dataset
// directory's ".lock"; the first downloads, the others find the marked shards. Thread-safe.

#include <cstdint>
#include <string>

#include "core/status.h"
#include "storage/storage.h"

namespace dtrain::data {

struct RemoteCacheOptions {
  std::string cache_dir;               // required
  uint64_t limit_bytes = 10ull << 30;  // the whole cache (all remote datasets)
  storage::StorageOptions storage;     // endpoint, region, addressing, retries
  int threads = 8;                     // range GETs in flight
  uint64_t range_bytes = 8ull << 20;   // bytes per range GET
};

// Statistics of one FetchDataset call, for logs and tests.
struct FetchStats {
  int shards_downloaded = 0;
  int shards_reused = 0;
  int shards_evicted = 0;  // of other datasets
  uint64_t bytes_downloaded = 0;
  int64_t range_requests = 0;
};

// See the file comment. `*local_dir` is the cached dataset directory.
Status FetchDataset(const std::string& url, const RemoteCacheOptions& opts, std::string* local_dir,
                    FetchStats* stats = nullptr);

// The default cache directory: $XDG_CACHE_HOME/dtrain, else $HOME/.cache/dtrain, else /tmp/dtrain-cache.
std::string DefaultCacheDir();

}  // namespace dtrain::data
