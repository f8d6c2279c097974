#include "storage/file_storage.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <regex>
#include <vector>

#include "core/check.h"
#include "storage/key_util.h"

namespace dtrain::storage {
namespace {

bool IsTmpName(const std::string& name) {
  static const std::regex kTmp(R"(.*\.tmp\.[0-9]+\.[0-9]+$)");
  return std::regex_match(name, kTmp);
}

std::string DirOf(const std::string& path) {
  const size_t slash = path.rfind('/');
  return slash == std::string::npos ? "." : (slash == 0 ? "/" : path.substr(0, slash));
}

// mkdir -p; EEXIST on every level is fine.
int MakeDirs(const std::string& dir) {
  if (dir.empty() || dir == "/" || dir == ".") return 0;
  struct stat st;
  if (::stat(dir.c_str(), &st) == 0) return S_ISDIR(st.st_mode) ? 0 : ENOTDIR;
  const int parent = MakeDirs(DirOf(dir));
  if (parent != 0) return parent;
  if (::mkdir(dir.c_str(), 0755) != 0 && errno != EEXIST) return errno;
  return 0;
}

int FsyncDir(const std::string& dir) {
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return errno;
  const int rc = ::fsync(fd) == 0 ? 0 : errno;
  ::close(fd);
  return rc;
}

// Writes n bytes in chunks of kWriteChunk; after each chunk asks the kernel to start its writeback
// (SYNC_FILE_RANGE_WRITE does not wait), so the device writes while the next chunk is copied into the page
// cache, dirty pages never pile up to the whole file, and the fsync that follows waits for the last chunk only.
constexpr size_t kWriteChunk = 64u << 20;

int WriteAll(int fd, const char* p, size_t n) {
  off_t flushed = 0, written = 0;
  while (n > 0) {
    const ssize_t w = ::write(fd, p, std::min(n, kWriteChunk));
    if (w < 0) {
      if (errno == EINTR) continue;
      return errno;
    }
    p += w;
    n -= static_cast<size_t>(w);
    written += w;
    if (written - flushed >= static_cast<off_t>(kWriteChunk) || n == 0) {
      // Best effort: a file system without it (EINVAL, ENOSYS) still gets the fsync after.
      (void)::sync_file_range(fd, flushed, written - flushed, SYNC_FILE_RANGE_WRITE);
      flushed = written;
    }
  }
  return 0;
}

// O_DIRECT needs the buffer, the offset and the length aligned to the device's logical block size: 4 KiB covers
// every disk in use (512 and 4096 bytes).
constexpr uint64_t kDirectAlign = 4096;

// DTRAIN_NO_DIRECT_IO=1 turns O_DIRECT reads off (debugging, and benchmarks that compare both); read once.
bool DirectReadsAllowed() {
  static const bool allowed = [] {
    const char* v = std::getenv("DTRAIN_NO_DIRECT_IO");
    return v == nullptr || *v == '\0' || std::strcmp(v, "0") == 0;
  }();
  return allowed;
}

// How many bytes from `offset` on (at most n) the page cache holds, from mincore over a mapping of the range (no
// page is touched, no I/O starts: a preadv2(RWF_NOWAIT) probe would start readahead into the cache). 0 when it cannot
// tell (mincore reports the cache only for files the caller may write); the disk read then gets them.
uint64_t CachedPrefix(int fd, uint64_t offset, uint64_t n) {
  if (n == 0) return 0;
  const uint64_t start = offset & ~(kDirectAlign - 1);
  const size_t len = static_cast<size_t>(offset + n - start);
  void* map = ::mmap(nullptr, len, PROT_READ, MAP_SHARED, fd, static_cast<off_t>(start));
  if (map == MAP_FAILED) return 0;
  std::vector<unsigned char> pages((len + kDirectAlign - 1) / kDirectAlign);
  uint64_t cached = 0;
  if (::mincore(map, len, pages.data()) == 0) {
    size_t i = 0;
    while (i < pages.size() && (pages[i] & 1u) != 0) ++i;
    if (i > 0) cached = std::min<uint64_t>(n, i * kDirectAlign - (offset - start));
  }
  ::munmap(map, len);
  return cached;
}

// Reads the 4 KiB-aligned part of [offset, offset + n) with O_DIRECT on a second descriptor of `path`. Returns
// the bytes read (0 when the file system refuses O_DIRECT or the range is not aligned), or -errno.
int64_t ReadDirect(const std::string& path, char* dst, uint64_t n, uint64_t offset) {
  const uint64_t aligned = n & ~(kDirectAlign - 1);
  if (!DirectReadsAllowed() || aligned == 0 || offset % kDirectAlign != 0 ||
      reinterpret_cast<uintptr_t>(dst) % kDirectAlign != 0) {
    return 0;
  }
  const int fd = ::open(path.c_str(), O_RDONLY | O_DIRECT | O_CLOEXEC);
  if (fd < 0) return errno == EINVAL ? 0 : -errno;  // EINVAL: this file system has no O_DIRECT
  uint64_t done = 0;
  int64_t rc = 0;
  while (done < aligned) {
    const ssize_t r = ::pread(fd, dst + done, aligned - done, static_cast<off_t>(offset + done));
    if (r < 0 && errno == EINTR) continue;
    if (r < 0 && errno != EINVAL) rc = -errno;  // EINVAL: an alignment the device refuses; pread does the rest
    if (r <= 0) break;
    done += static_cast<uint64_t>(r);
    if (done % kDirectAlign != 0) break;  // a short read at the file's end: pread does the rest
  }
  ::close(fd);
  return rc < 0 ? rc : static_cast<int64_t>(done & ~(kDirectAlign - 1));
}

// Appends every regular file below `dir` (whose key prefix is `rel`, "" or ending in '/') to *out.
void Walk(const std::string& dir, const std::string& rel, std::vector<ObjectInfo>* out) {
  DIR* d = ::opendir(dir.c_str());
  if (d == nullptr) return;  // vanished or not a directory: nothing below it
  while (const dirent* e = ::readdir(d)) {
    const std::string name = e->d_name;
    if (name == "." || name == ".." || IsTmpName(name)) continue;
    const std::string path = dir + "/" + name;
    struct stat st;
    if (::stat(path.c_str(), &st) != 0) continue;  // deleted meanwhile
    if (S_ISDIR(st.st_mode)) {
      Walk(path, rel + name + "/", out);
    } else if (S_ISREG(st.st_mode)) {
      out->push_back({rel + name, static_cast<uint64_t>(st.st_size)});
    }
  }
  ::closedir(d);
}

}  // namespace

Status FileStorage::Open(const std::string& root, const std::string& url, std::unique_ptr<Storage>* out) {
  if (root.empty()) return Status::InvalidArgument(url + ": empty directory");
  std::string r = root;
  while (r.size() > 1 && r.back() == '/') r.pop_back();
  const int err = MakeDirs(r);
  if (err != 0) return Status::IoError(url + ": cannot create directory '" + r + "': " + std::strerror(err));
  out->reset(new FileStorage(r, url));
  return Status::OK();
}

Status FileStorage::CheckKey(const std::string& key) const {
  DT_RETURN_IF_ERROR(detail::ValidateKey(url_, key));
  const std::string base = key.substr(key.rfind('/') + 1);
  if (IsTmpName(base)) {
    return Status::InvalidArgument(url_ + ": bad key '" + key + "': names '*.tmp.<n>.<n>' are reserved");
  }
  return Status::OK();
}

Status FileStorage::Error(const std::string& key, const std::string& what, int err) const {
  const std::string msg = url_ + ": key '" + key + "': " + what + ": " + std::strerror(err);
  if (err == ENOENT) return Status::NotFound(url_ + ": key '" + key + "': no such object");
  return Status::IoError(msg);
}

Status FileStorage::Put(const std::string& key, const void* data, size_t size) {
  DT_RETURN_IF_ERROR(CheckKey(key));
  const std::string path = root_ + "/" + key;
  const std::string dir = DirOf(path);
  const std::string tmp = path + ".tmp." + std::to_string(::getpid()) + "." + std::to_string(tmp_counter_++);
  int fd = -1;
  int open_err = 0;
  // A concurrent Delete may remove an emptied parent directory between mkdir and open: retry.
  for (int attempt = 0; attempt < 3 && fd < 0; ++attempt) {
    const int err = MakeDirs(dir);
    if (err != 0) {
      return Status::IoError(url_ + ": key '" + key + "': cannot create its directory: " + std::strerror(err));
    }
    fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    open_err = fd < 0 ? errno : 0;
    if (open_err != 0 && open_err != ENOENT) break;
  }
  if (fd < 0) {
    return Status::IoError(url_ + ": key '" + key + "': cannot create a temporary file: " + std::strerror(open_err));
  }
  int err = WriteAll(fd, static_cast<const char*>(data), size);
  if (err == 0 && ::fsync(fd) != 0) err = errno;
  if (::close(fd) != 0 && err == 0) err = errno;
  if (err == 0 && ::rename(tmp.c_str(), path.c_str()) != 0) err = errno;
  if (err != 0) {
    ::unlink(tmp.c_str());
    return Status::IoError(url_ + ": key '" + key + "': write failed: " + std::strerror(err));
  }
  err = FsyncDir(dir);  // makes the rename itself durable
  if (err != 0) return Status::IoError(url_ + ": key '" + key + "': fsync of its directory: " + std::strerror(err));
  return Status::OK();
}

Status FileStorage::OpenForRead(const std::string& key, int* fd, uint64_t* size) const {
  DT_RETURN_IF_ERROR(CheckKey(key));
  const std::string path = root_ + "/" + key;
  *fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (*fd < 0) return Error(key, "open", errno);
  struct stat st;
  if (::fstat(*fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    const int err = S_ISDIR(st.st_mode) ? ENOENT : errno;
    ::close(*fd);
    return Error(key, "stat", err);
  }
  *size = static_cast<uint64_t>(st.st_size);
  return Status::OK();
}

Status FileStorage::PreadAll(const std::string& key, int fd, char* dst, uint64_t n, uint64_t offset) const {
  uint64_t done = 0;
  while (done < n) {
    const ssize_t r = ::pread(fd, dst + done, n - done, static_cast<off_t>(offset + done));
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) return Error(key, r < 0 ? "read" : "read: file shrank while reading", r < 0 ? errno : EIO);
    done += static_cast<uint64_t>(r);
  }
  return Status::OK();
}

Status FileStorage::ReadRange(const std::string& key, uint64_t offset, uint64_t size, std::string* out) {
  int fd = -1;
  uint64_t file_size = 0;
  DT_RETURN_IF_ERROR(OpenForRead(key, &fd, &file_size));
  const uint64_t begin = std::min(offset, file_size);
  const uint64_t n = std::min(size, file_size - begin);
  out->resize(n);
  const Status st = PreadAll(key, fd, out->data(), n, begin);
  ::close(fd);
  if (!st.ok()) out->clear();
  return st;
}

Status FileStorage::GetInto(const std::string& key, void* dst, uint64_t size, uint64_t* object_size) {
  int fd = -1;
  DT_RETURN_IF_ERROR(OpenForRead(key, &fd, object_size));
  const Status st = PreadAll(key, fd, static_cast<char*>(dst), std::min(size, *object_size), 0);
  ::close(fd);
  return st;
}

Status FileStorage::GetRangeInto(const std::string& key, uint64_t offset, void* dst, uint64_t size, uint64_t* got,
                                 uint64_t* object_size) {
  int fd = -1;
  DT_RETURN_IF_ERROR(OpenForRead(key, &fd, object_size));
  const uint64_t n = offset >= *object_size ? 0 : std::min(size, *object_size - offset);
  char* out = static_cast<char*>(dst);
  // The cached part first (copied from the cache), then the disk's part straight into dst, then whatever is left
  // (an unaligned head or tail) through the page cache.
  const uint64_t cached = CachedPrefix(fd, offset, n);
  Status st = PreadAll(key, fd, out, cached, offset);
  int64_t done = static_cast<int64_t>(cached);
  if (st.ok() && cached < n) {
    const int64_t direct = ReadDirect(root_ + "/" + key, out + cached, n - cached, offset + cached);
    if (direct < 0) st = Error(key, "read", static_cast<int>(-direct));
    done += std::max<int64_t>(direct, 0);
  }
  if (st.ok()) st = PreadAll(key, fd, out + done, n - done, offset + done);
  ::close(fd);
  *got = st.ok() ? n : 0;
  return st;
}

Status FileStorage::Get(const std::string& key, std::string* out) { return ReadRange(key, 0, UINT64_MAX, out); }

Status FileStorage::GetRange(const std::string& key, uint64_t offset, uint64_t size, std::string* out) {
  return ReadRange(key, offset, size, out);
}

Status FileStorage::Head(const std::string& key, ObjectInfo* out) {
  DT_RETURN_IF_ERROR(CheckKey(key));
  struct stat st;
  if (::stat((root_ + "/" + key).c_str(), &st) != 0) return Error(key, "stat", errno);
  if (!S_ISREG(st.st_mode)) return Error(key, "stat", ENOENT);
  out->key = key;
  out->size = static_cast<uint64_t>(st.st_size);
  return Status::OK();
}

Status FileStorage::List(const std::string& prefix, std::vector<ObjectInfo>* out) {
  DT_RETURN_IF_ERROR(detail::ValidatePrefix(url_, prefix));
  out->clear();
  // Walk only below the deepest directory that the prefix names completely.
  const size_t slash = prefix.rfind('/');
  const std::string rel = slash == std::string::npos ? "" : prefix.substr(0, slash + 1);
  Walk(rel.empty() ? root_ : root_ + "/" + rel.substr(0, rel.size() - 1), rel, out);
  out->erase(std::remove_if(out->begin(), out->end(),
                            [&](const ObjectInfo& o) { return o.key.compare(0, prefix.size(), prefix) != 0; }),
             out->end());
  std::sort(out->begin(), out->end(), [](const ObjectInfo& a, const ObjectInfo& b) { return a.key < b.key; });
  return Status::OK();
}

Status FileStorage::Delete(const std::string& key) {
  DT_RETURN_IF_ERROR(CheckKey(key));
  const std::string path = root_ + "/" + key;
  if (::unlink(path.c_str()) != 0 && errno != ENOENT) return Error(key, "unlink", errno);
  // Remove directories that this delete emptied (best effort; rmdir fails on non-empty ones).
  for (std::string dir = DirOf(path); dir.size() > root_.size() && dir.compare(0, root_.size(), root_) == 0;
       dir = DirOf(dir)) {
    if (::rmdir(dir.c_str()) != 0) break;
  }
  return Status::OK();
}

// ---- the file scheme (storage/scheme.h) ----------------------------------------------------------------

namespace {

constexpr char kFilePrefix[] = "file://";

bool FileLocalDir(const std::string& url, std::string* dir) {
  *dir = url.rfind(kFilePrefix, 0) == 0 ? url.substr(sizeof(kFilePrefix) - 1) : url;
  return true;
}

Status OpenFileUrl(const std::string& url, const StorageOptions& /*opts*/, std::unique_ptr<Storage>* out) {
  std::string path;
  FileLocalDir(url, &path);
  if (path.size() != url.size() && (path.empty() || path[0] != '/')) {
    return Status::InvalidArgument("storage URL '" + url + "': file:// needs an absolute path (file:///abs/dir)");
  }
  return FileStorage::Open(path, url, out);
}

// A restore reads a local file in 16 MiB chunks on 4 threads: 8 are no faster cold and only a little warm
// (bench/results/2026-12-02-checkpoint-restore.md).
TransferPlan FileTransfer(const StorageOptions& /*opts*/) { return {16ull << 20, 4}; }

}  // namespace

const Scheme kFileScheme = {
    "file",       "file:///abs/dir or a path", {/*remote=*/false, /*needs_owner=*/true}, &OpenFileUrl, &FileTransfer,
    &FileLocalDir};

}  // namespace dtrain::storage
