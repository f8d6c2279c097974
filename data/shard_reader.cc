#include "data/shard_reader.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "core/check.h"
#include "core/crc32c.h"
#include "core/file_guard.h"
#include "data/shard_format.h"

namespace dtrain::data {
namespace {

// Reads exactly n bytes at `offset`; DataLoss on a short read (end of file), IoError on failure.
Status PreadFull(int fd, const std::string& path, void* buf, size_t n, uint64_t offset) {
  auto* p = static_cast<uint8_t*>(buf);
  size_t done = 0;
  while (done < n) {
    const ssize_t r = ::pread(fd, p + done, n - done, static_cast<off_t>(offset + done));
    if (r < 0) {
      if (errno == EINTR) continue;
      return Status::IoError(path + ": pread at offset " + std::to_string(offset + done) + ": " + std::strerror(errno));
    }
    if (r == 0) {
      return Status::DataLoss(path + ": truncated: wanted " + std::to_string(n) + " bytes at offset " +
                              std::to_string(offset) + ", the file ends after " + std::to_string(done));
    }
    done += static_cast<size_t>(r);
  }
  return Status::OK();
}

}  // namespace

ShardReader::~ShardReader() {
  if (fd_ >= 0) ::close(fd_);
}

Status ShardReader::Open(const std::string& path, std::unique_ptr<ShardReader>* out) {
  std::unique_ptr<ShardReader> r(new ShardReader());  // private constructor: make_unique cannot reach it
  r->path_ = path;
  r->fd_ = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);  // a FIFO must not block (refused below)
  if (r->fd_ < 0) {
    if (errno == ENOENT) return Status::NotFound(path + ": shard file does not exist");
    return Status::IoError(path + ": open: " + std::strerror(errno));
  }
  struct stat st {};
  if (::fstat(r->fd_, &st) != 0) return Status::IoError(path + ": fstat: " + std::strerror(errno));
  if (!S_ISREG(st.st_mode)) return CheckRegularFile(path, "shard");  // names the kind: a FIFO, a directory...
  r->file_size_ = static_cast<uint64_t>(st.st_size);
  if (r->file_size_ < shard::kHeaderBytes) {
    return Status::DataLoss(path + ": truncated: " + std::to_string(r->file_size_) + " bytes, shorter than the " +
                            std::to_string(shard::kHeaderBytes) + "-byte shard header");
  }
  uint8_t h[shard::kHeaderBytes];
  DT_RETURN_IF_ERROR(PreadFull(r->fd_, path, h, sizeof(h), 0));
  if (std::memcmp(h, shard::kMagic, sizeof(shard::kMagic)) != 0) {
    return Status::DataLoss(path + ": not a dtrain shard (magic is not \"DTSHARD1\")");
  }
  const uint32_t version = shard::Get32(h + 8);
  if (version == 0 || version > shard::kShardVersion) {
    return Status::DataLoss(path + ": shard format version " + std::to_string(version) +
                            " is not supported (this build reads 1.." + std::to_string(shard::kShardVersion) +
                            "; a newer dtrain wrote it?)");
  }
  const uint64_t n = shard::Get64(h + 16);
  // Bound n by the file size before allocating the table.
  if (n > (r->file_size_ - shard::kHeaderBytes) / shard::kEntryBytes) {
    return Status::DataLoss(path + ": truncated or corrupt: header claims " + std::to_string(n) +
                            " records, more than a file of " + std::to_string(r->file_size_) + " bytes can index");
  }
  std::vector<uint8_t> table(n * shard::kEntryBytes);
  DT_RETURN_IF_ERROR(PreadFull(r->fd_, path, table.data(), table.size(), shard::kHeaderBytes));
  uint32_t crc = Crc32c(h, 12);
  crc = Crc32cExtend(crc, h + 16, shard::kHeaderBytes - 16);
  crc = Crc32cExtend(crc, table.data(), table.size());
  if (crc != shard::Get32(h + 12)) return Status::DataLoss(path + ": header checksum mismatch (corrupt shard header)");

  const uint64_t data_begin = shard::kHeaderBytes + table.size();
  r->entries_.resize(n);
  for (uint64_t i = 0; i < n; ++i) {
    const uint8_t* e = table.data() + i * shard::kEntryBytes;
    Entry& en = r->entries_[i];
    en.offset = shard::Get64(e);
    en.length = shard::Get32(e + 8);
    en.crc32c = shard::Get32(e + 12);
    if (en.length > shard::kMaxRecordBytes || en.offset < data_begin || en.offset > r->file_size_ ||
        en.length > r->file_size_ - en.offset) {
      return Status::DataLoss(path + ": truncated or corrupt: record " + std::to_string(i) + " at [" +
                              std::to_string(en.offset) + ", +" + std::to_string(en.length) + ") lies outside the " +
                              std::to_string(r->file_size_) + "-byte file");
    }
  }
  *out = std::move(r);
  return Status::OK();
}

Status ShardReader::Read(int64_t i, void* buf, size_t cap) const {
  DT_CHECK_ARG(i >= 0 && i < num_records(), path_ << ": record " << i << " of " << num_records());
  const Entry& e = entries_[i];
  DT_CHECK_ARG(cap >= e.length, path_ << ": buffer of " << cap << " bytes for a record of " << e.length);
  DT_RETURN_IF_ERROR(PreadFull(fd_, path_, buf, e.length, e.offset));
  if (Crc32c(buf, e.length) != e.crc32c) {
    return Status::DataLoss(path_ + ": checksum mismatch in record " + std::to_string(i) + " (corrupt shard)");
  }
  return Status::OK();
}

Status ShardReader::Read(int64_t i, std::vector<uint8_t>* out) const {
  DT_CHECK_ARG(i >= 0 && i < num_records(), path_ << ": record " << i << " of " << num_records());
  out->resize(entries_[i].length);
  return Read(i, out->data(), out->size());
}

}  // namespace dtrain::data
