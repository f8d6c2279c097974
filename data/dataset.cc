#include "data/dataset.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <sstream>

#include "core/check.h"
#include "core/crc32c.h"
#include "core/file_guard.h"
#include "data/manifest.h"

namespace dtrain::data {
namespace {

std::string Hex32(uint32_t v) {
  char b[16];
  std::snprintf(b, sizeof(b), "%08x", v);
  return b;
}

}  // namespace

Status FileCrc32c(const std::string& path, uint32_t* crc, uint64_t* bytes) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);  // a FIFO must not block
  if (fd < 0) {
    if (errno == ENOENT) return Status::NotFound(path + ": shard file does not exist");
    return Status::IoError(path + ": open: " + std::strerror(errno));
  }
  struct stat st;
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    return CheckRegularFile(path, "shard");
  }
  ::posix_fadvise(fd, 0, 0, POSIX_FADV_SEQUENTIAL);
  std::vector<uint8_t> buf(1 << 20);
  uint32_t c = 0;
  uint64_t n = 0;
  for (;;) {
    const ssize_t r = ::read(fd, buf.data(), buf.size());
    if (r < 0) {
      if (errno == EINTR) continue;
      const Status st = Status::IoError(path + ": read: " + std::strerror(errno));
      ::close(fd);
      return st;
    }
    if (r == 0) break;
    c = Crc32cExtend(c, buf.data(), static_cast<size_t>(r));
    n += static_cast<uint64_t>(r);
  }
  ::close(fd);
  *crc = c;
  *bytes = n;
  return Status::OK();
}

Status Dataset::Open(const std::string& dir, bool verify_checksums, std::unique_ptr<Dataset>* out) {
  std::unique_ptr<Dataset> d(new Dataset());  // private constructor
  d->dir_ = dir;
  DT_RETURN_IF_ERROR(ReadManifest(dir, &d->manifest_));
  d->record_bytes_ = RecordBytes(d->manifest_.schema());
  int64_t start = 0;
  for (const auto& e : d->manifest_.shards()) {
    const std::string path = dir + "/" + e.file();
    std::unique_ptr<ShardReader> r;
    DT_RETURN_IF_ERROR(ShardReader::Open(path, &r));
    if (r->file_size() != e.bytes()) {
      return Status::DataLoss(path + ": " + (r->file_size() < e.bytes() ? "truncated" : "size mismatch") + ": " +
                              std::to_string(r->file_size()) + " bytes, the manifest says " +
                              std::to_string(e.bytes()));
    }
    if (static_cast<uint64_t>(r->num_records()) != e.num_samples()) {
      return Status::DataLoss(path + ": " + std::to_string(r->num_records()) + " records, the manifest says " +
                              std::to_string(e.num_samples()));
    }
    for (int64_t i = 0; i < r->num_records(); ++i) {
      if (r->record_size(i) != d->record_bytes_) {
        return Status::DataLoss(path + ": record " + std::to_string(i) + " has " + std::to_string(r->record_size(i)) +
                                " bytes, the schema wants " + std::to_string(d->record_bytes_));
      }
    }
    d->starts_.push_back(start);
    start += r->num_records();
    d->shards_.push_back(std::move(r));
  }
  d->starts_.push_back(start);
  if (verify_checksums) DT_RETURN_IF_ERROR(d->Verify());
  *out = std::move(d);
  return Status::OK();
}

Status Dataset::Read(int64_t index, void* buf) const {
  DT_CHECK_ARG(index >= 0 && index < size(), dir_ << ": sample " << index << " of " << size());
  // The shard whose range [starts_[s], starts_[s+1]) holds index.
  const auto it = std::upper_bound(starts_.begin(), starts_.end(), index);
  const size_t s = static_cast<size_t>(it - starts_.begin()) - 1;
  return shards_[s]->Read(index - starts_[s], buf, record_bytes_);
}

