#include "data/manifest.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstring>
#include <fstream>
#include <sstream>

#include "core/check.h"
#include "core/file_guard.h"
#include "core/logging.h"
#include "core/sealed_bytes.h"
#include "data/shard_format.h"

namespace dtrain::data {
namespace {

Status WriteAll(int fd, const std::string& path, const void* data, size_t size) {
  const auto* p = static_cast<const uint8_t*>(data);
  while (size > 0) {
    const ssize_t w = ::write(fd, p, size);
    if (w < 0) {
      if (errno == EINTR) continue;
      return Status::IoError(path + ": write: " + std::strerror(errno));
    }
    p += w;
    size -= static_cast<size_t>(w);
  }
  return Status::OK();
}

std::string DirOf(const std::string& path) {
  const auto pos = path.rfind('/');
  return pos == std::string::npos ? "." : (pos == 0 ? "/" : path.substr(0, pos));
}

}  // namespace

std::string ManifestPath(const std::string& dir) { return dir + "/" + kManifestName; }

uint64_t RecordBytes(const proto::DatasetSchema& schema) {
  if (schema.dims_size() == 0) return 0;
  uint64_t n = 1;
  for (int64_t d : schema.dims()) {
    if (d <= 0 || d > (int64_t{1} << 30)) return 0;
    n *= static_cast<uint64_t>(d);
    if (n > (uint64_t{1} << 30)) return 0;
  }
  switch (schema.kind()) {
    case proto::DatasetSchema::IMAGE:
      return n + 4;  // u32 label, then the pixels
    case proto::DatasetSchema::TOKENS:
      if (schema.token_dtype() == proto::DatasetSchema::UINT16) return 2 * n;
      if (schema.token_dtype() == proto::DatasetSchema::UINT32) return 4 * n;
      return 0;
    default:
      return 0;
  }
}

Status ValidateManifest(const std::string& path, const proto::DatasetManifest& m) {
  auto bad = [&path](const std::string& what) { return Status::DataLoss(path + ": " + what); };
  if (m.magic() != kManifestMagic) return bad("not a dtrain dataset manifest (magic '" + m.magic() + "')");
  if (m.format_version() == 0 || m.format_version() > kManifestVersion) {
    return bad("dataset format version " + std::to_string(m.format_version()) +
               " is not supported (this build reads 1.." + std::to_string(kManifestVersion) +
               "; a newer dtrain wrote it?)");
  }
  const auto& s = m.schema();
  if (s.kind() != proto::DatasetSchema::IMAGE && s.kind() != proto::DatasetSchema::TOKENS)
    return bad("schema kind unset");
  if (RecordBytes(s) == 0) return bad("schema dims/dtype invalid");
  // Found by fuzz/dataset_fuzzer: a NaN or infinite normalization would turn every decoded pixel into NaN.
  if (!std::isfinite(s.pixel_mean()) || !std::isfinite(s.pixel_std())) {
    return bad("pixel_mean and pixel_std must be finite numbers");
  }
  if (s.kind() == proto::DatasetSchema::IMAGE) {
    if (s.dims_size() != 2 && s.dims_size() != 3) return bad("image dims must be [H, W] or [C, H, W]");
    if (s.has_label() && s.num_classes() <= 0) return bad("labelled images need num_classes >= 1");
    if (!(s.pixel_std() > 0.0f)) return bad("pixel_std must be > 0");
  } else if (s.dims_size() != 1 || s.dims(0) < 2) {
    return bad("token records need dims [L] with L >= 2");
  }
  // Every size below is bounded before anyone allocates or downloads by it: a shard of N records of R
  // bytes is exactly 32 + N * (16 + R) bytes (data/shard_format.h).
  const uint64_t per_record = shard::kEntryBytes + RecordBytes(s);
  uint64_t total = 0;
  for (const auto& sh : m.shards()) {
    if (sh.file().empty() || sh.file().find('/') != std::string::npos || sh.file() == "." || sh.file() == "..") {
      return bad("shard file name '" + sh.file() + "' is not a plain file name");
    }
    const uint64_t n = sh.num_samples();
    if (n > (uint64_t{1} << 62) / per_record || sh.bytes() != shard::kHeaderBytes + n * per_record) {
      return bad("shard '" + sh.file() + "': " + std::to_string(n) + " records of " + std::to_string(RecordBytes(s)) +
                 " bytes cannot make the " + std::to_string(sh.bytes()) + " bytes the manifest says");
    }
    total += n;
    if (total < n) return bad("the shards' sample counts overflow 64 bits");
  }
  if (total != m.total_samples()) {
    return bad("total_samples " + std::to_string(m.total_samples()) + " != sum over shards " + std::to_string(total));
  }
  return Status::OK();
}

Status ReadManifest(const std::string& dir, proto::DatasetManifest* out) {
  const std::string path = ManifestPath(dir);
  const Status regular = CheckRegularFile(path, "dataset manifest");  // a FIFO would block the open
  if (regular.code() == Status::Code::kInvalidArgument) return regular;
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    return Status::NotFound(path +
                            ": no dataset manifest (a dataset directory holds manifest.pb and its shards; "
                            "make one with `dtrain data convert-*`)");
  }
  std::stringstream ss;
  ss << in.rdbuf();
  return ParseManifest(path, ss.str(), out);
}

Status ParseManifest(const std::string& name, const std::string& bytes, proto::DatasetManifest* out) {
  std::string payload;
  bool legacy = false;
  DT_RETURN_IF_ERROR(Unseal(name, bytes, &payload, &legacy));
  if (legacy && FirstLegacyWarning(name))
    DT_LOG_WARN(kData, "{}: written without a checksum of its own bytes (an older dtrain): read unverified", name);
  proto::DatasetManifest m;
  if (!m.ParseFromString(payload)) return Status::DataLoss(name + ": not a dtrain dataset manifest (does not parse)");
  DT_RETURN_IF_ERROR(ValidateManifest(name, m));
  *out = std::move(m);
  return Status::OK();
}

Status WriteManifest(const std::string& dir, const proto::DatasetManifest& m) {
  std::string payload;
  if (!m.SerializeToString(&payload)) return Status::Internal(ManifestPath(dir) + ": cannot serialize the manifest");
  const std::string bytes = Seal(payload);
  return WriteFileAtomic(ManifestPath(dir), bytes.data(), bytes.size());
}

Status WriteFileAtomic(const std::string& path, const void* data, size_t size) {
  const std::string tmp = path + ".tmp";
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return Status::IoError(tmp + ": open: " + std::strerror(errno));
  Status st = WriteAll(fd, tmp, data, size);
  if (st.ok() && ::fsync(fd) != 0) st = Status::IoError(tmp + ": fsync: " + std::strerror(errno));
  if (::close(fd) != 0 && st.ok()) st = Status::IoError(tmp + ": close: " + std::strerror(errno));
  if (st.ok() && std::rename(tmp.c_str(), path.c_str()) != 0) {
    st = Status::IoError(path + ": rename: " + std::strerror(errno));
  }
  if (!st.ok()) {
    ::unlink(tmp.c_str());
    return st;
  }
  const int dfd = ::open(DirOf(path).c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd >= 0) {  // make the rename durable; a directory that cannot be opened is not an error
    ::fsync(dfd);
    ::close(dfd);
  }
  return Status::OK();
}

}  // namespace dtrain::data
