#include "data/remote_cache.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

#include "core/check.h"
#include "core/crc32c.h"
#include "core/logging.h"
#include "data/manifest.h"
#include "proto/shard.pb.h"

namespace dtrain::data {
namespace fs = std::filesystem;
namespace {

std::string Hex16(uint64_t v) {
  static const char* kDigits = "0123456789abcdef";
  std::string s(16, '0');
  for (int i = 15; i >= 0; --i, v >>= 4) s[i] = kDigits[v & 15];
  return s;
}

// FNV-1a: a stable name for the URL's cache directory (std::hash may differ between builds).
uint64_t Fnv1a(const std::string& s) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : s) h = (h ^ c) * 1099511628211ull;
  return h;
}

// Holds an exclusive flock() on a file for its lifetime.
class FileLock {
 public:
  ~FileLock() {
    if (fd_ >= 0) close(fd_);  // releases the lock
  }
  Status Acquire(const std::string& path) {
    fd_ = open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (fd_ < 0) return Status::IoError("cannot open lock file " + path + ": " + std::strerror(errno));
    while (flock(fd_, LOCK_EX) != 0) {
      if (errno != EINTR) return Status::IoError("cannot lock " + path + ": " + std::strerror(errno));
    }
    return Status::OK();
  }

 private:
  int fd_ = -1;
};

bool ReadMarker(const std::string& path, uint32_t* crc) {
  std::ifstream in(path);
  unsigned long v = 0;
  if (!(in >> v)) return false;
  *crc = static_cast<uint32_t>(v);
  return true;
}

uint64_t DirBytes(const fs::path& dir) {
  uint64_t total = 0;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    if (e.is_regular_file(ec)) total += e.file_size(ec);
  }
  return total;
}

// Evicts other datasets (least recently used first) until `needed` more bytes fit under the limit.
void EvictFor(const fs::path& root, const fs::path& keep, uint64_t needed, uint64_t limit, FetchStats* stats) {
  struct Entry {
    fs::path dir;
    fs::file_time_type used;
    uint64_t bytes;
  };
  std::vector<Entry> others;
  uint64_t total = 0;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(root, ec)) {
    if (!e.is_directory(ec)) continue;
    const uint64_t bytes = DirBytes(e.path());
    total += bytes;
    if (e.path() != keep) others.push_back({e.path(), fs::last_write_time(e.path(), ec), bytes});
  }
  std::sort(others.begin(), others.end(), [](const Entry& a, const Entry& b) { return a.used < b.used; });
  for (const Entry& o : others) {
    if (total + needed <= limit) break;
    DT_LOG_INFO(kData, "shard cache over its limit: evicting {} ({:.1f} MiB)", o.dir.string(), o.bytes / 1048576.0);
    fs::remove_all(o.dir, ec);
    if (!ec) {
      total -= o.bytes;
      if (stats != nullptr) ++stats->shards_evicted;
    }
  }
}

// Downloads `key` (`bytes` long) into `path` with parallel range GETs, checking size and CRC32C.
Status DownloadShard(storage::Storage& store, const std::string& key, uint64_t bytes, uint32_t crc,
                     const std::string& path, const RemoteCacheOptions& opts, int64_t* requests) {
  const uint64_t range = std::max<uint64_t>(opts.range_bytes, 1);
  const uint64_t n_ranges = std::max<uint64_t>((bytes + range - 1) / range, 1);
  std::vector<std::string> parts(n_ranges);
  std::vector<Status> errors(n_ranges);
  std::atomic<uint64_t> next{0};
  auto worker = [&] {
    for (uint64_t i = next++; i < n_ranges; i = next++) {
      const uint64_t off = i * range, len = std::min(range, bytes - std::min(bytes, off));
      errors[i] = len == 0 ? Status::OK() : store.GetRange(key, off, len, &parts[i]);
      if (errors[i].ok() && parts[i].size() != len) {
        errors[i] = Status::DataLoss(store.url() + "/" + key + ": range GET at " + std::to_string(off) + " returned " +
                                     std::to_string(parts[i].size()) + " bytes, expected " + std::to_string(len));
      }
    }
  };
  const int n_threads = static_cast<int>(std::min<uint64_t>(std::max(opts.threads, 1), n_ranges));
  std::vector<std::thread> threads;
  for (int t = 0; t < n_threads; ++t) threads.emplace_back(worker);
  for (auto& t : threads) t.join();
  *requests += static_cast<int64_t>(n_ranges);
  for (const Status& s : errors) DT_RETURN_IF_ERROR(s);
  uint32_t got = 0;
  for (const std::string& p : parts) got = Crc32cExtend(got, p.data(), p.size());
  if (got != crc) {
    return Status::DataLoss(store.url() + "/" + key + ": CRC32C " + std::to_string(got) + " but the manifest says " +
                            std::to_string(crc) + " (object changed or corrupted)");
  }
  std::string all;
  all.reserve(bytes);
  for (std::string& p : parts) all += p;
  return WriteFileAtomic(path, all.data(), all.size());
}

}  // namespace