Status Dataset::Verify(std::vector<std::string>* report, bool check_tokens) const {
  Status first;
  for (int i = 0; i < manifest_.shards_size(); ++i) {
    const proto::ShardEntry& e = manifest_.shards(i);
    const std::string path = dir_ + "/" + e.file();
    uint32_t crc = 0;
    uint64_t bytes = 0;
    Status st = FileCrc32c(path, &crc, &bytes);
    if (st.ok() && bytes != e.bytes()) {
      st = Status::DataLoss(path + ": " + (bytes < e.bytes() ? "truncated" : "size mismatch") + ": " +
                            std::to_string(bytes) + " bytes, the manifest says " + std::to_string(e.bytes()));
    } else if (st.ok() && crc != e.crc32c()) {
      st = Status::DataLoss(path + ": checksum mismatch: CRC32C " + Hex32(crc) + ", the manifest says " +
                            Hex32(e.crc32c()));
    }
    if (st.ok() && check_tokens) st = CheckTokens(static_cast<size_t>(i), path);
    if (report != nullptr) report->push_back(st.ok() ? path + ": ok" : st.ToString());
    if (!st.ok() && first.ok()) first = st;
  }
  return first;
}

Status Dataset::CheckTokens(size_t shard, const std::string& path) const {
  const proto::DatasetSchema& s = schema();
  if (s.kind() != proto::DatasetSchema::TOKENS || s.vocab_size() <= 0 || shard + 1 >= starts_.size()) {
    return Status::OK();
  }
  const size_t width = s.token_dtype() == proto::DatasetSchema::UINT32 ? 4 : 2;
  std::vector<uint8_t> rec(record_bytes_);
  for (int64_t i = starts_[shard]; i < starts_[shard + 1]; ++i) {
    DT_RETURN_IF_ERROR(Read(i, rec.data()));
    for (size_t j = 0; j + width <= rec.size(); j += width) {
      uint32_t tok = 0;
      std::memcpy(&tok, rec.data() + j, width);  // little-endian: the low bytes first
      if (static_cast<int64_t>(tok) >= s.vocab_size()) {
        return Status::DataLoss(path + ": record " + std::to_string(i - starts_[shard]) + " holds token " +
                                std::to_string(tok) + " at position " + std::to_string(j / width) +
                                ", not below the manifest's vocab_size " + std::to_string(s.vocab_size()));
      }
    }
  }
  return Status::OK();
}

std::string Dataset::Describe() const {
  std::ostringstream os;
  const auto& s = schema();
  os << "dataset " << dir_ << "\n  format_version " << manifest_.format_version() << "\n  kind "
     << proto::DatasetSchema::Kind_Name(s.kind()) << "\n  dims [";
  for (int i = 0; i < s.dims_size(); ++i) os << (i ? ", " : "") << s.dims(i);
  os << "]\n";
  if (s.kind() == proto::DatasetSchema::IMAGE) {
    os << "  labels " << (s.has_label() ? std::to_string(s.num_classes()) + " classes" : "none") << "\n  pixel mean "
       << s.pixel_mean() << " std " << s.pixel_std() << "\n";
  } else {
    os << "  token dtype " << proto::DatasetSchema::TokenDType_Name(s.token_dtype()) << ", vocab " << s.vocab_size()
       << "\n";
    if (s.has_tokenizer()) {
      const proto::TokenizerInfo& t = s.tokenizer();
      os << "  tokenizer " << t.kind();
      for (const auto& f : t.files()) os << " " << f;
      if (t.files_size() > 0) os << " (crc32c " << Hex32(t.crc32c()) << ")";
      os << ", end of text " << (t.eot_token() >= 0 ? std::to_string(t.eot_token()) : std::string("none")) << "\n";
    }
  }
  os << "  record bytes " << record_bytes_ << "\n  samples " << size() << "\n  source " << manifest_.source()
     << "\n  shards " << manifest_.shards_size() << "\n";
  for (const auto& e : manifest_.shards()) {
    os << "    " << e.file() << "  samples " << e.num_samples() << "  bytes " << e.bytes() << "  crc32c "
       << Hex32(e.crc32c()) << "\n";
  }
  return os.str();
}

}  // namespace dtrain::data