std::string DefaultCacheDir() {
  if (const char* x = std::getenv("XDG_CACHE_HOME"); x != nullptr && *x != '\0') return std::string(x) + "/dtrain";
  if (const char* h = std::getenv("HOME"); h != nullptr && *h != '\0') return std::string(h) + "/.cache/dtrain";
  return "/tmp/dtrain-cache";
}

Status FetchDataset(const std::string& url, const RemoteCacheOptions& opts, std::string* local_dir, FetchStats* stats) {
  FetchStats local_stats;
  if (stats == nullptr) stats = &local_stats;
  if (opts.cache_dir.empty()) return Status::InvalidArgument("no cache directory for remote dataset " + url);
  std::unique_ptr<storage::Storage> store;
  DT_RETURN_IF_ERROR(storage::Storage::Open(url, opts.storage, &store));
  std::string bytes;
  Status st = store->Get(kManifestName, &bytes);
  if (st.code() == Status::Code::kNotFound) {
    return Status::NotFound(url + "/" + kManifestName +
                            " does not exist: the URL must name a dataset written by "
                            "`dtrain data convert-*` (a manifest.pb and its shard files)");
  }
  DT_RETURN_IF_ERROR(st.WithContext("reading the dataset manifest of " + url));
  proto::DatasetManifest m;
  DT_RETURN_IF_ERROR(ParseManifest(url + "/" + kManifestName, bytes, &m));
  uint64_t dataset_bytes = bytes.size();
  for (const auto& s : m.shards()) dataset_bytes += s.bytes();
  if (dataset_bytes > opts.limit_bytes) {
    return Status::FailedPrecondition(url + " holds " + std::to_string(dataset_bytes >> 20) +
                                      " MiB, more than the shard cache limit (data.cache_limit_mb = " +
                                      std::to_string(opts.limit_bytes >> 20) + "): raise the limit");
  }

  const fs::path root = fs::path(opts.cache_dir) / "remote";
  const fs::path dir = root / Hex16(Fnv1a(url));
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) return Status::IoError("cannot create shard cache directory " + dir.string() + ": " + ec.message());
  FileLock lock;
  DT_RETURN_IF_ERROR(lock.Acquire((dir / ".lock").string()));
  std::ofstream(dir / "url") << url << "\n";

  uint64_t missing = 0;
  std::vector<int> todo;
  for (int i = 0; i < m.shards_size(); ++i) {
    const auto& s = m.shards(i);
    const fs::path p = dir / s.file();
    uint32_t marked = 0;
    if (fs::exists(p, ec) && fs::file_size(p, ec) == s.bytes() && ReadMarker(p.string() + ".ok", &marked) &&
        marked == s.crc32c()) {
      ++stats->shards_reused;
    } else {
      todo.push_back(i);
      missing += s.bytes();
    }
  }
  if (missing > 0) EvictFor(root, dir, missing, opts.limit_bytes, stats);
  for (int i : todo) {
    const auto& s = m.shards(i);
    const std::string path = (dir / s.file()).string();
    fs::remove(path + ".ok", ec);
    DT_RETURN_IF_ERROR(DownloadShard(*store, s.file(), s.bytes(), s.crc32c(), path, opts, &stats->range_requests));
    std::ofstream(path + ".ok") << s.crc32c() << "\n";
    ++stats->shards_downloaded;
    stats->bytes_downloaded += s.bytes();
  }
  DT_RETURN_IF_ERROR(WriteManifest(dir.string(), m));
  fs::last_write_time(dir, fs::file_time_type::clock::now(), ec);  // most recently used
  if (!todo.empty()) {
    DT_LOG_INFO(kData, "{}: {} shard(s) downloaded ({:.1f} MiB, {} range GETs), {} cached, into {}", url,
                stats->shards_downloaded, stats->bytes_downloaded / 1048576.0, stats->range_requests,
                stats->shards_reused, dir.string());
  }
  *local_dir = dir.string();
  return Status::OK();
}

}  // namespace dtrain::data
